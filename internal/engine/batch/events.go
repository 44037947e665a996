package batch

import (
	"sync"

	"github.com/sluice-dev/sluice/internal/engine/event"
)

// chunkEvents turns the journal's records into the history's batch events
// (Config.Events): each chunk's intent, create, cancel, harvest, abandon
// or drop, named by its organization's label (from its intent, or from
// the journal an earlier run left, entries). Nil when rec is nil.
func chunkEvents(rec event.Recorder, entries map[string]*entry) func(record) {
	if rec == nil {
		return nil
	}
	var mu sync.Mutex
	orgOf := map[string]string{}
	for id, e := range entries {
		orgOf[id] = e.intent.OrgLabel
	}
	return func(r record) {
		var state string
		switch r.Op {
		case opIntent:
			state = event.ChunkIntent
		case opCreated:
			state = event.ChunkCreated
		case opCancel:
			state = event.ChunkCancel
		case opCanceled:
			state = event.ChunkCanceled
		case opHarvested:
			state = event.ChunkHarvested
		case opAbandoned:
			state = event.ChunkAbandoned
		case opDropped:
			state = event.ChunkDropped
		default:
			return
		}
		mu.Lock()
		if r.Op == opIntent {
			orgOf[r.Chunk] = r.OrgLabel
		}
		org := orgOf[r.Chunk]
		mu.Unlock()
		e := event.Event{At: r.At, Kind: event.Batch, State: state, Lane: org, ID: r.Chunk, Batch: r.Batch, N: r.N, Why: r.Why}
		if r.Adopted {
			e.Why = "adopted: found in the organization's list"
		}
		rec.Record(e)
	}
}

// chunkEnded records that c's batch ended (its results are read next).
func (r *Runner) chunkEnded(c *chunk) {
	if r.cfg.Events != nil {
		r.cfg.Events.Record(event.Event{At: r.now(), Kind: event.Batch, State: event.ChunkEnded, Lane: c.org.label, ID: c.id, Batch: c.batch, N: c.n()})
	}
}
