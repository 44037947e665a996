package dispatch

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// An organization's limit on its usage across all models (docs/models.md)
// binds every pool of it at once. A 429 naming it (client.ScopeOrg):
//
//   - is congestion of every lane of the organization: each pauses for
//     the retry-after and takes the episode's one cut (lane.OrgLimited),
//     not only the lane that met it;
//   - when it names its figure ("… 6,000 requests per minute across all
//     models"), paces every lane of the organization together from then
//     on: one bucket at a cushion under that figure (the lanes' own named
//     limits' share), which each request takes from before its lane's own
//     budget. A limit no header shows is otherwise met again and again by
//     lanes that each see room in their own headers.

// wideDepth is how many seconds of its limit the organization's bucket
// holds: a limit the headers never describe gets no burst.
const wideDepth = 2.0

// orgLimited applies a 429 naming the organization's limit across all
// models to the organization of the attempt. Loop-owned.
func (d *Dispatcher) orgLimited(a *attempt, now time.Time) {
	o := &a.out
	if o.Class != client.RateLimited || o.Scope() != client.ScopeOrg {
		return
	}
	var wait time.Duration
	if o.HasRetryAfter {
		wait = o.RetryAfter // capped by capRetryAfter
	}
	n := 0
	for _, ls := range d.laneList {
		if ls.org.id == a.ls.org.id && ls != a.ls {
			ls.l.OrgLimited(now, a.sentAt, wait)
			n++
		}
	}
	paced := false
	if dim, ok := lane.DimOf(o.Named.Limiter); ok && o.Named.PerMinute > 0 {
		limit := wideShare * float64(o.Named.PerMinute)
		var v budget.View
		v[dim] = budget.DimView{Known: true, Limit: limit, Depth: math.Max(1, wideDepth*limit/60), Remaining: 0}
		// One budget for the organization, whatever states its keys are
		// in (workspaces split off it share it).
		var wide budget.Budget
		for _, org := range d.orgs {
			if org.id == a.ls.org.id && org.wide != nil {
				wide = org.wide
			}
		}
		if wide == nil {
			wide = budget.NewLocal()
		}
		wide.Observe(now, v, budget.Grant{})
		for _, org := range d.orgs {
			if org.id == a.ls.org.id {
				org.wide = wide
			}
		}
		paced = true
	}
	d.log.Debug("organization-wide limit met: every lane of the organization slows", "org", a.ls.org.label, "pool", a.ls.pool,
		"lanes", n+1, "retry_after", wait.String(), "paced", paced)
}

// wideShare is the share of a named organization-wide limit the lanes pace
// at together (the same cushion as a lane's own named limit).
const wideShare = 0.98

// takeWide takes dem from the organization's limit across all models, if
// a 429 named one: the grant to settle when the attempt ends, or how long
// until it fits (0 and a nil grant without such a limit).
func (o *orgState) takeWide(now time.Time, dem budget.Demand) (*budget.Grant, time.Duration) {
	if o.wide == nil {
		return nil, 0
	}
	g, r, w := o.wide.TryTake(now, math.MaxInt32, 0, dem)
	if r != budget.Granted {
		return nil, max(w, time.Millisecond)
	}
	return &g, 0
}

// settleWide returns a grant of takeWide, charged actual.
func (o *orgState) settleWide(now time.Time, g *budget.Grant, actual budget.Demand) {
	if g != nil && o.wide != nil {
		o.wide.Settle(now, *g, actual)
	}
}

// wideCharge is what an attempt spent of its organization's limit: an
// answer its usage, a refusal before admission (429, 529, a refused key)
// nothing, anything else (a 400; a failure the server may have run) one
// request.
func wideCharge(o *client.Outcome) budget.Demand {
	switch o.Class {
	case client.OK:
		in, out := float64(o.Usage.InputTokens+o.Usage.CacheCreationInputTokens), float64(o.Usage.OutputTokens)
		return budget.Demand{1, in, out, in + out}
	case client.RateLimited, client.Overloaded, client.KeyDead:
		return budget.Demand{}
	case client.Canceled:
		if !o.Sent {
			return budget.Demand{}
		}
	}
	return budget.Demand{1}
}
