package observe

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
)

// OrgRefs lists the organizations f holds, by label (then id), for a plan
// made without keys: `sluice guidelines --from-observations`.
func (f *File) OrgRefs() []OrgRef {
	var out []OrgRef
	for id, o := range f.Orgs {
		out = append(out, OrgRef{ID: id, Label: o.Label})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Label != out[j].Label {
			return out[i].Label < out[j].Label
		}
		return out[i].ID < out[j].ID
	})
	for i := range out {
		if out[i].Label == "" {
			out[i].Label = out[i].ID
		}
	}
	return out
}

// ModelWorlds is each model's world for the organizations f holds that
// observed its pool (every org, when none did: their limits are then the
// etiquette caps'), at maxTokens, with the provenance of every figure.
func ModelWorlds(f *File, models []string, maxTokens int, now time.Time) []plan.ModelWorld {
	var out []plan.ModelWorld
	all := f.OrgRefs()
	for _, m := range models {
		pool := api.PoolOf(m)
		var orgs []OrgRef
		for _, o := range all {
			if p := f.Pool(o.ID, pool); p != nil && p.Limits != nil {
				orgs = append(orgs, o)
			}
		}
		if len(orgs) == 0 {
			orgs = all
		}
		w := plan.NewWorld("your organizations")
		prov, _ := Apply(&w, f, orgs, m, maxTokens, now)
		b := w.Batch
		observed := false
		for _, o := range w.Orgs {
			observed = observed || o.Batch != nil
		}
		if !observed {
			prov = append(prov, fmt.Sprintf("batch queue: the planner's default model, not observed (a batch starts %v + %g s per request after create; %g requests/s per organization)",
				b.AdmissionBase, b.AdmissionPerRequest.Seconds(), b.ProcessingRate))
		}
		prov = append(prov,
			fmt.Sprintf("etiquette: sluice's own (cap %d in flight per organization, %.0f %% of every bucket left to colleagues)",
				w.Caps[api.FamilyOf(m)], 100*w.Reserve))
		out = append(out, plan.ModelWorld{Model: m, World: w, Provenance: prov})
	}
	return out
}
