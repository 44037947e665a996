// Package lane is the controller of one organization × model pool: how many
// requests it may have in flight and when it may send the next one.
//
// One lane combines, as one controller:
//   - a warm-up ramp: the concurrency ceiling starts low and doubles every
//     RampDoubling up to the etiquette cap, because a sharp rise trips the
//     API's acceleration limits;
//   - AIMD on the concurrency limit: additive increase (+1 per limit's
//     worth of clean completions while the lane is busy) and multiplicative
//     decrease on 429/529/5xx, at most once per Window so one burst of
//     simultaneous 429s cuts once, not 2^k times;
//   - a pause of the whole lane for retry-after;
//   - the Budget: permits, and RPM / ITPM / OTPM buckets fed by the
//     rate-limit headers of every response, with input tokens estimated
//     locally and corrected from usage, output tokens from a learned mean;
//   - a reserve for colleagues: the lane never spends the last Reserve
//     fraction of any bucket, and does not grow while a bucket is below it.
//
// Every method takes the time; the lane never sleeps. It is safe for
// concurrent use.
package lane

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/budget"
)

// Config tunes a lane. Zero fields take the defaults noted.
type Config struct {
	// Cap is the etiquette cap on concurrency (required, ≥ 1).
	Cap int
	// Start is the first concurrency ceiling (default max(4, Cap/8),
	// at most Cap).
	Start int
	// RampDoubling is how often the ramp ceiling doubles (default 5 s).
	RampDoubling time.Duration
	// Decrease multiplies the limit on a 429/529/5xx (default 0.7).
	Decrease float64
	// Window is the least time between two decreases (default 2 s, or the
	// mean latency if longer).
	Window time.Duration
	// Reserve is the fraction of every bucket left for colleagues
	// (default 0.15; negative means none).
	Reserve float64
	// MinLimit is the floor of the concurrency limit (default 1).
	MinLimit int
	// InitialOutput is the output-token expectation before any answer
	// (default min(max_tokens, 256) per request, see Demand).
	InitialOutput float64
}

