package dispatch_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/sim"
)

// TestReclaimTakesBackOnlyUnsent: with 300 requests queued on a slow
// world, Reclaim takes back exactly the ones it is asked for that were
// never attempted — no Result ever comes for them, the simulator never
// sees them — and every other request is answered once, in order of the
// queue it was left.
func TestReclaimTakesBackOnlyUnsent(t *testing.T) {
	w := loopbackWorld(t, func(c *sim.Config) {
		c.TimeScale = 50
		for i := range c.Orgs {
			c.Orgs[i].DefaultLimits = &sim.Limits{RPM: 60, ITPM: 1e9, OTPM: 1e9}
			c.Orgs[i].Limits = nil
		}
	})
	d := w.dispatcher(t, dispatch.Config{})
	reqs := requests(300, "claude-sonnet-4-5")
	var mu sync.Mutex
	got := map[string]dispatch.Result{}
	served := make(chan error, 1)
	go func() { served <- d.Serve(t.Context()) }()
	for _, r := range reqs {
		if err := d.Submit(t.Context(), r, func(res dispatch.Result) {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := got[res.Request.ID]; dup {
				t.Errorf("two results for %s", res.Request.ID)
			}
			got[res.Request.ID] = res
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := d.Reclaimable(t.Context())
	if err != nil || n == 0 || n > 300 {
		t.Fatalf("Reclaimable = %d, %v: want some of the 300 still queued", n, err)
	}
	odd := func(r *dispatch.Request) bool { return strings.HasSuffix(r.ID, "1") || strings.HasSuffix(r.ID, "3") }
	back, err := d.Reclaim(t.Context(), odd)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) == 0 {
		t.Fatal("nothing reclaimed from a queue of unsent requests")
	}
	reclaimed := map[string]bool{}
	for _, r := range back {
		if !odd(r) {
			t.Fatalf("reclaimed %s, which the filter refuses", r.ID)
		}
		reclaimed[r.ID] = true
	}
	d.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		res, ok := got[r.ID]
		switch {
		case reclaimed[r.ID] && ok:
			t.Fatalf("%s was reclaimed and still got a result", r.ID)
		case !reclaimed[r.ID] && (!ok || res.Class != api.ClassOK):
			t.Fatalf("%s: result %+v (present %v)", r.ID, res, ok)
		}
	}
	if b := w.sim.Stats().Bodies; b.DistinctAnswered != int64(300-len(back)) {
		t.Fatalf("the simulator answered %d distinct requests; %d were not reclaimed", b.DistinctAnswered, 300-len(back))
	}
}
