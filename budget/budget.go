// Package budget holds what one lane (organization × model pool) may spend:
// concurrency permits and the RPM, ITPM and OTPM token buckets, kept level
// with the server's view from the rate-limit headers. Local is the
// in-process implementation; a fleet-wide one shared by several processes
// implements the same interface.
package budget

import (
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Dim indexes the three rate-limited dimensions.
type Dim int

// The dimensions, in header order.
const (
	Requests Dim = iota
	InputTokens
	OutputTokens
	NumDims
)

var dimNames = [NumDims]string{"requests", "input_tokens", "output_tokens"}

func (d Dim) String() string { return dimNames[d] }

// Demand is what one request is charged: one request, its estimated input
// tokens, its expected output tokens.
type Demand [NumDims]float64

// Refusal says why TryTake said no.
type Refusal int

// Refusals.
const (
	// Granted: not a refusal.
	Granted Refusal = iota
	// ByConcurrency: every permit is in use; wait for a release.
	ByConcurrency
	// ByRequests, ByInputTokens, ByOutputTokens: a bucket (less the reserve)
	// cannot hold the demand yet; the wait says how long until it can.
	ByRequests
	ByInputTokens
	ByOutputTokens
)

var refusalNames = [...]string{"granted", "concurrency", "requests", "input_tokens", "output_tokens"}

func (r Refusal) String() string { return refusalNames[r] }

// Budget is what a lane spends through. Every method takes the time; none
// blocks. Implementations are safe for concurrent use.
type Budget interface {
	// TryTake takes one permit, if fewer than limit are in use, and the
	// demand's tokens, if every known bucket holds them above its reserve
	// (a fraction of its capacity left for colleagues). It returns what it
	// deducted (zero for buckets not known yet), to hand back to Settle. On
	// refusal it says why and, for a bucket, how long until it would fit;
	// which reason wins when several hold is the implementation's.
	TryTake(now time.Time, limit int, reserve float64, d Demand) (Demand, Refusal, time.Duration)
	// Settle returns the permit of a grant that deducted taken and trues
	// the buckets up to actual (zero when nothing reached the server).
	Settle(now time.Time, taken, actual Demand)
	// Observe corrects the buckets from the rate-limit headers of a
	// response: the server's remaining is the truth when it is lower.
	Observe(now time.Time, h api.RateLimitHeaders)
	// Snapshot reports permits in use and bucket levels.
	Snapshot(now time.Time) Snapshot
}

// Snapshot is a budget's state at one instant.
type Snapshot struct {
	InUse   int
	Buckets [NumDims]BucketState
}

// BucketState is one bucket. Known is false until headers gave a limit.
type BucketState struct {
	Known    bool
	Limit    float64 // per minute
	Level    float64
	Fraction float64 // Level / Limit, 1 when unknown
}

// Local is the in-process Budget. The zero value is not usable; call
// NewLocal.
type Local struct {
	mu      sync.Mutex
	inUse   int
	buckets [NumDims]bucket
}

// NewLocal returns a budget with no permits in use and unknown buckets
// (unlimited until the first headers arrive).
func NewLocal() *Local { return &Local{} }

// bucket is a continuous-refill bucket whose capacity and rate follow the
// server's per-minute limit. Requires the owner's lock.
type bucket struct {
	known bool
	limit float64 // per minute = capacity
	level float64
	last  time.Time
}

func (b *bucket) advance(now time.Time) {
	if !b.known {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(b.limit, b.level+dt*b.limit/60)
		b.last = now
	}
}

// need returns how long until n tokens fit above the reserve; 0 if now.
// A demand larger than the usable bucket fits once the bucket is full, so
// an oversized request is slow, never stuck.
func (b *bucket) need(now time.Time, n, reserve float64) time.Duration {
	if !b.known || n <= 0 {
		return 0
	}
	b.advance(now)
	usable := b.level - reserve*b.limit
	want := math.Min(n, (1-reserve)*b.limit)
	if usable >= want {
		return 0
	}
	return time.Duration((want - usable) / (b.limit / 60) * float64(time.Second))
}

// TryTake implements Budget.
func (l *Local) TryTake(now time.Time, limit int, reserve float64, d Demand) (Demand, Refusal, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The buckets first: when a bucket and the permits both refuse, the
	// bucket is what binds (a free permit would not let the request go),
	// and its wait is the one worth waking for.
	worst, wait := Granted, time.Duration(0)
	for i := range l.buckets {
		if w := l.buckets[i].need(now, d[i], reserve); w > wait {
			worst, wait = ByRequests+Refusal(i), w
		}
	}
	if worst != Granted {
		return Demand{}, worst, wait
	}
	if l.inUse >= limit {
		return Demand{}, ByConcurrency, 0
	}
	l.inUse++
	var taken Demand
	for i := range l.buckets {
		if l.buckets[i].known {
			l.buckets[i].level -= d[i]
			taken[i] = d[i]
		}
	}
	return taken, Granted, 0
}

// Settle implements Budget.
func (l *Local) Settle(now time.Time, taken, actual Demand) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse--
	for i := range l.buckets {
		b := &l.buckets[i]
		if b.known {
			b.advance(now)
			b.level = math.Min(b.limit, b.level+taken[i]-actual[i])
		}
	}
}

// Observe implements Budget.
func (l *Local) Observe(now time.Time, h api.RateLimitHeaders) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range [NumDims]api.LimitState{h.Requests, h.InputTokens, h.OutputTokens} {
		if !s.Present || s.Limit <= 0 {
			continue
		}
		b := &l.buckets[i]
		rem := math.Max(0, float64(s.Remaining))
		if !b.known || b.limit != float64(s.Limit) {
			*b = bucket{known: true, limit: float64(s.Limit), level: math.Min(rem, float64(s.Limit)), last: now}
			continue
		}
		b.advance(now)
		b.level = math.Min(b.level, rem)
	}
}

// Snapshot implements Budget.
func (l *Local) Snapshot(now time.Time) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{InUse: l.inUse}
	for i := range l.buckets {
		b := &l.buckets[i]
		b.advance(now)
		st := BucketState{Known: b.known, Limit: b.limit, Level: b.level, Fraction: 1}
		if b.known && b.limit > 0 {
			st.Fraction = math.Max(0, b.level/b.limit)
		}
		s.Buckets[i] = st
	}
	return s
}