func (c *Config) defaults() {
	if c.Cap < 1 {
		c.Cap = 1
	}
	if c.Start <= 0 {
		c.Start = max(4, c.Cap/8)
	}
	c.Start = min(c.Start, c.Cap)
	if c.RampDoubling <= 0 {
		c.RampDoubling = DefaultRampDoubling
	}
	if c.Decrease <= 0 || c.Decrease >= 1 {
		c.Decrease = 0.7
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Reserve == 0 {
		c.Reserve = 0.15
	}
	if c.Reserve < 0 {
		c.Reserve = 0
	}
	if c.MinLimit <= 0 {
		c.MinLimit = 1
	}
}

// Default timings, in real time.
const (
	DefaultRampDoubling = 5 * time.Second
	DefaultWindow       = 2 * time.Second
)

// ForTimeScale is the default configuration on a clock k times faster
// than real time (a time-scaled simulator): the ramp and the AIMD window
// shrink with it, as the API's acceleration limits and latencies do.
func ForTimeScale(k float64) Config {
	return Config{
		RampDoubling: time.Duration(float64(DefaultRampDoubling) / k),
		Window:       time.Duration(float64(DefaultWindow) / k),
	}
}

// Signal is what an attempt's outcome means to the lane.
type Signal int

// Signals.
const (
	// Clean: an answer (any 2xx, or a final 4xx the request caused).
	Clean Signal = iota
	// Congested: 429 rate limit or 529 overloaded: slow down.
	Congested
	// Failed: 5xx or no response: slow down, the org is in trouble.
	Failed
	// Aborted: nothing reached the server (canceled before sending).
	Aborted
	// Neutral: an answer that says nothing about congestion (a 4xx the
	// request caused, a dead key): no increase, no decrease.
	Neutral
)

// Ticket is what TryAcquire charged; hand it back to Done.
type Ticket struct {
	charged budget.Demand // what the request was expected to cost
	taken   budget.Demand // what the budget deducted for it
	est     float64       // the input estimate before correction
	at      time.Time
}

// Result is what the lane learns from a finished attempt.
type Result struct {
	Signal Signal
	// Headers of the response, if any.
	Limits api.RateLimitHeaders
	// RetryAfter pauses the whole lane when > 0.
	RetryAfter time.Duration
	// Usage of an answer: input tokens that count toward ITPM (uncached +
	// cache writes) and output tokens. Zero when the server did not answer.
	InputTokens, OutputTokens float64
	// Reached is false when the request surely did not reach the server.
	Reached bool
	Latency time.Duration
}

// Lane is the controller. Create it with New.
type Lane struct {
	cfg    Config
	budget budget.Budget

	mu           sync.Mutex
	started      time.Time
	aimd         float64 // the AIMD limit, ≤ Cap
	lastDecrease time.Time
	pausedUntil  time.Time
	inScale      float64 // EWMA of actual / estimated input tokens
	outMean      float64 // EWMA of output tokens; 0 until the first answer
	latency      float64 // EWMA of latency, seconds
	lowHeadroom  bool    // a bucket fell under the reserve in the last headers
	stats        Stats
	waiting      bool // a Waited period is open: since waitSince, for waitWhy
	waitWhy      Wait
	waitSince    time.Time
}

// Stats counts a lane's life.
type Stats struct {
	Admitted   int64
	Clean      int64
	Congested  int64
	Failed     int64
	Decreases  int64
	Pauses     int64
	Refusals   [5]int64 // by budget.Refusal, counted when work was waiting
	PausedTime time.Duration
	// Waited is how long work waited on the lane, by what held it back:
	// a period starts at a refusal and ends at the next admission, at a
	// refusal for another reason, or at Idle (the dispatcher's: nothing of
	// the lane's pool queued, the lane dead, or the run stopping). Unlike
	// Refusals, which count how often the dispatcher asked, it says which
	// limit bound the lane. When a bucket and the concurrency limit both
	// refuse, the in-process budget names the bucket; the fleet's names
	// its permits.
	Waited [NumWaits]time.Duration
}

// Wait says what held work back on a lane.
type Wait int

// Waits.
const (
	WaitCap          Wait = iota // concurrency at the etiquette cap
	WaitRamp                     // concurrency under the cap: the warm-up ramp or AIMD back-off
	WaitRequests                 // the requests bucket (less the reserve)
	WaitInputTokens              // the input-tokens bucket
	WaitOutputTokens             // the output-tokens bucket
	WaitPause                    // a pause after a 429 or 529 (retry-after)
	NumWaits
)

var waitNames = [NumWaits]string{"etiquette cap", "concurrency (ramp/AIMD)", "requests", "input_tokens", "output_tokens", "retry-after pause"}

func (w Wait) String() string { return waitNames[w] }

// New returns a lane whose ramp starts at now.
func New(cfg Config, b budget.Budget, now time.Time) *Lane {
	cfg.defaults()
	return &Lane{cfg: cfg, budget: b, started: now, aimd: float64(cfg.Cap), inScale: 1}
}

// Config returns the lane's effective configuration.
func (l *Lane) Config() Config { return l.cfg }

// Limit returns the concurrency limit at now: min(Cap, ramp ceiling, AIMD).
func (l *Lane) Limit(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limitLocked(now)
}

func (l *Lane) limitLocked(now time.Time) int {
	ramp := float64(l.cfg.Start) * math.Exp2(now.Sub(l.started).Seconds()/l.cfg.RampDoubling.Seconds())
	lim := math.Min(math.Min(float64(l.cfg.Cap), ramp), l.aimd)
	return max(l.cfg.MinLimit, int(lim))
}

// Demand returns what a request of estInput input tokens and maxTokens is
// charged: input corrected by the learned ratio, output by the learned mean
// (capped by maxTokens).
func (l *Lane) Demand(estInput, maxTokens float64) budget.Demand {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.outMean
	if out == 0 {
		out = l.cfg.InitialOutput
		if out == 0 {
			out = 256
		}
	}
	if maxTokens > 0 {
		out = math.Min(out, maxTokens)
	}
	return budget.Demand{1, math.Ceil(estInput * l.inScale), math.Ceil(out)}
}

// TryAcquire admits one request of demand d at now, or says why not and,
// when the wait is known (a pause or a bucket), for how long. A refusal by
// concurrency has wait 0: wait for a Done.
func (l *Lane) TryAcquire(now time.Time, d budget.Demand, estInput float64) (Ticket, budget.Refusal, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.pausedUntil) {
		l.waitFor(now, WaitPause)
		return Ticket{}, budget.ByRequests, l.pausedUntil.Sub(now)
	}
	limit := l.limitLocked(now)
	taken, r, wait := l.budget.TryTake(now, limit, l.cfg.Reserve, d)
	if r != budget.Granted {
		l.stats.Refusals[r]++
		var why Wait
		switch r {
		case budget.ByConcurrency:
			why = WaitRamp
			if limit >= l.cfg.Cap {
				why = WaitCap
			}
		case budget.ByRequests:
			why = WaitRequests
		case budget.ByInputTokens:
			why = WaitInputTokens
		case budget.ByOutputTokens:
			why = WaitOutputTokens
		default:
			panic(fmt.Sprintf("lane: refusal %d has no wait kind", r))
		}
		l.waitFor(now, why)
		return Ticket{}, r, wait
	}
	l.endWait(now)
	l.stats.Admitted++
	return Ticket{charged: d, taken: taken, est: estInput, at: now}, budget.Granted, 0
}

// Idle says no work waits for the lane at now: an open Waited period
// ends.
func (l *Lane) Idle(now time.Time) {
	l.mu.Lock()
	l.endWait(now)
	l.mu.Unlock()
}

// waitFor opens a Waited period for why at now, ending one for another
// reason. Requires l.mu.
func (l *Lane) waitFor(now time.Time, why Wait) {
	if l.waiting && l.waitWhy == why {
		return
	}
	l.endWait(now)
	l.waiting, l.waitWhy, l.waitSince = true, why, now
}

