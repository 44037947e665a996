package dispatch

import (
	"time"

	"github.com/sluice-dev/sluice/client"
)

// orgLimited spreads a 429 that named a limit on the organization's usage
// across all models (client.ScopeOrg; docs/models.md) to every other lane
// of the attempt's organization: each pauses for the retry-after and takes
// the episode's one cut, as the lane that met it does. A limit the whole
// organization shares is not one pool's to slow down for. Loop-owned.
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
		if ls.org == a.ls.org && ls != a.ls {
			ls.l.OrgLimited(now, a.sentAt, wait)
			n++
		}
	}
	d.log.Debug("organization-wide limit met: every lane of the organization slows", "org", a.ls.org.label, "pool", a.ls.pool,
		"lanes", n+1, "retry_after", wait.String())
}
