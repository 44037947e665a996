// Package budgettest is the behavioural suite every budget.Budget
// implementation must pass: the in-process one and the fleet-wide one run
// the same tests.
package budgettest

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/budget"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func headers(rpm, rpmRem, in, inRem, out, outRem int64) api.RateLimitHeaders {
	st := func(l, r int64) api.LimitState {
		return api.LimitState{Present: true, Limit: l, Remaining: r, Reset: t0}
	}
	return api.RateLimitHeaders{Requests: st(rpm, rpmRem), InputTokens: st(in, inRem), OutputTokens: st(out, outRem)}
}

// Run runs the suite; newBudget must return a fresh, empty budget each call.
func Run(t *testing.T, newBudget func(t *testing.T) budget.Budget) {
	t.Run("permits", func(t *testing.T) {
		b := newBudget(t)
		d := budget.Demand{1, 10, 10}
		for i := range 3 {
			if _, r, _ := b.TryTake(t0, 3, 0, d); r != budget.Granted {
				t.Fatalf("take #%d: %v", i+1, r)
			}
		}
		if _, r, w := b.TryTake(t0, 3, 0, d); r != budget.ByConcurrency || w != 0 {
			t.Fatalf("take past the limit: %v %v", r, w)
		}
		b.Settle(t0, budget.Demand{}, budget.Demand{})
		if _, r, _ := b.TryTake(t0, 3, 0, d); r != budget.Granted {
			t.Fatalf("take after settle: %v", r)
		}
		if got := b.Snapshot(t0).InUse; got != 3 {
			t.Fatalf("in use %d want 3", got)
		}
	})
	t.Run("unknown buckets are unlimited", func(t *testing.T) {
		b := newBudget(t)
		if _, r, _ := b.TryTake(t0, 1, 0.15, budget.Demand{1, 1e12, 1e12}); r != budget.Granted {
			t.Fatalf("before any headers: %v", r)
		}
	})
	t.Run("headers set level and pace", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(60, 2, 6000, 6000, 600, 600))
		d := budget.Demand{1, 10, 10}
		for range 2 {
			if _, r, _ := b.TryTake(t0, 100, 0, d); r != budget.Granted {
				t.Fatalf("take: %v", r)
			}
		}
		_, r, w := b.TryTake(t0, 100, 0, d)
		if r != budget.ByRequests || w != time.Second {
			t.Fatalf("third take: %v wait %v, want ByRequests 1s at 60 RPM", r, w)
		}
		if _, r, _ := b.TryTake(at(time.Second), 100, 0, d); r != budget.Granted {
			t.Fatalf("after a second: %v", r)
		}
	})
	t.Run("the lower of local and server remaining wins", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(600, 600, 60000, 60000, 6000, 6000))
		b.Observe(t0, headers(600, 100, 60000, 60000, 6000, 6000)) // colleagues spent 500
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 100 {
			t.Fatalf("level %v, want the server's 100", lvl)
		}
		b.Observe(t0, headers(600, 600, 60000, 60000, 6000, 6000)) // a stale, higher report
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 100 {
			t.Fatalf("level %v: a higher report must not raise the local level", lvl)
		}
	})
	t.Run("reserve is never spent", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(100, 100, 1e6, 1e6, 1e6, 1e6))
		n := 0
		for {
			if _, r, _ := b.TryTake(t0, 1000, 0.15, budget.Demand{1, 1, 1}); r != budget.Granted {
				break
			}
			n++
		}
		if n != 85 {
			t.Fatalf("took %d of 100 with a 15%% reserve, want 85", n)
		}
	})
	t.Run("settle trues tokens up", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(1000, 1000, 10000, 10000, 1000, 1000))
		taken, r, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1000, 500})
		if r != budget.Granted || taken != (budget.Demand{1, 1000, 500}) {
			t.Fatal(r, taken)
		}
		b.Settle(t0, taken, budget.Demand{1, 1200, 100})
		s := b.Snapshot(t0)
		if in, out := s.Buckets[budget.InputTokens].Level, s.Buckets[budget.OutputTokens].Level; in != 8800 || out != 900 {
			t.Fatalf("levels in %v out %v, want 8800 and 900 after usage 1200/100", in, out)
		}
	})
	t.Run("settle returns only what was taken", func(t *testing.T) {
		b := newBudget(t)
		taken, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1000, 500}) // buckets unknown: nothing deducted
		if taken != (budget.Demand{}) {
			t.Fatalf("taken %v from unknown buckets", taken)
		}
		b.Observe(t0, headers(60, 50, 10000, 10000, 5000, 5000))
		b.Settle(t0, taken, budget.Demand{1, 1000, 500})
		s := b.Snapshot(t0)
		if r, out := s.Buckets[budget.Requests].Level, s.Buckets[budget.OutputTokens].Level; r != 49 || out != 4500 {
			t.Fatalf("levels %v / %v, want 49 / 4500: usage charged, nothing refunded", r, out)
		}
	})
	t.Run("oversized demand fits a full bucket", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(1000, 1000, 1000, 1000, 1000, 1000))
		if _, r, _ := b.TryTake(t0, 10, 0.15, budget.Demand{1, 5000, 1}); r != budget.Granted {
			t.Fatalf("a request larger than the bucket must pass a full bucket: %v", r)
		}
		if _, r, w := b.TryTake(t0, 10, 0.15, budget.Demand{1, 5000, 1}); r != budget.ByInputTokens || w <= 0 {
			t.Fatalf("and then wait: %v %v", r, w)
		}
	})
}
