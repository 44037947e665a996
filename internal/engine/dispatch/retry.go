package dispatch

import (
	"math"
	"time"
)

// RetryPolicy bounds how often one request is tried. Rate-limit signals
// (429, 529) and failures (5xx, no response) have separate budgets, so a
// storm of 429s — which are pacing, not failure — cannot exhaust the budget
// meant for a sick server. Auth failures cost no attempt: the request moves
// to a live key.
type RetryPolicy struct {
	// MaxCongested is the most 429/529 answers one request may get
	// (default 30).
	MaxCongested int
	// MaxFailed is the most 5xx answers or lost connections one request may
	// get (default 6).
	MaxFailed int
	// BaseBackoff and MaxBackoff shape the full-jitter backoff. BaseBackoff
	// 0 (the default) is a quarter of the lane's mean latency, between
	// MinBase and MaxBase: the engine's clock is what it observes, so a
	// world that answers ten times faster is retried ten times sooner.
	// MaxBackoff defaults to 30 s.
	BaseBackoff, MaxBackoff time.Duration
}

// The bounds of the latency-derived base backoff.
const (
	MinBase = 10 * time.Millisecond
	MaxBase = 500 * time.Millisecond
)

func (p *RetryPolicy) defaults() {
	if p.MaxCongested <= 0 {
		p.MaxCongested = 30
	}
	if p.MaxFailed <= 0 {
		p.MaxFailed = 6
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 30 * time.Second
	}
}

// base is the backoff of a first retry on a lane of mean latency lat.
func (p RetryPolicy) base(lat time.Duration) time.Duration {
	if p.BaseBackoff > 0 {
		return p.BaseBackoff
	}
	return min(MaxBase, max(MinBase, lat/4))
}

// Backoff returns the delay before retry number n (1 for the first retry)
// on a lane of mean latency lat: full jitter, u·min(MaxBackoff,
// base·2^(n-1)) with u uniform in [0,1) supplied by the caller, so the
// policy is a pure function. A server hint (retry-after, already capped)
// wins when it is longer, plus a little jitter so a crowd told "1 s" does
// not return in one instant.
func (p RetryPolicy) Backoff(n int, lat, hint time.Duration, hasHint bool, u float64) time.Duration {
	ceil := math.Min(float64(p.MaxBackoff), float64(p.base(lat))*math.Exp2(float64(max(0, n-1))))
	d := time.Duration(u * ceil)
	if hasHint {
		spread := time.Duration(u * 0.1 * float64(hint))
		if h := hint + spread; h > d {
			d = h
		}
	}
	return d
}