// endWait ends the open Waited period, if any, at now. Requires l.mu.
func (l *Lane) endWait(now time.Time) {
	if l.waiting {
		l.stats.Waited[l.waitWhy] += max(now.Sub(l.waitSince), 0)
		l.waiting = false
	}
}

// Done settles an admitted attempt with what came of it.
func (l *Lane) Done(now time.Time, t Ticket, r Result) {
	actual := budget.Demand{}
	if r.Reached {
		// The server charged the request; an answer's usage says exactly
		// what, a failure is assumed to have cost what was estimated.
		actual = t.charged
		switch {
		case r.Signal == Neutral:
			actual = budget.Demand{1, 0, 0} // refused before the model ran
		case r.Signal == Clean && (r.InputTokens > 0 || r.OutputTokens > 0):
			actual = budget.Demand{1, r.InputTokens, r.OutputTokens}
		}
	}
	l.budget.Settle(now, t.taken, actual)
	if r.Limits.Requests.Present || r.Limits.InputTokens.Present || r.Limits.OutputTokens.Present {
		l.budget.Observe(now, r.Limits)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	const alpha = 0.05
	if r.Latency > 0 {
		if l.latency == 0 {
			l.latency = r.Latency.Seconds()
		} else {
			l.latency += alpha * (r.Latency.Seconds() - l.latency)
		}
	}
	l.lowHeadroom = false
	for _, s := range []api.LimitState{r.Limits.Requests, r.Limits.InputTokens, r.Limits.OutputTokens} {
		if s.Present && s.Fraction() < l.cfg.Reserve {
			l.lowHeadroom = true
		}
	}
	switch r.Signal {
	case Clean:
		l.stats.Clean++
		if r.OutputTokens > 0 {
			if l.outMean == 0 {
				l.outMean = r.OutputTokens
			} else {
				l.outMean += alpha * (r.OutputTokens - l.outMean)
			}
		}
		if r.InputTokens > 0 && t.est > 0 {
			l.inScale += alpha * (r.InputTokens/t.est - l.inScale)
		}
		// Additive increase: +1 per limit's worth of clean answers, only
		// while the lane is near its limit and no bucket is in the reserve.
		lim := float64(l.limitLocked(now))
		inUse := float64(l.budget.Snapshot(now).InUse)
		if !l.lowHeadroom && inUse+1 >= lim/2 && l.aimd < float64(l.cfg.Cap) {
			l.aimd = math.Min(float64(l.cfg.Cap), l.aimd+1/math.Max(1, l.aimd))
		}
	case Congested, Failed:
		if r.Signal == Congested {
			l.stats.Congested++
		} else {
			l.stats.Failed++
		}
		window := max(l.cfg.Window, time.Duration(l.latency*float64(time.Second)))
		// Only an attempt sent after the last cut may cut again: the rest
		// of a burst was already in flight when the first 429 came back.
		if t.at.After(l.lastDecrease) && now.Sub(l.lastDecrease) >= window {
			cur := float64(l.limitLocked(now))
			l.aimd = math.Max(float64(l.cfg.MinLimit), cur*l.cfg.Decrease)
			l.lastDecrease = now
			l.stats.Decreases++
		}
	}
	if r.RetryAfter > 0 {
		if until := now.Add(r.RetryAfter); until.After(l.pausedUntil) {
			if now.Before(l.pausedUntil) {
				l.stats.PausedTime += until.Sub(l.pausedUntil)
			} else {
				l.stats.PausedTime += r.RetryAfter
			}
			l.pausedUntil = until
			l.stats.Pauses++
		}
	}
}

// Headroom scores the lane for routing at now: the smaller of its free
// concurrency fraction and its fullest-constrained bucket above the
// reserve. 0 when paused or full; higher is better.
func (l *Lane) Headroom(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.pausedUntil) {
		return 0
	}
	lim := float64(l.limitLocked(now))
	s := l.budget.Snapshot(now)
	h := (lim - float64(s.InUse)) / lim
	for _, b := range s.Buckets {
		if b.Known {
			h = math.Min(h, b.Fraction-l.cfg.Reserve)
		}
	}
	return math.Max(0, h)
}

// State is a lane's state for displays and reports.
type State struct {
	Limit       int
	Cap         int
	InFlight    int
	Paused      bool
	LowHeadroom bool
	OutMean     float64
	InScale     float64
	Latency     time.Duration
	Buckets     [budget.NumDims]budget.BucketState
	Stats       Stats
}

// State returns a snapshot at now.
func (l *Lane) State(now time.Time) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.budget.Snapshot(now)
	st := State{
		Limit: l.limitLocked(now), Cap: l.cfg.Cap, InFlight: s.InUse,
		Paused: now.Before(l.pausedUntil), LowHeadroom: l.lowHeadroom,
		OutMean: l.outMean, InScale: l.inScale,
		Latency: time.Duration(l.latency * float64(time.Second)),
		Buckets: s.Buckets, Stats: l.stats,
	}
	if l.waiting { // the open period, up to now
		st.Stats.Waited[l.waitWhy] += max(now.Sub(l.waitSince), 0)
	}
	return st
}
