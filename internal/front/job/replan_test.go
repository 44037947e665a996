package job_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/apimodel"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/sim"
)

// routingOf is a Routing on the test's small batch sizing.
func routingOf(via string, share float64) route.Routing {
	r := route.Routing{Route: via, BatchShare: share, Why: "test"}
	if via != route.Sync {
		r.Batch = batch.Config{ChunkSize: 200, WindowPerOrg: 600, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond}
	}
	return r
}

// scripted re-plans through the routings in order, one each time its
// condition holds for the measure.
func scripted(when func(route.Measure) bool, to ...route.Routing) (func(route.Measure) (route.Routing, bool), *atomic.Int64) {
	var next atomic.Int64
	return func(m route.Measure) (route.Routing, bool) {
		i := next.Load()
		if int(i) >= len(to) || !when(m) {
			return route.Routing{}, false
		}
		next.Add(1)
		return to[i], true
	}, &next
}

// answeredOnce asserts the simulator answered every request body once.
func answeredOnce(t *testing.T, s *sim.Server, n int) {
	t.Helper()
	b := s.Stats().Bodies
	if b.DistinctAnswered != int64(n) || b.AnsweredMoreThanOnce != 0 {
		t.Fatalf("the simulator answered %d distinct requests (%d more than once) for %d", b.DistinctAnswered, b.AnsweredMoreThanOnce, n)
	}
}

// TestReplanSyncToBatch: a run that starts on sync and is re-planned to
// batch once 200 answers are in opens the batch path mid-run, sends the
// rest by batch, and sends nothing twice.
func TestReplanSyncToBatch(t *testing.T) {
	e := newEnv(t, 3000, func(c *sim.Config) {
		c.TimeScale = 2000
		// Slow enough that the sync side is still sending at the re-plan.
		for i := range c.Orgs {
			c.Orgs[i].DefaultLimits = &sim.Limits{RPM: 600, ITPM: 1e9, OTPM: 1e9}
			c.Orgs[i].Limits = nil
		}
	})
	o := e.options()
	o.Plan = func(jsonl.Summary, int) (route.Routing, error) { return routingOf(route.Sync, 0), nil }
	var asked atomic.Int64
	o.Replan, _ = scripted(func(m route.Measure) bool { asked.Add(1); return m.SyncAnswered >= 200 }, routingOf(route.Batch, 1))
	o.ReplanInterval = 5 * time.Millisecond
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	answeredOnce(t, e.sim, 3000)
	routes := map[string]int{}
	for _, r := range e.readResults() {
		routes[r.Sluice.Route]++
	}
	if routes[route.Sync] < 200 || routes[route.Batch] < 1000 {
		t.Fatalf("routes %v: want the first 200+ on sync and most of the rest by batch", routes)
	}
	if len(rep.Replans) != 1 || rep.Replans[0].Route != route.Batch || rep.Route != route.Sync {
		t.Fatalf("report route %s, replans %+v", rep.Route, rep.Replans)
	}
	if rep.Batch.Submitted == 0 {
		t.Fatalf("the report's batch stats are empty: %+v", rep.Batch)
	}
}

// TestReplanBackAndForth: batch, then sync, then a split — each change
// applying to the lines no side has taken — and every request is answered
// exactly once.
func TestReplanBackAndForth(t *testing.T) {
	e := newEnv(t, 3000, func(c *sim.Config) { c.TimeScale = 2000 })
	o := e.options()
	o.Plan = func(jsonl.Summary, int) (route.Routing, error) { return routingOf(route.Batch, 1), nil }
	calls := 0
	o.Replan, _ = scripted(func(route.Measure) bool { calls++; return calls%3 == 0 },
		routingOf(route.Sync, 0), routingOf(route.Split, 0.5), routingOf(route.Sync, 0))
	o.ReplanInterval = 2 * time.Millisecond
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	answeredOnce(t, e.sim, 3000)
	routes := map[string]int{}
	for _, r := range e.readResults() {
		routes[r.Sluice.Route]++
	}
	if routes[route.Sync] == 0 || routes[route.Batch] == 0 {
		t.Fatalf("routes %v: want both sides used", routes)
	}
	if len(rep.Replans) == 0 {
		t.Fatal("no re-plan was applied")
	}
}

// TestAutoReplansForTheWorldItFinds: `--route auto` planned for a fast
// world (the three-org preset) is sent into one whose organizations allow
// 30 requests a minute each, with buckets a second deep: once the first
// answers show it, the Router moves the unsent requests to batch, and
// every request is answered once.
func TestAutoReplansForTheWorldItFinds(t *testing.T) {
	const k = 200
	e := newEnv(t, 3000, func(c *sim.Config) {
		c.TimeScale = k
		c.BucketWindow = apimodel.Duration(time.Second)
		for i := range c.Orgs {
			c.Orgs[i].DefaultLimits = &sim.Limits{RPM: 30, ITPM: 1e9, OTPM: 1e9}
			c.Orgs[i].Limits = nil
		}
	})
	fast := sim.Default()
	fast.TimeScale = k
	w := plan.FromModel(fast.Model(), nil)
	o := e.options()
	rt := route.NewRouter(route.Options{Route: "auto", Prefer: "latency", TimeScale: k, Log: o.Logger,
		World: func(plan.Job) (plan.World, error) { return w, nil }})
	o.RoutedBy(rt)
	o.ReplanInterval = 20 * time.Millisecond
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	answeredOnce(t, e.sim, 3000)
	if rep.Route != route.Sync || len(rep.Replans) == 0 || rep.Replans[0].Route == route.Sync {
		t.Fatalf("route %s, re-plans %+v; want sync first, then batch or a split\n%s", rep.Route, rep.Replans, e.logBuf)
	}
	if rep.Batch.Submitted < 1000 {
		t.Fatalf("only %d requests went by batch\n%s", rep.Batch.Submitted, e.logBuf)
	}
	t.Logf("re-planned at %.1f s: %s", rep.Replans[0].AtSeconds, rep.Replans[0].Why)
}
