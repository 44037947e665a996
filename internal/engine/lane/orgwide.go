package lane

import (
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// DimOf returns the budget dimension of a limiter the headers or a 429
// name (the dispatcher's organization-wide bucket uses it).
func DimOf(l api.Limiter) (budget.Dim, bool) { return dimOf(l) }

// An organization-wide limit (the rate-limits page's limits on an
// organization's usage across all models, docs/models.md) binds every pool
// of the organization at once: a 429 naming it, met on any lane, is
// congestion of every lane of that organization. The lane that met it
// learns it from its Result (Named.Org); the dispatcher tells the others.

// OrgLimited tells the lane that another lane of its organization met a
// limit on the organization's usage across all models: it pauses for
// retryAfter and takes the episode's one cut, as for a congestion 429 of
// its own. sent is when the attempt that met it was sent: an attempt sent
// before the lane's last cut is the same episode.
func (l *Lane) OrgLimited(now, sent time.Time, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.OrgLimited++
	l.congestion(now, sent, retryAfter)
}
