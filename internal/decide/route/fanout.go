package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/event"
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
	// Prime, if set, receives each sync primer the batch path sends to
	// write a shared prefix into an org's prompt cache before its batch
	// (batch.Config.OnPrime): its cost is the run's.
	Prime func(batch.Prime)
	// Events, if set, records the batch path's chunk lifecycle for the
	// run's history (batch.Config.Events).
	Events event.Recorder
	// MaxRetryAfter caps the retry-after the batch path's control-plane
	// calls wait for (batch.Config.MaxRetryAfter): the run's
	// --max-retry-after, the sync dispatcher's cap.
	MaxRetryAfter time.Duration
	// Lines > 0 is the input's line count when the run may re-plan: the
	// feeders then take lines through Take and pass again through
	// PassDone, so Fanout.Reroute can change the routing mid-run.
	Lines int
}

// Side is where a request is sent: the sync dispatcher or the batch path.
type Side int

// The sides.
const (
	SideSync Side = iota
	SideBatch
	numSides
)

func (s Side) String() string {
	if s == SideBatch {
		return Batch
	}
	return Sync
}

// ErrFrozen is Reroute's error once every feeder has finished its last
// pass: nothing is left to route.
var ErrFrozen = errors.New("route: every request has been given a side; the routing can no longer change")

// ErrSideStopped is Reroute's error, while Drive runs, for a routing that
// sends requests to a side whose feeder has stopped (an error, or every
// key of that side dead): nothing would take them. The routing in force
// stays.
var ErrSideStopped = errors.New("route: the routing sends requests to a side that has stopped taking them")

// Fanout sends a run's requests to two sides: the sync dispatcher, which
// the caller drives, and the batch path, which the Fanout wires. It decides
// each request's side — and, when the run may re-plan (Config.Lines > 0),
// lets the routing change while the feeders run without a request being
// sent twice or left behind (docs/route.md, "Re-planning mid-run").
type Fanout struct {
	cfg     Config
	routing atomic.Pointer[Routing]
	runner  atomic.Pointer[batch.Runner] // nil: every request is sync
	harvest bool                         // the runner only harvests an earlier run's batches
	taken   *lineSet                     // nil: the routing never changes; one pass per feeder

	mu      sync.Mutex
	gen     int64         // bumped by every Reroute
	changed chan struct{} // closed and replaced when gen, active, passed or frozen change
	active  [numSides]bool
	passed  [numSides]int64 // the generation of the last pass each side finished (-1: none)
	frozen  bool
	handoff [numSides][]*dispatch.Request // taken requests given to a side by a Reroute
	drv     *driving                      // set by Drive

	passing [numSides]atomic.Bool // a side's feeder is in a pass over the input
	out     outstanding           // the batch path's unanswered requests (Drive's sweep)
}

// Open starts the batch path when the routing sends anything to batch, or
// when the journal holds batches an earlier run left open (their requests
// may only be answered by those batches); on the sync route that batch
// path finishes what the journal holds and creates nothing. With neither,
// the Fanout has no batch path and every request is sync (until a Reroute
// opens one).
func Open(c Config) (*Fanout, error) {
	f := &Fanout{cfg: c, changed: make(chan struct{}), passed: [numSides]int64{-1, -1}}
	r := c.Routing
	f.routing.Store(&r)
	f.active[SideSync] = true
	if c.Lines > 0 {
		f.taken = newLineSet(c.Lines)
	}
	open, err := batch.HasJournal(c.Journal)
	if err != nil {
		return nil, fmt.Errorf("%w: the journal cannot be read: %w", ErrOpenBatches, err)
	}
	if c.Routing.Route == Sync && !open {
		return f, nil
	}
	f.harvest = c.Routing.Route == Sync
	br, err := f.openRunner(c.Routing.Batch, f.harvest)
	if err != nil {
		if open {
			return nil, fmt.Errorf("%w: %w", ErrOpenBatches, err)
		}
		return nil, err
	}
	f.runner.Store(br)
	f.active[SideBatch] = true
	return f, nil
}

// openRunner builds the batch path with the run's client, keys, journal
// and sink.
func (f *Fanout) openRunner(bc batch.Config, harvestOnly bool) (*batch.Runner, error) {
	c := f.cfg
	bc.HarvestOnly = harvestOnly
	bc.Client, bc.Keys, bc.Logger, bc.NoSync = c.Client, c.Keys, c.Logger, c.NoSync
	bc.Journal, bc.Done = c.Journal, c.Done
	sink, reroute := c.Sink, c.Reroute
	bc.OnResult = func(r batch.Result) {
		f.out.done(r.Request.ID)
		sink(r.Result, r.BatchID)
	}
	if reroute != nil {
		bc.OnReroute = func(req *dispatch.Request, why string) {
			f.out.done(req.ID)
			reroute(req, why)
		}
	}
	bc.MaxRetryAfter = c.MaxRetryAfter
	bc.OnPrime = c.Prime
	bc.Events = c.Events
	return batch.New(bc)
}

// Batch is the batch path's Runner (Run, Submit, CloseInput, Stats,
// Close are the caller's to call), or nil when every request is sync.
func (f *Fanout) Batch() *batch.Runner { return f.runner.Load() }

