package route_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// lanes are three Sonnet lanes with rpm requests per minute by their
// headers, ok answers each, a full bucket and a warm ramp.
func lanes(rpm float64, ok int64) []dispatch.LaneView {
	var out []dispatch.LaneView
	for _, org := range []string{"high_prio", "batch", "low_prio"} {
		v := dispatch.LaneView{LaneStats: dispatch.LaneStats{Org: org, OrgID: "org-" + org, Pool: api.PoolSonnet4,
			Attempts: ok, OK: ok, OutputTokens: ok * 140}}
		v.State = lane.State{Limit: 100, Latency: 3 * time.Second}
		v.State.Buckets[budget.Requests] = budget.BucketState{Known: true, Limit: rpm, Depth: rpm, Level: rpm}
		out = append(out, v)
	}
	return out
}

// router routes a 20,000-request judge job in the three-org world (cap-
// bound sync: about 3 minutes) and returns the Router and its routing.
func router(t *testing.T, via string) (*route.Router, route.Routing) {
	t.Helper()
	now := t0
	p := route.NewRouter(route.Options{Route: via, Prefer: "latency", World: world, Now: func() time.Time { return now }})
	r, err := p.Route(summary(20000), 20000)
	if err != nil {
		t.Fatal(err)
	}
	return p, r
}

// TestReplanOnTheFirstAnswers: a plan made for a fast world is re-made
// once the first answers show 50 RPM per organization — and not before:
// with fewer answers than the rule waits for (and not 30 s yet) nothing
// happens. The re-plan sends the unsent requests to batch.
func TestReplanOnTheFirstAnswers(t *testing.T) {
	p, r := router(t, "auto")
	if r.Route != route.Sync {
		t.Fatalf("the fast world routes %s; this test needs sync", r.Route)
	}
	if _, ok := p.Replan(route.Measure{At: t0.Add(2 * time.Second), Lanes: lanes(50, 2), Unsent: 19900, SyncAnswered: 6, SyncBacklog: true}); ok {
		t.Fatal("re-planned on 6 answers, 2 s in")
	}
	nr, ok := p.Replan(route.Measure{At: t0.Add(5 * time.Second), Lanes: lanes(50, 4), Unsent: 19850, SyncAnswered: 12, SyncBacklog: true})
	if !ok {
		t.Fatal("no re-plan once 12 answers showed 50 RPM per organization")
	}
	if nr.Route == route.Sync || nr.Batch.ChunkSize <= 0 {
		t.Fatalf("re-planned to %+v; at 150 RPM in all 19,850 requests take over 2 h on sync", nr)
	}
}

// TestReplanStaysWhenTheWorldAgrees: answers that confirm the plan's
// world re-plan to the same route, which is not a change.
func TestReplanStaysWhenTheWorldAgrees(t *testing.T) {
	p, _ := router(t, "auto")
	if nr, ok := p.Replan(route.Measure{At: t0.Add(5 * time.Second), Lanes: lanes(300_000, 10), Unsent: 19000, SyncAnswered: 30, SyncBacklog: true}); ok {
		t.Fatalf("re-planned to %+v in the world the plan assumed", nr)
	}
}

// TestReplanWhenTheRateStaysOff: after the first re-plan, a sync rate
// within 20 % of the plan changes nothing; a rate at a tenth of it, seen
// on two checks over a full window, re-plans with the measured rate (and,
// the job being large, the route changes).
func TestReplanWhenTheRateStaysOff(t *testing.T) {
	p, _ := router(t, "auto")
	// The first answers agree with the world: the route stays sync.
	if _, ok := p.Replan(route.Measure{At: t0.Add(5 * time.Second), Lanes: lanes(300_000, 10), Unsent: 19000, SyncAnswered: 30, SyncBacklog: true}); ok {
		t.Fatal("the first re-plan changed the route in the world the plan assumed")
	}
	// Then a minute at 90 % of the planned rate, and one at 10 %.
	rate := planRate(t)
	at, n := t0.Add(5*time.Second), int64(30)
	step := func(r float64) (route.Routing, bool) {
		at = at.Add(time.Second)
		n += int64(r)
		return p.Replan(route.Measure{At: at, Lanes: lanes(300_000, n/3), Unsent: 19000 - int(n), SyncAnswered: n, SyncBacklog: true})
	}
	for range 60 {
		if nr, ok := step(rate * 0.9); ok {
			t.Fatalf("re-planned to %+v at 90 %% of the planned rate", nr)
		}
	}
	changed := false
	for range 60 {
		if _, ok := step(rate * 0.1); ok {
			changed = true
			break
		}
	}
	if !changed {
		t.Fatal("a sync rate at 10 % of the plan for a minute did not change the route")
	}
}

