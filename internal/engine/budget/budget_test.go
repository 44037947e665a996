package budget_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/testkit/budgettest"
)

func TestLocal(t *testing.T) {
	budgettest.Run(t, func(*testing.T) budget.Budget { return budget.NewLocal() })
}

// TestLocalNamesTheBucketWhenBothRefuse: with every permit in use and a
// bucket short, the refusal names the bucket (a free permit would not let
// the request go) with its wait.
func TestLocalNamesTheBucketWhenBothRefuse(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := budget.NewLocal()
	one := budget.Demand{1, 100, 600}
	taken, r, _ := b.TryTake(t0, 1, 0, one)
	if r != budget.Granted {
		t.Fatal(r)
	}
	// 60,000 output tokens a minute, 500 left: 100 short, 0.1 s of refill.
	b.Observe(t0, budget.View{budget.OutputTokens: {Known: true, Limit: 60_000, Remaining: 500}}, taken)
	if _, r, wait := b.TryTake(t0, 1, 0, one); r != budget.ByOutputTokens || wait != 100*time.Millisecond {
		t.Errorf("both refuse: %v wait %v, want output_tokens for 100ms", r, wait)
	}
	b.Settle(t0, taken, one)
	if _, r, _ := b.TryTake(t0.Add(time.Second), 0, 0, one); r != budget.ByConcurrency {
		t.Errorf("only the permits refuse: %v, want concurrency", r)
	}
}

// TestLocalCountsWhatOthersSpent: a remaining lower than the budget's
// level, beyond the slack, is spending the budget did not do (a
// colleague's); Lowered sums it, and sluice's own charges are not in it.
func TestLocalCountsWhatOthersSpent(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	b := budget.NewLocal()
	view := func(rem float64) budget.View {
		return budget.View{budget.Requests: {Known: true, Limit: 600, Remaining: rem}}
	}
	g, _, _ := b.TryTake(t0, 10, 0, budget.Demand{1})
	b.Observe(t0, view(600), g) // first sight: the level is the remaining
	b.Settle(t0, g, budget.Demand{1})
	g, _, _ = b.TryTake(t0, 10, 0, budget.Demand{1}) // own charge: 599
	b.Observe(t0, view(599), g)
	if got := b.Snapshot(t0).Buckets[budget.Requests].Lowered; got != 0 {
		t.Fatalf("Lowered %v after only sluice's own spending, want 0", got)
	}
	b.Settle(t0, g, budget.Demand{1})
	g, _, _ = b.TryTake(t0, 10, 0, budget.Demand{1}) // 598 by the model
	b.Observe(t0, view(548), g)                      // a colleague took 50
	if got := b.Snapshot(t0).Buckets[budget.Requests].Lowered; got != 50 {
		t.Errorf("Lowered %v, want the colleague's 50", got)
	}
	b.Settle(t0, g, budget.Demand{1})
}