// Durable passes on the custom_ids whose answers are durable to the batch
// path, if any (batch.Runner.Durable).
func (f *Fanout) Durable(ids []string) {
	if br := f.runner.Load(); br != nil {
		br.Durable(ids)
	}
}

// Routing is the routing in force.
func (f *Fanout) Routing() Routing { return *f.routing.Load() }

// ToBatch reports whether the request with this custom_id goes to the
// batch path now: always when an open batch holds it (only that batch may
// answer it), else as the routing's split rule says — and never without a
// batch path.
func (f *Fanout) ToBatch(id string) bool {
	br := f.runner.Load()
	return br != nil && (br.Holds(id) || f.routing.Load().ToBatch(id))
}

// Take reports whether side s sends the request on input line `line`
// with this custom_id: the routing in force names s for it and, when the
// run may re-plan, no side has taken the line yet (it is then s's).
func (f *Fanout) Take(s Side, line int, id string) bool {
	if f.ToBatch(id) != (s == SideBatch) {
		return false
	}
	return f.taken == nil || f.taken.take(line)
}

// Taken is how many lines the sides have taken (0 when the run does not
// re-plan).
func (f *Fanout) Taken() int {
	if f.taken == nil {
		return 0
	}
	return f.taken.taken()
}

// Generation counts the routing's changes; a feeder reads it as a pass
// begins and hands it to PassDone.
func (f *Fanout) Generation() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// notifyLocked wakes every PassDone waiting for a change.
func (f *Fanout) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// freezeIfDoneLocked freezes the routing once every active side has
// finished a pass under the routing in force.
func (f *Fanout) freezeIfDoneLocked() {
	if f.frozen {
		return
	}
	for s := range numSides {
		if f.active[s] && f.passed[s] != f.gen {
			return
		}
	}
	f.frozen = true
	f.notifyLocked()
}

// PassDone is side s's feeder at the end of a pass over the input that
// began at generation gen. again says to pass once more: the routing
// changed since the pass began. Otherwise it waits until the routing
// changes (again) or every feeder is done (frozen: the feeder ends). A run
// that does not re-plan ends every feeder after one pass. ctx ending
// returns its error.
func (f *Fanout) PassDone(ctx context.Context, s Side, gen int64) (again bool, err error) {
	if f.taken == nil {
		return false, nil
	}
	f.mu.Lock()
	f.passed[s] = gen
	for {
		if f.gen != gen {
			f.mu.Unlock()
			return true, nil
		}
		f.freezeIfDoneLocked()
		if f.frozen {
			f.mu.Unlock()
			return false, nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		f.mu.Lock()
	}
}

// Leave is side s's feeder ending, for whatever reason: the routing no
// longer waits for its passes.
func (f *Fanout) Leave(s Side) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active[s] {
		return
	}
	f.active[s] = false
	f.notifyLocked()
	f.freezeIfDoneLocked()
}

// Frozen reports whether the routing can no longer change.
func (f *Fanout) Frozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen || f.taken == nil
}

// Reroute puts r in force for every line not yet taken. When r sends to
// batch and there is no batch path, it opens one sized by r (opened; while
// Drive runs, it starts it and its feeder at once, else the caller runs
// it); it refuses to send new requests
// to batch while the batch path only harvests an earlier run's batches,
// and fails with ErrFrozen once the feeders are done, or when the run
// does not re-plan; while Drive runs, it fails with ErrSideStopped when r
// sends requests to a side whose feeder has stopped.
//
// reclaim, if set, takes back from the sync side the requests it holds
// but has not sent that r sends to batch (dispatch.Dispatcher.Reclaim,
// with ToBatch as the filter): they are handed to the batch feeder
// (Handoff) before any feeder can see the new routing end.
func (f *Fanout) Reroute(r Routing, reclaim func(toBatch func(*dispatch.Request) bool) []*dispatch.Request) (opened *batch.Runner, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen || f.taken == nil {
		return nil, ErrFrozen
	}
	if f.drv != nil {
		// A side whose feeder has left takes no more lines and sends no
		// handoff: a routing that names it would leave its requests
		// unclaimed, or claimed and never sent.
		toSync, toBatch := r.Route != Batch, r.Route != Sync
		if toSync && !f.active[SideSync] || toBatch && f.runner.Load() != nil && !f.active[SideBatch] {
			return nil, ErrSideStopped
		}
	}
	if r.Route != Sync {
		switch {
		case f.harvest:
			return nil, errors.New("route: the batch path is finishing an earlier run's batches and takes no new request")
		case f.runner.Load() == nil:
			if opened, err = f.openRunner(r.Batch, false); err != nil {
				return nil, err
			}
			f.runner.Store(opened)
			f.active[SideBatch] = true
			f.passed[SideBatch] = -1
			if f.drv != nil {
				f.startBatchLocked(opened)
			}
		}
	}
	f.routing.Store(&r)
	if reclaim != nil && r.Route != Sync {
		back := reclaim(func(req *dispatch.Request) bool { return f.ToBatch(req.ID) })
		f.handoff[SideBatch] = append(f.handoff[SideBatch], back...)
	}
	f.gen++
	f.notifyLocked()
	return opened, nil
}

// Handoff returns, and forgets, the requests a Reroute gave side s: its
// feeder submits them before its next pass (their lines are taken).
func (f *Fanout) Handoff(s Side) []*dispatch.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.handoff[s]
	f.handoff[s] = nil
	return out
}
