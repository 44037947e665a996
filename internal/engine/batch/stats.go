package batch

import "github.com/sluice-dev/sluice/api"

// Stats is a snapshot of the batch path.
type Stats struct {
	Submitted int64 // requests accepted by Submit (held ones aside)
	Results   int64 // OnResult calls
	Rerouted  int64 // OnReroute calls
	Pending   int   // requests not yet in a chunk
	// Held is the requests held back: their journaled batch belongs to an
	// org no usable key reaches (see Holds).
	Held int
	// Batches created, adopted after a crash or an ambiguous create,
	// ended, cancelled by sluice, and given up (re-routed).
	Created, Adopted, Ended, Cancelled, GivenUp int64
	// Foreign is the adopted batches whose results showed them another's
	// (other custom_ids, or answers from another model): nothing was
	// harvested from them and their chunks were re-driven.
	Foreign int64
	// Primed counts the sync primers that wrote a shared prefix into an
	// org's prompt cache before its batches; PrimeFailed those that got no
	// answer (the batch was created anyway).
	Primed, PrimeFailed int64
	// Seeds counts the seed batches created (one request per shared
	// prefix, to warm an organization's cache before its other chunks of
	// those prefixes: seed.go); AsWritten the requests whose added
	// breakpoint was taken off because their organization's cache was not
	// batch-warm (a resumed run counts those of its recovered chunks).
	Seeds, AsWritten int64
	// InFlight is, per org label, the requests in unended batches.
	InFlight map[string]int
	// Turnaround is, per org label, the batches that ended without being
	// cancelled and their create-to-end times by the API's own clock
	// (created_at to ended_at): what the planner's queue model is checked
	// against (package observe records it).
	Turnaround map[string]Turnaround
	// QueueBound is, per org label, the bound its full processing queue
	// showed (queuebound.go).
	QueueBound map[string]QueueBound
}

// Turnaround sums one organization's ended batches.
type Turnaround struct {
	OrgID    string
	Batches  int64
	Requests int64   // in those batches
	Seconds  float64 // their create-to-end times, summed
}

// countTurnaround adds an ended batch to its org's Stats.Turnaround, by
// the API's clock; a batch sluice cancelled ended early and says nothing
// of the queue.
func (r *Runner) countTurnaround(c *chunk, b *api.MessageBatch) {
	if b.EndedAt == nil || b.CreatedAt.IsZero() || b.CancelInitiatedAt != nil || !b.EndedAt.After(b.CreatedAt) {
		return
	}
	rc := b.RequestCounts
	n := rc.Processing + rc.Succeeded + rc.Errored + rc.Canceled + rc.Expired
	if r.stats.Turnaround == nil {
		r.stats.Turnaround = map[string]Turnaround{}
	}
	t := r.stats.Turnaround[c.org.label]
	t.OrgID = c.org.id
	t.Batches++
	t.Requests += n
	t.Seconds += b.EndedAt.Sub(b.CreatedAt).Seconds()
	r.stats.Turnaround[c.org.label] = t
}
