package observe

import (
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// Live returns base with model's organizations as a running job's lanes
// see them now — the planner's world for a re-plan mid-run (docs/route.md,
// "Re-planning mid-run"). It is Apply over the lanes' own samples (the
// limits their headers showed, their recent latency and answer lengths),
// with two differences from a plan made before the first call:
//
//   - the ramp starts at the lanes' current concurrency limit (the least
//     of them), not cold;
//   - the buckets hold what the lanes' headers last said they hold, not
//     full: BucketDrained is the most drained known bucket's share.
//
// A lane's limits are per minute of real time already (a simulator
// running K times fast shows limits K times larger: docs/sim.md), as the
// world's are. A lane that is dead, of another pool, or of an unknown
// organization is left out; with none left Live fails.
func Live(base plan.World, views []dispatch.LaneView, model string, maxTokens int, now time.Time) (plan.World, Provenance, error) {
	pool := api.PoolOf(model)
	var live []dispatch.LaneView
	var orgs []OrgRef
	seen := map[string]bool{}
	for _, v := range views {
		if v.Dead || v.Pool != pool || v.OrgID == "" || seen[v.OrgID] {
			continue
		}
		seen[v.OrgID] = true
		live = append(live, v)
		orgs = append(orgs, OrgRef{ID: v.OrgID, Label: v.Org})
	}
	if len(orgs) == 0 {
		return base, nil, fmt.Errorf("observe: no live lane of pool %s to re-plan for", pool)
	}
	samples := FromLanes(live, maxTokens, now)
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	f.Add(samples...)
	w := base
	w.Latency = maps.Clone(base.Latency) // Apply's fit writes to it: not through to base
	if w.Latency == nil {
		w.Latency = map[api.Pool]plan.Latency{}
	}
	prov, _ := Apply(&w, f, orgs, model, maxTokens, now)

	start := 0
	drained, known := 0.0, false
	// Every lane's depth and level read from its headers, or the burst is
	// an assumption: a lane whose depth was not learned (FromLanes learns
	// it from a known requests bucket; a lane with no known bucket has no
	// limits at all) leaves BucketsKnown false.
	allRead := true
	for _, v := range live {
		if v.State.Limit > 0 && (start == 0 || v.State.Limit < start) {
			start = v.State.Limit
		}
		for _, d := range []budget.Dim{budget.Requests, budget.InputTokens, budget.OutputTokens} {
			b := v.State.Buckets[d]
			if !b.Known || b.Limit <= 0 || b.Depth <= 0 {
				continue
			}
			known = true
			drained = math.Max(drained, 1-math.Min(math.Max(b.Level/b.Depth, 0), 1))
		}
		if po := f.Pool(v.OrgID, pool); po == nil || po.Limits == nil || po.Limits.DepthSeconds <= 0 {
			allRead = false
		}
	}
	if start > 0 {
		w.Ramp.Start = start
		prov = append(prov, fmt.Sprintf("ramp: warm, from the lanes' concurrency limit now (%d)", start))
	}
	if known {
		w.BucketDrained = drained
		w.BucketsKnown = allRead
		prov = append(prov, fmt.Sprintf("buckets now: %.0f %% drained (the emptiest the lanes' headers show)", 100*drained))
	}
	if err := w.Validate(); err != nil {
		return base, prov, fmt.Errorf("observe: the lanes' view makes no valid world: %w", err)
	}
	return w, prov, nil
}
