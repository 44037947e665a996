package batch

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/keys"
)

// intake is what the Runner's callers hand the loop between two of its
// turns: submitted requests, ids reported durable, keys joining, the end
// of the input, a cancel. Its lock is held only to append or to take, so
// Submit works before Run starts and Durable never waits on the loop. It
// owns the Submit bound and the ids held back (accepted silently).
type intake struct {
	mu   sync.Mutex
	kick chan struct{} // capacity 1: wakes the loop
	// max: Submit blocks while this many requests wait to be cut (arrived
	// and queued), except one a resumed chunk may hold (resumable).
	max       int
	resumable map[string]bool // Runner.holds: read-only
	arrived   []*call.Request
	queued    int           // requests the loop holds waiting to be cut, as of its last turn
	space     chan struct{} // closed when arrived + queued shrinks
	// held: id → params hash of requests accepted with no callback (their
	// batch is on an org no usable key reaches, see Runner.Holds).
	held      map[string]string
	accepted  int64 // requests accepted (Stats.Submitted), held ones aside
	durable   []string
	keys      []*keys.Key
	cutNow    bool
	end       inputEnd
	cancelWhy string
	cancelled chan struct{} // closed by Cancel: steps read it
	started   bool
	stopped   bool
}

// inputEnd is how the input stands.
type inputEnd uint8

const (
	inputOpen   inputEnd = iota
	inputClosed          // CloseInput: the whole input was submitted
	inputKept            // StopInput: cut short; resumed chunks stay open for the next run
)

func newIntake(max int, resumable map[string]bool, held map[string]string) *intake {
	return &intake{kick: make(chan struct{}, 1), max: max, resumable: resumable, held: held,
		space: make(chan struct{}), cancelled: make(chan struct{})}
}

func (in *intake) poke() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// Submit hands req to the batch path. It blocks while enough requests wait
// to be cut into chunks, and returns ErrStopped after CloseInput or once
// the Runner stopped. A request whose id a resumed chunk carries, with the
// same params hash, joins that chunk instead of a new one (it never waits
// for room); one whose id is held back (see Holds) with the same params
// hash is accepted and gets no callback in this run.
func (r *Runner) Submit(ctx context.Context, req *call.Request) error {
	in := r.in
	in.mu.Lock()
	for {
		if in.end != inputOpen || in.stopped {
			in.mu.Unlock()
			return ErrStopped
		}
		if h, ok := in.held[req.ID]; ok && h == req.ParamsHash {
			in.mu.Unlock()
			return nil
		}
		if len(in.arrived)+in.queued < in.max || in.resumable[req.ID] {
			break
		}
		ch := in.space
		in.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err() // not submitted: it counts nowhere
		}
		in.mu.Lock()
	}
	in.arrived = append(in.arrived, req)
	in.accepted++
	in.cutNow = false
	in.mu.Unlock()
	in.poke()
	return nil
}

// CutWaiting cuts the requests waiting now into a chunk, short or not: the
// feeder has paused (a run that may re-plan ends a pass over its input
// but not the input), and they should not wait for a full chunk that may
// never come. A later Submit waits for a full chunk again.
func (r *Runner) CutWaiting() {
	in := r.in
	in.mu.Lock()
	in.cutNow = len(in.arrived)+in.queued > 0
	in.mu.Unlock()
	in.poke()
}

// Cancel is for a caller that no longer wants the answers (a cancelled
// virtual batch), not for a stop that will resume (that is Run's ctx):
// no batch is created any more, the requests waiting to be cut into one
// and any submitted later are given back through OnReroute with why
// (except a request a resumed chunk carries: it joins that chunk), and
// each batch running is cancelled at once — its ended rows are harvested
// as usual, the rest come back through OnReroute. A batch adopted through
// the list may be a colleague's and is never cancelled. Safe to call
// more than once and from any goroutine, a callback included; the first
// why counts.
func (r *Runner) Cancel(why string) {
	in := r.in
	in.mu.Lock()
	if in.cancelWhy == "" {
		if why == "" {
			why = "cancelled"
		}
		in.cancelWhy = why
		close(in.cancelled)
	}
	in.mu.Unlock()
	in.poke()
}

