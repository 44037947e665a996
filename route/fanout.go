package route

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

// ErrOpenBatches wraps Open's error when batches an earlier run left open
// may hold some of the requests (the journal says so, or cannot be read)
// and the batch path cannot take them: the caller must not send those
// requests on sync, or they may be paid twice.
var ErrOpenBatches = errors.New("route: batches an earlier run left open may hold these requests, and the batch path cannot take them")

// Sink receives every answer of a run, whichever side produced it: batchID
// is the Message Batch's id for a batch answer and "" for a sync one. The
// caller gives its sync answers to the same function, so an answer is
// recorded one way wherever it came from.
type Sink func(r dispatch.Result, batchID string)

// Config configures a Fanout.
type Config struct {
	Routing Routing
	// Client, Keys (with their orgs discovered), Logger and NoSync are the
	// batch path's (batch.Config).
	Client *client.Client
	Keys   []*keys.Key
	Logger *slog.Logger
	NoSync bool
	// Journal is the batch path's write-ahead journal: a run's, or a
	// virtual batch's.
	Journal string
	// Done reports whether a custom_id already has a kept result (resume):
	// the batch path neither delivers nor waits for it.
	Done func(id string) bool
	// Sink receives the batch path's answers (required when a batch path
	// may start).
	Sink Sink
	// Reroute receives a request the batch path gives back (expired,
	// stuck, cancelled, no key for its org), with the reason: send it on
	// sync, where its answer goes to the same Sink.
	Reroute func(req *dispatch.Request, why string)
}

// Fanout sends a run's requests to two sides: the sync dispatcher, which
// the caller drives, and the batch path, which the Fanout wires. It decides
// each request's side.
type Fanout struct {
	routing Routing
	runner  *batch.Runner // nil: every request is sync
}

// Open starts the batch path when the routing sends anything to batch, or
// when the journal holds batches an earlier run left open (their requests
// may only be answered by those batches); on the sync route that batch
// path finishes what the journal holds and creates nothing. With neither,
// the Fanout has no batch path and every request is sync.
func Open(c Config) (*Fanout, error) {
	f := &Fanout{routing: c.Routing}
	open, err := batch.HasJournal(c.Journal)
	if err != nil {
		return nil, fmt.Errorf("%w: the journal cannot be read: %w", ErrOpenBatches, err)
	}
	if c.Routing.Route == Sync && !open {
		return f, nil
	}
	bc := c.Routing.Batch
	bc.HarvestOnly = c.Routing.Route == Sync
	bc.Client, bc.Keys, bc.Logger, bc.NoSync = c.Client, c.Keys, c.Logger, c.NoSync
	bc.Journal, bc.Done = c.Journal, c.Done
	sink := c.Sink
	bc.OnResult = func(r batch.Result) { sink(r.Result, r.BatchID) }
	bc.OnReroute = c.Reroute
	if f.runner, err = batch.New(bc); err != nil {
		if open {
			return nil, fmt.Errorf("%w: %w", ErrOpenBatches, err)
		}
		return nil, err
	}
	return f, nil
}

// Batch is the batch path's Runner (Run, Submit, CloseInput, Stats,
// Close are the caller's to call), or nil when every request is sync.
func (f *Fanout) Batch() *batch.Runner { return f.runner }

// Routing is the routing the Fanout was opened with.
func (f *Fanout) Routing() Routing { return f.routing }

// ToBatch reports whether the request with this custom_id goes to the
// batch path: always when an open batch holds it (only that batch may
// answer it), else as the routing's split rule says — and never without a
// batch path.
func (f *Fanout) ToBatch(id string) bool {
	return f.runner != nil && (f.runner.Holds(id) || f.routing.ToBatch(id))
}
