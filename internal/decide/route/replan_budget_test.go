package route_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
)

func budgetRouter(t *testing.T, n int) (*route.Router, route.Routing, plan.Decision, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	var d plan.Decision
	p := route.NewRouter(route.Options{Route: "auto", Prefer: "latency", World: world, Now: func() time.Time { return t0 },
		Log: slog.New(slog.NewTextHandler(&buf, nil)), OnDecision: func(x plan.Decision) { d = x }})
	r, err := p.Route(summary(n), n)
	if err != nil {
		t.Fatal(err)
	}
	return p, r, d, &buf
}

// TestReplanWarmupRampMatchingPlanKeepsRoute: a sync side that ramps to exactly the planned
// steady rate over the plan's own RampTime must not re-plan.
func TestReplanWarmupRampMatchingPlanKeepsRoute(t *testing.T) {
	p, r, d, buf := budgetRouter(t, 20000)
	t.Logf("route %s rate %.1f/s ramp %.1fs latency %.1fs", r.Route, d.SyncRate, d.RampTime.Seconds(), d.Latency.Seconds())
	ramp := d.RampTime.Seconds()
	if ramp < 1 {
		ramp = 1
	}
	var n float64
	for s := 1; s <= 120; s++ {
		rate := d.SyncRate * min(float64(s)/ramp, 1)
		n += rate
		nr, ok := p.Replan(route.Measure{At: t0.Add(time.Duration(s) * time.Second), Lanes: lanes(300_000, int64(n)/3),
			Unsent: 20000 - int(n), SyncAnswered: int64(n), SyncBacklog: true})
		if ok {
			t.Errorf("at %d s re-planned to %s: %s", s, nr.Route, nr.Why)
		}
	}
	if c := strings.Count(buf.String(), "re-planned"); c > 1 {
		t.Errorf("%d re-plans (route kept) during a warm-up that matches the plan:\n%s", c, buf)
	}
}

// TestReplansThatKeepTheRouteLeaveChangesForLater: re-plans that keep the route still count
// against the four a run may make, so a later real change is refused.
func TestReplansThatKeepTheRouteLeaveChangesForLater(t *testing.T) {
	p, _, d, buf := budgetRouter(t, 20000)
	at, n := t0, 0.0
	step := func(rate float64) (route.Routing, bool) {
		at = at.Add(time.Second)
		n += rate
		return p.Replan(route.Measure{At: at, Lanes: lanes(300_000, int64(n)/3), Unsent: 20000 - int(n), SyncAnswered: int64(n), SyncBacklog: true})
	}
	// Rate alternates between 60 % and 100 % of plan every 25 s: sync stays
	// the right route each time.
	for i := range 8 {
		f := 0.6
		if i%2 == 1 {
			f = 1.0
		}
		for range 25 {
			if nr, ok := step(d.SyncRate * f); ok {
				t.Logf("changed to %s", nr.Route)
			}
		}
	}
	t.Logf("kept-route re-plans: %d", strings.Count(buf.String(), "re-planned: the route stays"))
	// Now the sync side collapses to 1 % of the plan for two minutes.
	changed := false
	for range 120 {
		if _, ok := step(d.SyncRate * 0.01); ok {
			changed = true
		}
	}
	if !changed {
		t.Errorf("a sync side at 1 %% of the plan with %d unsent never re-planned: the no-op re-plans spent the budget\n%s", 20000-int(n), buf)
	}
}