// planRate is the three-org world's planned sync rate for the test job.
func planRate(t *testing.T) float64 {
	var d plan.Decision
	p := route.NewRouter(route.Options{Route: "auto", Prefer: "latency", World: world, OnDecision: func(x plan.Decision) { d = x }})
	if _, err := p.Route(summary(20000), 20000); err != nil {
		t.Fatal(err)
	}
	return d.SyncRate
}

// TestForcedRoutesNeverReplan: --route sync and --route batch keep their
// route whatever the answers show.
func TestForcedRoutesNeverReplan(t *testing.T) {
	for _, via := range []string{"sync", "batch"} {
		p, _ := router(t, via)
		if nr, ok := p.Replan(route.Measure{At: t0.Add(time.Minute), Lanes: lanes(50, 40), Unsent: 19000, SyncAnswered: 120, SyncBacklog: true}); ok {
			t.Errorf("--route %s re-planned to %+v", via, nr)
		}
	}
}

// TestRefusedReplanPutsThePriorPlanBack: a move to batch the run could
// not apply (Router.Refused) leaves the sync plan in force, so the rate
// rule still compares the sync side with it; and since a refusal lasts the
// run, the re-plans it makes keep sync instead of proposing batch again.
// Before, the refused all-batch plan (no sync share) stayed in force and
// the rate rule was off for the rest of the run.
func TestRefusedReplanPutsThePriorPlanBack(t *testing.T) {
	var buf bytes.Buffer
	now := t0
	p := route.NewRouter(route.Options{Route: "auto", Prefer: "latency", World: world, Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(&buf, nil))})
	if _, err := p.Route(summary(20000), 20000); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(5 * time.Second)
	nr, ok := p.Replan(route.Measure{At: at, Lanes: lanes(50, 4), Unsent: 19850, SyncAnswered: 12, SyncBacklog: true})
	if !ok || nr.Route == route.Sync {
		t.Fatalf("first answers at 50 RPM: re-planned %v to %+v; this test needs a move off sync", ok, nr)
	}
	p.Refused(nr)
	buf.Reset()
	// The sync side goes on at 150 RPM in all, far below the sync plan.
	n := int64(12)
	for range 90 {
		at = at.Add(time.Second)
		n += 2 + n%2 // 2.5 req/s
		if r, ok := p.Replan(route.Measure{At: at, Lanes: lanes(50, n/3), Unsent: 19850 - int(n), SyncAnswered: n, SyncBacklog: true}); ok {
			t.Fatalf("re-planned to %s again after the run refused a move to batch", r.Route)
		}
	}
	if !strings.Contains(buf.String(), "the sync side ran at") {
		t.Fatalf("after a refused re-plan, a sync side at 150 RPM for 90 s was never compared with the sync plan:\n%s", buf.String())
	}
}

// TestRefusedIgnoresAStaleRouting: Refused with a routing other than the
// last change Replan returned changes nothing.
func TestRefusedIgnoresAStaleRouting(t *testing.T) {
	p, _ := router(t, "auto")
	at := t0.Add(5 * time.Second)
	nr, ok := p.Replan(route.Measure{At: at, Lanes: lanes(50, 4), Unsent: 19850, SyncAnswered: 12, SyncBacklog: true})
	if !ok {
		t.Fatal("no re-plan")
	}
	p.Refused(route.Routing{Route: route.Sync, Why: "something else"})
	// The batch plan stays in force: no sync share, so no rate re-plan.
	n := int64(12)
	for range 90 {
		at = at.Add(time.Second)
		n += 2
		if r, ok := p.Replan(route.Measure{At: at, Lanes: lanes(50, n/3), Unsent: 19850 - int(n), SyncAnswered: n, SyncBacklog: true}); ok {
			t.Fatalf("re-planned to %s after a stale Refused; the plan in force was %s", r.Route, nr.Route)
		}
	}
}
