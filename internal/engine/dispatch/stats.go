package dispatch

import (
	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// Stats are a dispatcher's counters.
type Stats struct {
	Submitted int64
	OK        int64
	Final     int64
	Transport int64
	// Answers retried or given up on, by the class of the attempt
	// (docs/design.md, "Outcome classes"): rate_limited (429),
	// overloaded (529), failed (5xx answers and lost connections).
	RetriesRateLimited int64
	RetriesOverloaded  int64
	RetriesFailed      int64
	Lanes              map[string]*LaneStats
}

// LaneStats counts one lane's attempts.
type LaneStats struct {
	Org   string // the org's label
	OrgID string // the organization id (anthropic-organization-id): what observations are keyed by
	// Workspace is the workspace whose lane this is, once the
	// organization's lanes were split by workspace ("" : the org's own).
	Workspace    string
	Pool         api.Pool
	Attempts     int64
	OK           int64
	RateLimited  int64
	Overloaded   int64
	Failed       int64
	KeyDead      int64
	InputTokens  int64 // uncached, cache writes and cache reads
	OutputTokens int64
	// CacheReadTokens and CacheWriteTokens are the prompt-cache parts of
	// InputTokens.
	CacheReadTokens, CacheWriteTokens int64
}

// LaneView is one lane's counters with its controller state.
type LaneView struct {
	LaneStats
	Dead  bool
	State lane.State
}

// Snapshot returns the counters and every lane's state. It is safe to call
// from any goroutine.
func (d *Dispatcher) Snapshot() (Stats, []LaneView) {
	now := d.now()
	d.mu.Lock()
	st := d.stats
	st.Lanes = nil
	lanes := append([]*laneState(nil), d.laneList...)
	views := make([]LaneView, len(lanes))
	for i, ls := range lanes {
		if c := d.stats.Lanes[ls.org.label+"/"+string(ls.pool)]; c != nil {
			views[i].LaneStats = *c
		}
		views[i].Org, views[i].OrgID, views[i].Pool = ls.org.label, ls.org.id, ls.pool
		views[i].Workspace = ls.org.ws // set under d.mu (workspace.go)
		views[i].Dead = ls.org.live.Load() == 0 || ls.noKey.Load()
	}
	d.mu.Unlock()
	for i, ls := range lanes {
		views[i].State = ls.l.State(now)
	}
	return st, views
}
