package observe

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// TestLiveIsTheLanesWorldNow: a re-plan's world has each live lane's
// header limits, the
// ramp warm at the lanes' least concurrency limit, and the buckets as
// drained as the emptiest lane's are now — not full; a dead lane and
// a lane of another pool are left out, and the base world is not written
// through.
func TestLiveIsTheLanesWorldNow(t *testing.T) {
	a := view("org-a", "high_prio", 600, 40, 6_000, 2*time.Second)
	a.State.Limit = 24
	// 30 of its 100-request depth left.
	a.State.Buckets[budget.Requests] = budget.BucketState{Known: true, Limit: 600, Depth: 100, Level: 30}
	a.State.Buckets[budget.OutputTokens] = budget.BucketState{}
	b := view("org-b", "low_prio", 300, 20, 3_000, 2*time.Second)
	b.State.Limit = 12
	b.State.Buckets[budget.Requests] = budget.BucketState{Known: true, Limit: 300, Depth: 50, Level: 50}
	b.State.Buckets[budget.OutputTokens] = budget.BucketState{}
	dead := view("org-c", "gone", 5000, 10, 1_000, time.Second)
	dead.Dead = true
	other := view("org-d", "haiku-only", 5000, 10, 1_000, time.Second)
	other.Pool = api.PoolHaiku45

	base := plan.NewWorld("your organizations")
	baseLat := len(base.Latency)
	w, prov, err := Live(base, []dispatch.LaneView{a, b, dead, other}, "claude-sonnet-4-5", 256, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Orgs) != 2 || w.Orgs[0].Name != "high_prio" || w.Orgs[1].Name != "low_prio" {
		t.Fatalf("orgs = %+v, want high_prio and low_prio", w.Orgs)
	}
	if got := w.Orgs[0].Limits[api.PoolSonnet4].RPM; got != 600 {
		t.Errorf("high_prio RPM = %v, want its headers' 600", got)
	}
	if w.Ramp.Start != 12 {
		t.Errorf("ramp start = %d, want the least lane limit 12", w.Ramp.Start)
	}
	// high_prio holds 30 of its 100: 70 % drained, the emptiest.
	if got := w.BucketDrained; math.Abs(got-0.7) > 1e-9 {
		t.Errorf("bucket drained = %.3f, want 0.7 (the emptiest lane now)", got)
	}
	if !w.BucketsKnown {
		t.Error("BucketsKnown false with every lane's depth and level from its headers")
	}
	if len(base.Latency) != baseLat {
		t.Error("Live wrote the fitted latency into the base world's map")
	}
	if len(prov) == 0 {
		t.Error("no provenance")
	}
	if _, _, err := Live(base, []dispatch.LaneView{dead, other}, "claude-sonnet-4-5", 256, t0); err == nil {
		t.Error("Live with no live lane of the pool did not fail")
	}
}

// TestLiveBucketsKnownNeedsEveryLanesDepth: a re-plan's buckets are known
// only when every live lane shows a bucket and its depth was learned; a
// lane with only a token bucket (its depth is not learned: the default
// window would be assumed) or with none leaves them assumed.
func TestLiveBucketsKnownNeedsEveryLanesDepth(t *testing.T) {
	base := plan.NewWorld("your organizations")
	tokensOnly := view("org-a", "high_prio", 600, 40, 6_000, 2*time.Second)
	tokensOnly.State.Buckets[budget.Requests] = budget.BucketState{}
	tokensOnly.State.Buckets[budget.OutputTokens] = budget.BucketState{Known: true, Limit: 80_000, Depth: 80_000 / 6}
	none := view("org-b", "low_prio", 300, 20, 3_000, 2*time.Second)
	none.State.Buckets[budget.Requests] = budget.BucketState{}
	none.State.Buckets[budget.OutputTokens] = budget.BucketState{}
	both := view("org-c", "third", 300, 20, 3_000, 2*time.Second)
	for _, tt := range []struct {
		name  string
		views []dispatch.LaneView
		want  bool
	}{
		{"a token bucket only", []dispatch.LaneView{tokensOnly}, false},
		{"one lane without buckets", []dispatch.LaneView{both, none}, false},
		{"every lane's requests bucket", []dispatch.LaneView{both}, true},
	} {
		w, _, err := Live(base, tt.views, "claude-sonnet-4-5", 256, t0)
		if err != nil {
			t.Fatal(err)
		}
		if w.BucketsKnown != tt.want {
			t.Errorf("%s: BucketsKnown %v, want %v (window %v)", tt.name, w.BucketsKnown, tt.want, w.BucketWindow)
		}
	}
}
