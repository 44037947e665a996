package route_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/sim"
)

func summary(n int) jsonl.Summary {
	return jsonl.Summary{Lines: n, Valid: n, Models: map[string]int{"claude-sonnet-4-5-20250929": n},
		EstInputTokens: int64(250 * n), MaxTokens: int64(256 * n)}
}

func world(plan.Job) (plan.World, error) { return plan.FromModel(sim.Default().Model(), nil), nil }

func TestSyncRouteNeedsNoWorld(t *testing.T) {
	p := route.Planner(route.Options{Route: "sync", World: func(plan.Job) (plan.World, error) {
		t.Fatal("a forced sync route asked for the world")
		return plan.World{}, nil
	}})
	r, err := p(summary(1000), 1000)
	if err != nil || r.Route != route.Sync {
		t.Fatalf("%+v, %v", r, err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []route.Options{{Route: "teleport", World: world}, {Route: "auto", Prefer: "speed", World: world}} {
		if _, err := route.Planner(o)(summary(10), 10); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestBatchRouteOnTheSimulatorsClock: a forced batch route is sized by the
// planner (chunk, window), its polls and stuck floor divided by the time
// scale; against the real API (scale 1) they are the batch package's.
func TestBatchRouteOnTheSimulatorsClock(t *testing.T) {
	var decided *plan.Decision
	for _, k := range []float64{1, 100} {
		p := route.Planner(route.Options{Route: "batch", Prefer: "cost", TimeScale: k, World: world,
			OnDecision: func(d plan.Decision) { decided = &d }})
		r, err := p(summary(20000), 20000)
		if err != nil {
			t.Fatal(err)
		}
		if r.Route != route.Batch || r.Batch.ChunkSize <= 0 || r.Batch.ChunkSize > 5000 || r.Batch.WindowPerOrg <= 0 || decided == nil {
			t.Fatalf("k=%g: %+v", k, r)
		}
		floor := time.Duration(float64(batch.MinStuckAfter) / k)
		if r.Batch.StuckAfter < floor {
			t.Fatalf("k=%g: stuck after %v, below the floor %v", k, r.Batch.StuckAfter, floor)
		}
		wantPoll := time.Duration(0) // the batch package's default
		if k != 1 {
			wantPoll = time.Duration(float64(batch.DefaultPollMax) / k)
		}
		if r.Batch.PollMax != wantPoll {
			t.Fatalf("k=%g: poll max %v, want %v", k, r.Batch.PollMax, wantPoll)
		}
	}
}

// TestAutoSplitsALargeLatencyJob: with the latency priority a large job on
// the three-org world is split, and the share sent to batch is the
// planner's.
func TestAutoSplitsALargeLatencyJob(t *testing.T) {
	var d plan.Decision
	p := route.Planner(route.Options{Route: "auto", Prefer: "latency", World: world, OnDecision: func(x plan.Decision) { d = x }})
	r, err := p(summary(141600), 141600)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Route) != r.Route || r.Predicted != d.Wall.Mid {
		t.Fatalf("routing %+v does not follow the decision %s", r, d.Route)
	}
	if r.Route == route.Split && (r.BatchShare <= 0 || r.BatchShare >= 1 || r.BatchShare != float64(d.BatchN)/141600) {
		t.Fatalf("split share %v for %d of 141600", r.BatchShare, d.BatchN)
	}
}

// TestPlannerKnowsTheBatchPathsPollSchedule: the planner models the
// batch path's polls with its own copy of the defaults; they must agree.
func TestPlannerKnowsTheBatchPathsPollSchedule(t *testing.T) {
	if plan.DefaultPollMin != batch.DefaultPollMin || plan.DefaultPollMax != batch.DefaultPollMax {
		t.Fatalf("plan polls %v–%v, the batch path %v–%v", plan.DefaultPollMin, plan.DefaultPollMax, batch.DefaultPollMin, batch.DefaultPollMax)
	}
}

// TestBatchPollsAsModelled: a world's own poll schedule (a limits file's)
// reaches the batch path, so it polls as the planner modelled it.
func TestBatchPollsAsModelled(t *testing.T) {
	w, _ := world(plan.Job{})
	w.Poll = plan.Poll{Min: 5 * time.Second, Max: 30 * time.Second}
	p := route.Planner(route.Options{Route: "batch", Prefer: "cost", World: func(plan.Job) (plan.World, error) { return w, nil }})
	r, err := p(summary(5000), 5000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Batch.PollMin != 5*time.Second || r.Batch.PollMax != 30*time.Second {
		t.Fatalf("batch polls %v–%v, the world's 5s–30s", r.Batch.PollMin, r.Batch.PollMax)
	}
}
