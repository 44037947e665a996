package job

import (
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/event"
	"github.com/sluice-dev/sluice/keys"
)

// Watcher is told what a run does, for its history, live view and metrics
// (internal/see/watch, docs/see.md). Every method may be called from any
// goroutine and must not block: Record and Answered run on the engine's
// paths.
type Watcher interface {
	// Start is called once, when the run starts sending, with what the
	// watcher may read while it runs.
	Start(Live)
	// Record is told the run's decisions (and, through route and batch,
	// each batch chunk's lifecycle); events may come before Start.
	event.Recorder
	// Answered is told each answer the run records (batchID set for a
	// batch's).
	Answered(res dispatch.Result, batchID string)
	// KeysJoined hands over the keys a rotation added.
	KeysJoined(ks []*keys.Key)
}

// Live is what a Watcher reads of a running job; every function is safe
// to call from any goroutine.
type Live struct {
	// Snapshot is the dispatcher's (counters and every lane's state).
	Snapshot func() (dispatch.Stats, []dispatch.LaneView)
	// Batch is the batch path's stats, ok false while it has none.
	Batch func() (st batch.Stats, ok bool)
	// Cost is the ledger's.
	Cost func() cost.Snapshot
	// Durable is the results made durable by this run.
	Durable func() int64
	// Total is the input's lines, Todo the requests this run gives a
	// result, AlreadyDone the results kept from before.
	Total, Todo, AlreadyDone int
	MaxCost                  float64
	// Keys are the run's keys at the start (KeysJoined adds to them).
	Keys []*keys.Key
}

// The hooks: each a line at the place that decides (docs/see.md, "Hooks
// into the engine"); all nil-safe.

func (r *run) watchStart() {
	if r.o.Watch == nil {
		return
	}
	r.o.Watch.Start(Live{
		Snapshot: r.d.Snapshot,
		Batch: func() (batch.Stats, bool) {
			if br := r.fan.Load().Batch(); br != nil {
				return br.Stats(), true
			}
			return batch.Stats{}, false
		},
		Cost:    r.tally.ledger.Snapshot,
		Durable: r.durable.Load,
		Total:   r.in.summary.Lines, Todo: r.todo, AlreadyDone: len(r.st.Done), MaxCost: r.o.MaxCost,
		Keys: r.o.Dispatch.Keys,
	})
}

func (r *run) record(e event.Event) {
	if r.o.Watch != nil {
		if e.At.IsZero() {
			e.At = r.o.Now()
		}
		r.o.Watch.Record(e)
	}
}

// routed records a routing decision: the first (kind event.Route) or a
// re-plan (event.Replan, state applied or refused).
func (r *run) routed(kind, state string, rt route.Routing) {
	r.record(event.Event{Kind: kind, State: state, Route: rt.Route, Share: rt.BatchShare, Why: rt.Why,
		Predicted: rt.Predicted, PredLow: rt.PredictedBand[0], PredHigh: rt.PredictedBand[1]})
}

func (r *run) answered(res dispatch.Result, batchID string) {
	if r.o.Watch != nil {
		r.o.Watch.Answered(res, batchID)
	}
}

func (r *run) keysJoined(rot keys.Rotation) {
	if r.o.Watch == nil || len(rot.Added)+len(rot.Removed) == 0 {
		return
	}
	r.o.Watch.KeysJoined(rot.Added)
	r.record(event.Event{Kind: event.Key, State: "rotated", N: len(rot.Added), Why: rotationWhy(rot)})
}

// rotationWhy names the keys a rotation added and removed, by label and
// last four characters.
func rotationWhy(rot keys.Rotation) string {
	s := ""
	for _, k := range rot.Added {
		s += " +" + k.String()
	}
	for _, k := range rot.Removed {
		s += " -" + k.String()
	}
	if s != "" {
		s = s[1:]
	}
	return s
}
