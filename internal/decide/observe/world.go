package observe

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
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
	// ProbeTimeout bounds each probe (0: ProbeTimeout).
	ProbeTimeout time.Duration
	// Model and MaxTokens are the job's.
	Model     string
	MaxTokens int
	Now       func() time.Time
	Log       *slog.Logger
}

// ProbeTimeout bounds one probe by default: a planner waiting on an API
// that does not answer must not hold the run back for the client's own
// timeout.
const ProbeTimeout = 15 * time.Second

// ForKeys returns the planner's world for the organizations of o.Keys:
// what the observations file knows of each (docs/observe.md); for an
// organization it has no limits for, one probe (unless NoProbe, or a probe
// of it failed within ProbeRetryAfter), sent to every such organization at
// once, each bounded by ProbeTimeout, and recorded — its failure too. The
// provenance names the source of every figure, and the cost of the probes.
// Observations that make no valid world are set aside with a warning (the
// world is then the caps-bounded one): a damaged file never stops a run.
func ForKeys(ctx context.Context, o WorldOptions) (plan.World, Provenance, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Path == "" {
		o.Off = true
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = ProbeTimeout
	}
	base := plan.NewWorld("your organizations")
	if o.Base != nil {
		base = *o.Base
	}
	now := o.Now()
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	if !o.Off {
		var err error
		if f, err = Load(o.Path, now); err != nil {
			o.Log.Warn("observations not used", "file", o.Path, "err", err)
		}
	}
	pool := api.PoolOf(o.Model)
	var orgs []OrgRef
	byOrg := map[string]*keys.Key{}
	for _, k := range o.Keys {
		if dead, _ := k.Dead(); dead || k.Org() == "" || byOrg[k.Org()] != nil {
			continue
		}
		if dead, _ := k.DeadFor(pool); dead {
			continue // another key of the org may serve the pool
		}
		byOrg[k.Org()] = k
		orgs = append(orgs, OrgRef{ID: k.Org(), Label: k.Label()})
	}
	if len(orgs) == 0 {
		return base, nil, fmt.Errorf("observe: no live key with a known organization to plan for")
	}
	w := base
	prov, unknown := Apply(&w, f, orgs, o.Model, o.MaxTokens, now)
	var toProbe []OrgRef
	var notes Provenance // what Apply does not say: probes skipped or failed, their cost
	for _, org := range unknown {
		if pf := f.Pool(org.ID, pool); pf != nil && pf.ProbeFailed != nil {
			notes = append(notes, fmt.Sprintf("%s %s: not probed again — the last probe (%s) read no limits: %s", org.Label, pool, pf.ProbeFailed.At.Format(time.RFC3339), pf.ProbeFailed.Why))
			continue
		}
		toProbe = append(toProbe, org)
	}
	if len(toProbe) > 0 && !o.NoProbe && o.Client != nil {
		o.Log.Info(fmt.Sprintf("plan: probing %d organization(s) never observed: one max_tokens-1 call each on %s, at most $%.5f in all (--no-probe refuses)",
			len(toProbe), o.Model, float64(len(toProbe))*ProbeCostUSD(o.Model)))
		results := make([]ProbeResult, len(toProbe))
		errs := make([]error, len(toProbe))
		var wg sync.WaitGroup
		for i, org := range toProbe {
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, o.ProbeTimeout)
				defer cancel()
				results[i], errs[i] = Probe(pctx, o.Client, byOrg[org.ID], org, o.Model, o.Now)
			})
		}
		wg.Wait()
		var samples []Sample
		var spent float64
		reached := 0
		for i, org := range toProbe {
			spent += results[i].CostUSD
			if results[i].Reached {
				reached++
			}
			if errs[i] != nil {
				notes = append(notes, errs[i].Error())
				samples = append(samples, Sample{OrgID: org.ID, Label: org.Label, Pool: pool, At: o.Now(),
					ProbeFailed: &ProbeFailure{Why: results[i].Why, At: o.Now()}})
				continue
			}
			samples = append(samples, results[i].Sample)
		}
		f.Add(samples...)
		if !o.Off {
			if _, err := Record(o.Path, o.Now(), samples...); err != nil {
				o.Log.Warn("probed limits not recorded", "err", err)
			}
		}
		prov, _ = Apply(&w, f, orgs, o.Model, o.MaxTokens, now)
		notes = append(notes, fmt.Sprintf("%d probe(s) answered of %d sent (max_tokens 1 on %s): $%.5f", reached, len(toProbe), o.Model, spent))
	} else if len(toProbe) > 0 {
		notes = append(notes, fmt.Sprintf("no probe sent (%d organization(s) without observed limits)", len(toProbe)))
	}
	if err := w.Validate(); err != nil {
		o.Log.Warn("the observations make no valid world; planning without them", "file", o.Path, "err", err)
		w = base
		prov, _ = Apply(&w, &File{Orgs: map[string]*Org{}}, orgs, o.Model, o.MaxTokens, now)
		return w, append(prov, notes...), w.Validate()
	}
	return w, append(prov, notes...), nil
}

// Probed is the planner's world for ks as the library's front doors plan:
// one limits probe of each organization (sent with c), no observations
// file read or written.
func Probed(ks []*keys.Key, c *client.Client, log *slog.Logger) func(plan.Job) (plan.World, error) {
	return func(j plan.Job) (plan.World, error) {
		w, _, err := ForKeys(context.Background(), WorldOptions{Off: true, Keys: ks, Client: c, Model: j.Model, MaxTokens: j.MaxTokens, Log: log})
		return w, err
	}
}
