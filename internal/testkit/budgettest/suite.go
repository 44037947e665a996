// Package budgettest is the behavioural suite every budget.Budget
// implementation must pass: the in-process one and the fleet-wide one run
// the same tests.
package budgettest

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/budget"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// headers is the view of full-minute buckets (depth = limit).
func headers(rpm, rpmRem, in, inRem, out, outRem float64) budget.View {
	st := func(l, r float64) budget.DimView {
		return budget.DimView{Known: true, Limit: l, Depth: l, Remaining: r}
	}
	return budget.View{budget.Requests: st(rpm, rpmRem), budget.InputTokens: st(in, inRem), budget.OutputTokens: st(out, outRem)}
}

// shallow is a requests-only view of a bucket of depth holding rem.
func shallow(rpm, depth, rem float64) budget.View {
	return budget.View{budget.Requests: {Known: true, Limit: rpm, Depth: depth, Remaining: rem}}
}

// Run runs the suite; newBudget must return a fresh, empty budget each call.
func Run(t *testing.T, newBudget func(t *testing.T) budget.Budget) {
	// A raise counts what was spent since the answered request's grant as
	// possibly unseen by the server; a refund of an earlier grant (a 429,
	// an actual below the estimate) is not such spending and must not
	// offset it, or the level rises above what the server says remains.
	calmAt := func(t *testing.T, b budget.Budget, v func(float64) budget.View, rem float64) {
		for range budget.RaiseAfter + 2 {
			g, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 0})
			b.Observe(t0, v(rem), g)
			b.Settle(t0, g, budget.Demand{1, 0})
		}
	}
	inputView := func(rem float64) budget.View {
		return budget.View{budget.InputTokens: {Known: true, Limit: 600_000, Depth: 100_000, Remaining: rem, Slack: 500}}
	}
	t.Run("a refund of an earlier grant is not unseen spending", func(t *testing.T) {
		b := newBudget(t)
		calmAt(t, b, inputView, 50_000)
		a, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 10_000}) // A: 10,000 estimated
		g, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1_000})  // B: 1,000
		b.Settle(t0, a, budget.Demand{})                          // A answered 429: nothing charged
		b.Observe(t0, inputView(49_000), g)                       // the server charged B only
		b.Settle(t0, g, budget.Demand{1, 1_000})
		if lv := b.Snapshot(t0).Buckets[budget.InputTokens].Level; lv > 49_000+500 {
			t.Errorf("level %.0f above what the server says remains (49,000 ± 500)", lv)
		}
	})
	t.Run("a refund does not offset a later grant's spending", func(t *testing.T) {
		b := newBudget(t)
		calmAt(t, b, inputView, 50_000)
		a, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 10_000}) // A: 10,000 estimated
		g, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1_000})  // B: 1,000
		c, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 9_500})  // C, after B: 9,500
		b.Settle(t0, a, budget.Demand{})                          // A: 429, refunded
		b.Observe(t0, inputView(49_000), g)                       // B's answer, before C reached the server
		// The model: 50,000 − 1,000 − 9,500 = 39,500; a raise would have
		// to ignore C.
		if lv := b.Snapshot(t0).Buckets[budget.InputTokens].Level; lv > 39_500+500 {
			t.Errorf("level %.0f: a raise counted A's refund against C's 9,500 (want about 39,500)", lv)
		}
		b.Settle(t0, g, budget.Demand{1, 1_000})
		b.Settle(t0, c, budget.Demand{1, 9_500})
	})
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
		b.Settle(t0, budget.Grant{}, budget.Demand{})
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
		b.Observe(t0, headers(60, 2, 6000, 6000, 600, 600), budget.Grant{})
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
		b.Observe(t0, headers(600, 600, 60000, 60000, 6000, 6000), budget.Grant{})
		b.Observe(t0, headers(600, 100, 60000, 60000, 6000, 6000), budget.Grant{}) // colleagues spent 500
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 100 {
			t.Fatalf("level %v, want the server's 100", lvl)
		}
		b.Observe(t0, headers(600, 600, 60000, 60000, 6000, 6000), budget.Grant{}) // a stale, higher report
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 100 {
			t.Fatalf("level %v: a higher report must not raise the local level", lvl)
		}
	})
	t.Run("reserve is never spent", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(100, 100, 1e6, 1e6, 1e6, 1e6), budget.Grant{})
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
		b.Observe(t0, headers(1000, 1000, 10000, 10000, 1000, 1000), budget.Grant{})
		g, r, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1000, 500})
		if r != budget.Granted || g.Taken != (budget.Demand{1, 1000, 500}) {
			t.Fatal(r, g)
		}
		b.Settle(t0, g, budget.Demand{1, 1200, 100})
		s := b.Snapshot(t0)
		if in, out := s.Buckets[budget.InputTokens].Level, s.Buckets[budget.OutputTokens].Level; in != 8800 || out != 900 {
			t.Fatalf("levels in %v out %v, want 8800 and 900 after usage 1200/100", in, out)
		}
	})
	t.Run("a bucket unknown at the grant is not charged at settle", func(t *testing.T) {
		b := newBudget(t)
		g, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 1000, 500}) // buckets unknown: nothing deducted
		if g.Taken != (budget.Demand{}) {
			t.Fatalf("taken %v from unknown buckets", g.Taken)
		}
		// The headers that make the buckets known already count this
		// request: charging it again would count it twice.
		b.Observe(t0, headers(60, 50, 10000, 10000, 5000, 5000), g)
		b.Settle(t0, g, budget.Demand{1, 1000, 500})
		s := b.Snapshot(t0)
		if r, out := s.Buckets[budget.Requests].Level, s.Buckets[budget.OutputTokens].Level; r != 50 || out != 5000 {
			t.Fatalf("levels %v / %v, want the server's 50 / 5000", r, out)
		}
	})
	t.Run("oversized demand fits a full bucket", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(1000, 1000, 1000, 1000, 1000, 1000), budget.Grant{})
		if _, r, _ := b.TryTake(t0, 10, 0.15, budget.Demand{1, 5000, 1}); r != budget.Granted {
			t.Fatalf("a request larger than the bucket must pass a full bucket: %v", r)
		}
		if _, r, w := b.TryTake(t0, 10, 0.15, budget.Demand{1, 5000, 1}); r != budget.ByInputTokens || w <= 0 {
			t.Fatalf("and then wait: %v %v", r, w)
		}
	})
	t.Run("a shallow bucket refills at the limit up to its depth", func(t *testing.T) {
		b := newBudget(t)
		// 600 RPM (10 per second) enforced over one second: 10 deep.
		b.Observe(t0, shallow(600, 10, 10), budget.Grant{})
		n := 0
		for {
			if _, r, _ := b.TryTake(t0, 1000, 0, budget.Demand{1}); r != budget.Granted {
				break
			}
			n++
		}
		if n != 10 {
			t.Fatalf("took %d from a 10-deep bucket", n)
		}
		if lvl := b.Snapshot(at(3 * time.Second)).Buckets[budget.Requests].Level; lvl != 10 {
			t.Fatalf("3 s later the level is %v, want the depth 10, not 30", lvl)
		}
		_, r, w := b.TryTake(at(3*time.Second), 1000, 0, budget.Demand{100})
		if r != budget.Granted || w != 0 {
			t.Fatalf("a demand above the depth must pass a full bucket: %v %v", r, w)
		}
	})
	t.Run("the reserve is a share of the depth, not of the limit", func(t *testing.T) {
		b := newBudget(t)
		// 6000 RPM enforced over one second: 100 deep, 40 left.
		b.Observe(t0, shallow(6000, 100, 40), budget.Grant{})
		n := 0
		for {
			if _, r, _ := b.TryTake(t0, 1000, 0.15, budget.Demand{1}); r != budget.Granted {
				break
			}
			n++
		}
		if n != 25 {
			t.Fatalf("took %d of 40 with a 15%% reserve of the depth 100, want 25", n)
		}
		s := b.Snapshot(t0).Buckets[budget.Requests]
		if s.Depth != 100 || s.Seen != 40 || s.Reserve(0.15) != 15 {
			t.Fatalf("state %+v", s)
		}
	})
	t.Run("a changed limit keeps the level of requests in flight", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, shallow(600, 100, 100), budget.Grant{})
		for range 60 {
			b.TryTake(t0, 1000, 0, budget.Demand{1})
		}
		// The limit doubles; the server's answer was written before our 60
		// requests reached it, so it still shows 100 remaining.
		b.Observe(t0, shallow(1200, 200, 100), budget.Grant{})
		s := b.Snapshot(t0).Buckets[budget.Requests]
		if s.Level != 40 || s.Limit != 1200 || s.Depth != 200 {
			t.Fatalf("after a limit change: %+v, want level 40 (the 60 in flight kept), limit 1200, depth 200", s)
		}
		if lvl := b.Snapshot(at(time.Second)).Buckets[budget.Requests].Level; lvl != 60 {
			t.Fatalf("a second later level %v, want 60: refill at the new 20/s", lvl)
		}
	})
	t.Run("a lower depth caps the level", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, shallow(600, 100, 100), budget.Grant{})
		b.Observe(t0, shallow(600, 30, 100), budget.Grant{})
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 30 {
			t.Fatalf("level %v, want the new depth 30", lvl)
		}
	})
	t.Run("the combined token bucket", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, budget.View{budget.Tokens: {Known: true, Limit: 60000, Depth: 60000, Remaining: 1000}}, budget.Grant{})
		if _, r, _ := b.TryTake(t0, 10, 0, budget.Demand{1, 400, 400, 800}); r != budget.Granted {
			t.Fatalf("800 of 1000: %v", r)
		}
		if _, r, w := b.TryTake(t0, 10, 0, budget.Demand{1, 400, 400, 800}); r != budget.ByTokens || w != 600*time.Millisecond {
			t.Fatalf("800 more with 200 left: %v %v, want tokens for 0.6 s at 1000/s", r, w)
		}
	})
	t.Run("a dimension absent from a view is kept", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, headers(60, 30, 6000, 6000, 600, 600), budget.Grant{})
		b.Observe(t0, budget.View{budget.OutputTokens: {Known: true, Limit: 600, Depth: 600, Remaining: 100}}, budget.Grant{})
		s := b.Snapshot(t0)
		if s.Buckets[budget.Requests].Level != 30 || s.Buckets[budget.OutputTokens].Level != 100 {
			t.Fatalf("levels %+v", s.Buckets)
		}
	})
	t.Run("a model that over-charges is raised by calm, higher reports", func(t *testing.T) {
		b := newBudget(t)
		b.Observe(t0, shallow(6000, 1000, 1000), budget.Grant{})
		// Each request is charged 10 but the server counts 1 of it: its
		// reports stay higher than the model.
		srv := 1000.0
		for i := range 2 * budget.RaiseAfter {
			g, r, _ := b.TryTake(t0, 1000, 0, budget.Demand{10})
			if r != budget.Granted {
				t.Fatalf("take %d: %v", i, r)
			}
			srv--
			b.Observe(t0, shallow(6000, 1000, srv), g)
			b.Settle(t0, g, budget.Demand{10})
		}
		// The server's, less the last request's own charge (it may not
		// have seen it).
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != srv-10 {
			t.Fatalf("level %v, want the server's %v less 10 after %d calm reports", lvl, srv, 2*budget.RaiseAfter)
		}
		// A lower report (a colleague) stops raises until calm again.
		now, _, _ := b.TryTake(t0, 1000, 0, budget.Demand{}) // a grant whose mark is now
		b.Settle(t0, now, budget.Demand{})
		b.Observe(t0, shallow(6000, 1000, 500), now)
		b.Observe(t0, shallow(6000, 1000, 900), now)
		if lvl := b.Snapshot(t0).Buckets[budget.Requests].Level; lvl != 500 {
			t.Fatalf("level %v: a higher report just after a lower one must not raise", lvl)
		}
	})
}
