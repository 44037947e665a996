// Package event is the one small interface through which the engine tells a
// run's history what it decided: the route, a re-plan, a batch chunk's
// lifecycle, a key rotation, a halt, an interrupt (docs/see.md). The
// engine calls a Recorder at the few places that decide these; a nil
// Recorder records nothing, so every call site is one line.
package event

import "time"

// Kinds of events.
const (
	Route     = "route"     // the first routing (Route, Share, Predicted band, Why)
	Replan    = "replan"    // a re-plan applied (State "applied") or refused ("refused")
	Batch     = "batch"     // a batch chunk's lifecycle: State is one of the Chunk* states
	Key       = "key"       // a key's health changed (State: suspect, dead, live, retired) or keys rotated ("rotated")
	Halt      = "halt"      // the run stopped admitting: --max-cost, a write or journal failure (Why)
	Interrupt = "interrupt" // the user interrupted the run
)

// States of a batch chunk's events.
const (
	ChunkIntent    = "intent"    // about to be created
	ChunkCreated   = "created"   // the API gave it an id (or a list found it: adopted)
	ChunkEnded     = "ended"     // the API ended it; its results are being read
	ChunkCancel    = "cancel"    // sluice is cancelling it (stuck, or at its deadline: Why)
	ChunkCanceled  = "canceled"  // the cancel was accepted
	ChunkHarvested = "harvested" // every result is durable
	ChunkAbandoned = "abandoned" // not harvested: its requests were re-driven elsewhere
	ChunkDropped   = "dropped"   // no request of it is wanted any more
)

// Event is one decision. Fields a kind does not use are zero.
type Event struct {
	At    time.Time
	Kind  string
	State string
	// Lane names the organization (its label) or the lane (org/pool).
	Lane string
	// ID names the subject: a chunk's id, a batch's id, a key's label
	// and last four characters (never a key's value).
	ID    string
	Batch string // a chunk's batch id, once known
	N     int    // requests (a chunk's size)
	Why   string
	// Routing (Route, Replan).
	Route                        string
	Share                        float64 // of the requests sent by batch, on a split
	Predicted, PredLow, PredHigh time.Duration
}

// Recorder records events. Implementations must not block: they are
// called with engine locks held (the batch journal's).
type Recorder interface {
	Record(Event)
}

// Func adapts a function to a Recorder.
type Func func(Event)

// Record calls f.
func (f Func) Record(e Event) { f(e) }

// Record records e on r, if r is not nil.
func Record(r Recorder, e Event) {
	if r != nil {
		r.Record(e)
	}
}
