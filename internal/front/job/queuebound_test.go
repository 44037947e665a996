package job_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/sim"
)

// TestPlanWithinTheBatchQueueBound, on the simulator: organizations whose
// processing queue holds 1,000 batch requests. Planned without knowing it
// (the old way), the batch path meets full queues, pauses and still does
// every row; the run records each org's bound. The next plan, from those
// observations, keeps every org's batches in flight within its bound, and
// no create is refused.
func TestPlanWithinTheBatchQueueBound(t *testing.T) {
	const k = 2000
	var cfg sim.Config
	e := newEnv(t, 6000, func(c *sim.Config) {
		c.TimeScale = k
		// A slow admission: the planner wants many batches in flight.
		c.Batch.AdmissionBase = sim.Duration(30 * time.Minute)
		c.Batch.ProcessingRate = 0.5
		for i := range c.Orgs {
			c.Orgs[i].BatchQueueCap = 1000
		}
		cfg = *c
	})
	queueFull := func() (n int64) {
		for _, o := range e.sim.Stats().Orgs {
			n += o.Batches.QueueFull
		}
		return n
	}
	// The world the planner sees: the simulator's, its queue bound
	// unknown (as the planner saw a real organization before).
	world := func() plan.World {
		w := plan.FromModel(cfg.Model(), dispatch.DefaultCaps)
		for i := range w.Orgs {
			w.Orgs[i].BatchQueueCap = 0
		}
		return w
	}
	var lastRep *job.Report
	run := func(out string, w plan.World) (*plan.Decision, int64) {
		var d plan.Decision
		o := e.options()
		o.Output = out
		o.CachePrefixOff = true // no seed batch ahead of the chunks
		o.Plan = route.Planner(route.Options{Route: "batch", Prefer: "cost", TimeScale: k,
			World: func(plan.Job) (plan.World, error) { return w, nil }, OnDecision: func(x plan.Decision) { d = x }})
		before := queueFull()
		rep, err := e.run(o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Succeeded != 6000 {
			t.Fatalf("%s: succeeded %d of 6000", out, rep.Succeeded)
		}
		lastRep = rep
		return &d, queueFull() - before
	}

	// 1. Unknown bound: full queues, every row done, the bounds recorded.
	w0 := world()
	_, full0 := run(e.out, w0)
	if full0 == 0 {
		t.Fatal("the first run met no full queue: the test proves nothing")
	}
	f := &observe.File{Orgs: map[string]*observe.Org{}}
	f.AddBatch(observe.FromBatch(lastRep.Batch, time.Now())...)
	var refs []observe.OrgRef
	for _, o := range cfg.Orgs {
		refs = append(refs, observe.OrgRef{ID: o.ID, Label: o.Name})
		q := f.Orgs[o.ID]
		if q == nil || q.BatchQueue == nil || q.BatchQueue.Requests != 1000 || !q.BatchQueue.Named {
			t.Fatalf("org %s: observed queue %+v", o.Name, q)
		}
	}

	// 2. The next plan, from the observations: within the bound, no 429.
	w1 := world()
	observe.Apply(&w1, f, refs, "claude-sonnet-4-5", 256, time.Now())
	e2 := e.dir + "/second.jsonl"
	d, full1 := run(e2, w1)
	if d.Batch == nil {
		t.Fatalf("route %s", d.Route)
	}
	for _, o := range d.Batch.Orgs {
		if o.Window*d.Batch.Chunk > 1000 {
			t.Errorf("%s: %d batches of %d planned in flight, over the bound of 1,000", o.Org, o.Window, d.Batch.Chunk)
		}
	}
	if full1 != 0 {
		t.Errorf("%d creates refused for a full queue after the bound was known (the first run: %d)", full1, full0)
	}
}
