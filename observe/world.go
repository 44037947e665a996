package observe

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/plan"
)

// WorldOptions say whose organizations to plan for and how.
type WorldOptions struct {
	// Base is the world the observations are applied to (its caps,
	// reserve, ramp, batch model); zero: plan.NewWorld("your organizations").
	Base *plan.World
	// Path is the observations file ("" : DefaultPath()). Off: none is
	// read or written (a probe's limits serve this plan only).
	Path string
	Off  bool
	// Keys are the run's keys, their organizations discovered (Org set).
	// One live key per organization stands for it.
	Keys []*keys.Key
	// Client sends the probes; nil or NoProbe: none is sent.
	Client  *client.Client
	NoProbe bool
	// Model and MaxTokens are the job's.
	Model     string
	MaxTokens int
	Now       func() time.Time
	Log       *slog.Logger
}

// ForKeys returns the planner's world for the organizations of o.Keys:
// what the observations file knows of each (docs/observe.md); for an
// organization it has no limits for, one probe (unless NoProbe), which is
// recorded. The provenance names the source of every figure, and the
// cost of the probes sent.
func ForKeys(ctx context.Context, o WorldOptions) (plan.World, Provenance, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Path == "" {
		o.Path = DefaultPath()
	}
	w := plan.NewWorld("your organizations")
	if o.Base != nil {
		w = *o.Base
	}
	now := o.Now()
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	if !o.Off {
		var err error
		if f, err = Load(o.Path, now); err != nil {
			o.Log.Warn("observations not used", "err", err)
		}
	}
	var orgs []OrgRef
	byOrg := map[string]*keys.Key{}
	for _, k := range o.Keys {
		if dead, _ := k.Dead(); dead || k.Org() == "" || byOrg[k.Org()] != nil {
			continue
		}
		byOrg[k.Org()] = k
		orgs = append(orgs, OrgRef{ID: k.Org(), Label: k.Label()})
	}
	if len(orgs) == 0 {
		return w, nil, fmt.Errorf("observe: no live key with a known organization to plan for")
	}
	prov, unknown := Apply(&w, f, orgs, o.Model, o.MaxTokens, now)
	if len(unknown) == 0 || o.NoProbe || o.Client == nil {
		if len(unknown) > 0 {
			prov = append(prov, fmt.Sprintf("no probe sent (%d organization(s) without observed limits)", len(unknown)))
		}
		return w, prov, w.Validate()
	}
	var probed []Sample
	var spent float64
	var failed Provenance
	for _, org := range unknown {
		r, err := Probe(ctx, o.Client, byOrg[org.ID], org, o.Model, o.Now)
		spent += r.CostUSD
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		probed = append(probed, r.Sample)
	}
	if len(probed) > 0 {
		f.Add(probed...)
		if !o.Off {
			if _, err := Record(o.Path, o.Now(), probed...); err != nil {
				o.Log.Warn("probed limits not recorded", "err", err)
			}
		}
	}
	prov, _ = Apply(&w, f, orgs, o.Model, o.MaxTokens, now)
	prov = append(prov, failed...)
	prov = append(prov, fmt.Sprintf("%d probe(s) sent (max_tokens 1 on %s): $%.5f", len(unknown), o.Model, spent))
	return w, prov, w.Validate()
}
