package job_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// TestOrgWideLimitSlowsEveryPool: on the org-wide world, a job of two
// models meets the organization's limit across all models before either
// pool's. Every 429 naming it slows both lanes of the organization — the
// one that met it and the other — and the job completes. The limit is 10
// requests a real second, from an empty bucket one second deep, so the
// job's 60 requests fit it without a refusal only if sent over 5 s or
// more: any host sends them faster (a limit of 600 a second was met only
// when the host was idle).
func TestOrgWideLimitSlowsEveryPool(t *testing.T) {
	var cfg sim.Config
	e := newEnv(t, 0, func(c *sim.Config) {
		p, err := sim.Preset(sim.PresetOrgWide)
		if err != nil {
			t.Fatal(err)
		}
		p.TimeScale = 30
		p.Orgs[0].OrgLimits.RPM = 20               // 10 a second at this scale, far under either pool
		p.BucketWindow = sim.Duration(time.Second) // a small burst, spent by a colleague:
		p.BucketsStartEmpty = true                 // the limit binds at once
		*c = p
		cfg = p
	})
	var ps []map[string]any
	const n = 60
	for i := range n {
		model := "claude-sonnet-4-5"
		if i%2 == 1 {
			model = "claude-haiku-4-5"
		}
		ps = append(ps, map[string]any{"model": model, "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("item %d", i)}}})
	}
	writeLines(t, e.in, ps)
	o := e.options()
	pool, err := simtest.Pool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.Dispatch.Keys = pool.Keys()
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != n {
		t.Fatalf("succeeded %d of %d", rep.Succeeded, n)
	}
	st := e.sim.Stats().Orgs["scale-org"]
	var refused int64
	for _, n := range st.Counters.OrgLimited {
		refused += n
	}
	t.Logf("%d calls refused by the organization's limit", refused)
	if refused == 0 {
		t.Fatal("the organization's limit across all models never refused a call: the test proves nothing")
	}
	own := map[string]int64{}
	for pool, ls := range st.Pools {
		for why, n := range ls.LimitedBy {
			if strings.HasPrefix(why, "org_") {
				own[string(pool)] += n
			}
		}
	}
	if len(rep.Lanes) != 2 {
		t.Fatalf("lanes %+v", rep.Lanes)
	}
	var total int64
	for _, n := range own {
		total += n
	}
	for _, l := range rep.Lanes {
		// Every org-wide 429, its own and the other lane's, slowed it.
		if l.OrgLimited != total {
			t.Errorf("lane %s/%s: slowed by %d org-wide 429s, of %d in all (its own %d): the other pool's did not slow it",
				l.Org, l.Pool, l.OrgLimited, total, own[l.Pool])
		}
	}
}
