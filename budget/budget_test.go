package budget_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/budget"
	"github.com/sluice-dev/sluice/internal/budgettest"
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
