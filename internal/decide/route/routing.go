// Package route is the one owner of how a job's requests are sent: the
// route names, the Routing a run carries, the split rule, the fan-out that
// sends each request to the sync dispatcher or the batch path and hands
// both sides' answers to one sink, the drive of both sides (Fanout.Drive:
// the batch path's start, the feeders, re-routes on a re-plan, the batch
// input's close, the wait, the sweep of the unanswered — the one owner of
// exactly-once through a re-plan), and the planner hook that turns the
// planner's decision into a Routing. Package job (a run's requests, read
// from a file) and package proxy (a virtual batch's rows) both route
// through it; it imports neither. See docs/route.md.
package route

import (
	"hash/fnv"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/keys"
)

// Routes a request can take: the values of Routing.Route, and of the
// "route" each results line records.
const (
	Sync  = "sync"
	Batch = "batch"
	Split = "split" // Routing.BatchShare of the requests by batch, the rest sync
	// Cache marks a row answered from the response cache, without a call.
	Cache = "cache"
)

// Routing is how a run sends its requests.
type Routing struct {
	Route string
	// BatchShare is the fraction of requests routed to batch in a split;
	// a request's side is a function of its custom_id (ToBatch), so a
	// resumed run routes it the same way.
	BatchShare float64
	// Batch configures the batch path: ChunkSize, WindowPerOrg,
	// StuckAfter, Deadline, poll intervals. Client, Keys, Journal and the
	// callbacks are set by Open.
	Batch batch.Config
	// SyncOrgs, if set, restricts the sync route to these organizations,
	// named by the label of their first key (a small job needs fewer).
	SyncOrgs []string
	// Why explains the choice; Predicted is the planner's wall-clock.
	Why       string
	Predicted time.Duration
	// PredictedBand is the planner's low and high wall-clock around
	// Predicted (zero when it gave none).
	PredictedBand [2]time.Duration
}

// ToBatch is the split rule: whether the routing sends the request with
// this custom_id to batch — every request on the batch route, none on the
// sync route, and on a split the ids whose FNV-1a hash falls in the first
// BatchShare of 10,000 buckets. It depends on the id alone, so a resumed
// run, or a restarted proxy, agrees with the first.
func (r Routing) ToBatch(id string) bool {
	switch r.Route {
	case Batch:
		return true
	case Split:
		h := fnv.New32a()
		h.Write([]byte(id))
		return float64(h.Sum32()%10000) < r.BatchShare*10000
	}
	return false
}

// SyncKeys keeps the keys of the organizations SyncOrgs names (by the label
// of their first key); with SyncOrgs empty, or none of them matched, it
// keeps them all.
func (r Routing) SyncKeys(ks []*keys.Key) []*keys.Key {
	if len(r.SyncOrgs) == 0 {
		return ks
	}
	want := map[string]bool{}
	for _, o := range r.SyncOrgs {
		want[o] = true
	}
	label := map[string]string{} // org id → label of its first key
	for _, k := range ks {
		if _, ok := label[k.Org()]; !ok {
			label[k.Org()] = k.Label()
		}
	}
	var out []*keys.Key
	for _, k := range ks {
		if want[label[k.Org()]] {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return ks
	}
	return out
}