// cancelReason is Cancel's why, or "" — for a step, which may not read the
// loop's copy.
func (in *intake) cancelReason() string {
	select {
	case <-in.cancelled:
	default:
		return ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cancelWhy
}

// StopInput says no more requests will be submitted because the input was
// not fed to its end (an interrupt, a halt, a write error): a partial chunk
// may be cut, but the rows of resumed chunks whose requests never came are
// still the next run's — those chunks stay open in the journal, never
// recorded harvested (closing them made the next run batch, and pay for,
// their requests again).
func (r *Runner) StopInput() { r.in.endInput(inputKept) }

// CloseInput says the whole input was submitted: a partial chunk may be
// cut, and rows of resumed chunks whose requests were not submitted are
// not wanted (the input no longer holds them).
func (r *Runner) CloseInput() { r.in.endInput(inputClosed) }

func (in *intake) endInput(e inputEnd) {
	in.mu.Lock()
	if in.end == inputOpen {
		in.end = e
	}
	in.mu.Unlock()
	in.poke()
}

// Durable reports that the results of ids are on disk (results.Options
// OnDurable). Once every row a batch delivered is durable, the journal
// records it harvested and a resume will not download it again. Ids the
// batch path did not deliver are ignored. It never waits: the ids are
// queued for the loop (or Close).
func (r *Runner) Durable(ids []string) {
	if len(ids) == 0 {
		return
	}
	in := r.in
	in.mu.Lock()
	in.durable = append(in.durable, ids...)
	in.mu.Unlock()
	in.poke()
}

// AddKeys adds keys to a running Runner (a rotation): a key of an org the
// runner batches on joins it; a key of an org it does not know serves the
// sync path only until the next run (logged). A key is taken out by
// retiring it (keys.Key.Retire): the runner's next call uses another. The
// keys join at the loop's next turn.
func (r *Runner) AddKeys(_ context.Context, ks []*keys.Key) error {
	in := r.in
	in.mu.Lock()
	in.keys = append(in.keys, ks...)
	in.mu.Unlock()
	in.poke()
	return nil
}

// arrivals is what one turn of the loop takes from the intake.
type arrivals struct {
	reqs      []*call.Request
	durable   []string
	keys      []*keys.Key
	accepted  int64
	cutNow    bool
	end       inputEnd
	cancelWhy string
}

// take hands the loop everything that arrived. The requests count as
// queued until the loop says otherwise (setQueued).
func (in *intake) take() arrivals {
	in.mu.Lock()
	defer in.mu.Unlock()
	a := arrivals{reqs: in.arrived, durable: in.durable, keys: in.keys, accepted: in.accepted,
		cutNow: in.cutNow, end: in.end, cancelWhy: in.cancelWhy}
	in.queued += len(in.arrived)
	in.arrived, in.durable, in.keys = nil, nil, nil
	return a
}

// setQueued tells the intake how many requests the loop holds waiting to
// be cut; fewer than before makes room for Submit.
func (in *intake) setQueued(n int) {
	in.mu.Lock()
	if n < in.queued {
		close(in.space)
		in.space = make(chan struct{})
	}
	in.queued = n
	in.mu.Unlock()
}

// holdAndTake holds ids (with their params hashes) back from now on and
// hands the loop the requests that arrived before, which it places first:
// whatever Submit accepted is either placed before the hold or held.
func (in *intake) holdAndTake(ids, hashes []string) []*call.Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, id := range ids {
		in.held[id] = hashes[i]
	}
	reqs := in.arrived
	in.queued += len(reqs)
	in.arrived = nil
	return reqs
}

// start marks Run started; false if it was.
func (in *intake) start() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	was := in.started
	in.started = true
	return !was
}

// stop refuses every Submit from now on and wakes those waiting.
func (in *intake) stop() {
	in.mu.Lock()
	in.stopped = true
	close(in.space)
	in.space = make(chan struct{})
	in.mu.Unlock()
}

// counts is what Stats reads of the intake.
func (in *intake) counts() (accepted int64, arrived, held int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.accepted, len(in.arrived), len(in.held)
}

// place puts each submitted request where it belongs: its parked row, the
// resumed chunk that carries it, the sync path (too large for any batch,
// or no batch can take it now), or the queue to cut. Loop-owned.
func (r *Runner) place(reqs []*call.Request) {
	for _, req := range reqs {
		id := req.ID
		if p := r.parked[id]; p != nil {
			delete(r.parked, id)
			c := p.c
			c.parkedN--
			if p.hash == req.ParamsHash {
				r.asJournaled(c, req)
				c.reqs[id] = req
				c.waiting++
				r.deliverRow(c, req, p.row)
				r.maybeClose(c)
				continue
			}
			r.maybeClose(c)
		} else if c := r.recovered[id]; c != nil {
			delete(r.recovered, id)
			c.unattached--
			if c.hashes[c.index[id]] == req.ParamsHash {
				r.asJournaled(c, req)
				c.reqs[id] = req
				c.waiting++
				continue
			}
			// The request changed since the chunk was journaled: the
			// batch's row answers the old one.
			c.handled[id] = true
		}
		if size := itemSize(req); size+int64(envelope) > r.cfg.MaxChunkBytes {
			r.emitReroute(nil, req, fmt.Sprintf("request of %d bytes is larger than a batch may be", size))
			continue
		}
		if why := r.noBatch(r.now()); why != "" {
			r.emitReroute(nil, req, why)
			continue
		}
		r.q.push(req)
	}
}
