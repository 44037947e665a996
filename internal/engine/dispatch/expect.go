package dispatch

import (
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// meterSize is how many recent admissions a pool's meter remembers.
const meterSize = 64

// poolMeter measures one pool's admissions, for ExpectedWait: the loop
// writes it, any goroutine reads it.
type poolMeter struct {
	mu      sync.Mutex
	times   [meterSize]time.Time // the last admissions, a ring
	n, next int
	waiting int // requests queued for the pool at the loop's last look
}

func (m *poolMeter) admitted(now time.Time) {
	m.mu.Lock()
	m.times[m.next] = now
	m.next = (m.next + 1) % meterSize
	m.n = min(m.n+1, meterSize)
	m.mu.Unlock()
}

func (m *poolMeter) setWaiting(n int) {
	m.mu.Lock()
	m.waiting = n
	m.mu.Unlock()
}

// rate is admissions per second over the remembered ones, 0 when there
// are too few or the last is older than the span they cover (the pool
// stalled since).
func (m *poolMeter) rate(now time.Time) (float64, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n < 2 {
		return 0, m.waiting
	}
	last := m.times[(m.next+meterSize-1)%meterSize]
	first := m.times[(m.next+meterSize-m.n)%meterSize]
	span := last.Sub(first)
	if span <= 0 || now.Sub(last) > span {
		return 0, m.waiting
	}
	return float64(m.n-1) / span.Seconds(), m.waiting
}

// meter returns pool's meter, creating it. Requires nothing: d.mu guards
// the map.
func (d *Dispatcher) meter(pool api.Pool) *poolMeter {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.meters[pool]
	if m == nil {
		m = &poolMeter{}
		d.meters[pool] = m
	}
	return m
}

// ExpectedWait estimates how long a request of pool submitted now would
// wait for capacity: the requests queued ahead of it at the recent rate of
// admission, or — when nothing has been admitted lately — how long until
// the soonest live lane of the pool may send again (the end of a
// retry-after pause or of an open breaker; 0 if one may send now). 0 when
// it would go at once or nothing is known. The proxy's
// retry-after says it, so a caller told to come back does so when there
// is room, not in 1 s. Safe from any goroutine.
func (d *Dispatcher) ExpectedWait(pool api.Pool) time.Duration {
	now := d.now()
	rate, waiting := d.meter(pool).rate(now)
	if rate > 0 {
		return time.Duration(float64(waiting+1) / rate * float64(time.Second))
	}
	held, any := time.Duration(0), false
	for _, ls := range d.liveLanes(pool) {
		if b := ls.l.Blocked(now); !any || b < held {
			held, any = b, true
		}
	}
	return held
}

// liveLanes returns the lanes of pool that a live key may still serve.
// Safe from any goroutine.
func (d *Dispatcher) liveLanes(pool api.Pool) []*laneState {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*laneState
	for _, ls := range d.laneList {
		if ls.pool == pool && ls.org.live.Load() > 0 && !ls.noKey.Load() {
			out = append(out, ls)
		}
	}
	return out
}

// Trouble says whether the API itself holds pool back: client.Overloaded
// when every live lane of the pool is held by 529s (its breaker open, or
// 529s a sustained share of its answers), client.ServerError when every
// one is held by 5xx or lost connections (or some by each), client.OK
// when any lane is not held (or the pool has none). Safe from any
// goroutine.
func (d *Dispatcher) Trouble(pool api.Pool) client.Class {
	trouble, overloaded := false, true
	for _, ls := range d.liveLanes(pool) {
		switch ls.l.Trouble() {
		case lane.Clean:
			return client.OK
		case lane.Failed:
			overloaded = false
		}
		trouble = true
	}
	switch {
	case !trouble:
		return client.OK
	case overloaded:
		return client.Overloaded
	}
	return client.ServerError
}

// MaxRetryAfter is the cap this dispatcher puts on a server's
// retry-after (Config.MaxRetryAfter): whoever tells a caller when to come
// back (the proxy) uses the same bound. Safe from any goroutine.
func (d *Dispatcher) MaxRetryAfter() time.Duration { return d.cfg.MaxRetryAfter }
