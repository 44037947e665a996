package batch

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/keys"
)

// chunk is one batch: its requests, what the journal knows of its batch,
// and where it is in its life. Every field is the loop's. A step reads
// only what was fixed before it started: id, org's id and label, ids,
// hashes, index, list, wire, bytes, plain, seedFor, batch, intentAt and
// createdBy.
type chunk struct {
	// What it is, fixed once cut (or resumed).
	id     string
	org    *orgState
	ids    []string
	hashes []string
	index  map[string]int
	list   []*call.Request // new chunks: the requests, in body order
	wire   string          // the wire-id prefix ("": the caller's ids), see wireIDLen
	bytes  int64
	// seedFor: the shared prefixes this chunk seeds, one request each
	// (seed.go); nil for every other chunk.
	seedFor []uint64
	// plain: indices of requests sent without their added breakpoint
	// (seed.go), journaled with the intent.
	plain []int
	// recovered: resumed from the journal (its first poll does not wait).
	recovered bool

	// Where it is: one phase, changed only by enter; whether a step runs
	// for it; when it next moves if it waits for a time (zero: at the
	// loop's next turn); the current phase's retries.
	phase  phase
	inStep bool
	wake   time.Time
	try    tries

	// What the journal knows of its batch.
	intentAt time.Time // the intent was journaled then (zero: not yet)
	// createdBy bounds the creation of this chunk's batch from above: when
	// this run's failed create returned, or, for a resumed intent, when
	// this run opened the journal (the create ended with the process).
	createdBy time.Time
	batch     string
	created   time.Time
	expires   time.Time
	adopted   bool      // found in the org's list: maybe not sluice's, never cancelled
	cancelAt  time.Time // sluice journaled a cancel then
	canceled  bool      // the cancel was accepted
	foreign   bool      // its adopted batch proved another's (counted once)
	// keepOpen: its journal entry is left open at the end (the input was
	// not fed to its end, StopInput, so its unsubmitted requests are the
	// next run's).
	keepOpen bool

	// Its requests.
	reqs       map[string]*call.Request // attached requests
	handled    map[string]bool          // ids whose outcome is decided in this chunk
	waiting    int                      // attached requests without an outcome
	unattached int                      // ids in Runner.recovered
	awaiting   int                      // rows delivered, not yet durable
	parkedN    int
}

func (c *chunk) n() int { return len(c.ids) }

// tries is what the current phase counts between its steps.
type tries struct {
	delay     time.Duration // the next wait
	failures  int
	notFound  int
	until     time.Time         // reconciling: look in the list until then
	verified  bool              // harvesting: the adopted batch's results are ours
	ended     *api.MessageBatch // harvesting: the batch as its end was seen
	createErr error             // reconciling after this run's create failed: its error
	// key is the key a step goes on with (creating after priming; the
	// cancel due after a poll), escape the cancel's reason.
	key    *keys.Key
	escape string
}

// phase is where a chunk is in its life. docs/batch.md ("A chunk's life")
// has the table; transitions lists every change allowed.
type phase uint8

const (
	queued      phase = iota // cut onto an org, or resumed: waits for its org's create turn or a key
	priming                  // the sync primers of its shared prefixes
	creating                 // intent, create, created
	reconciling              // looking for its batch in the org's list
	polling                  // its batch runs
	harvesting               // its batch ended: its results are read
	harvested                // every row handled; closes once the delivered rows are durable
	dropped                  // nobody wants its rows; closes once the delivered rows are durable
	requeued                 // abandoned; its requests went back to the queue
	closed                   // a terminal record is written, or none is due
	leftOpen                 // given up in this run, open in the journal for a later one
)

var phaseNames = [...]string{"queued", "priming", "creating", "reconciling", "polling", "harvesting",
	"harvested", "dropped", "requeued", "closed", "leftOpen"}

func (p phase) String() string { return phaseNames[p] }

// holdsWindow: the chunk's requests count in its org's window.
func (p phase) holdsWindow() bool { return p <= polling }

// unresolved: the chunk's create is unresolved (no batch yet): at most one
// such chunk is new on its org (one create at a time).
func (p phase) unresolved() bool { return p <= reconciling }

// finished: this run does nothing more with the chunk's batch.
func (p phase) finished() bool { return p >= harvested }

// terminal: nothing more happens to the chunk in this run.
func (p phase) terminal() bool { return p >= requeued }

// transitions lists, for each phase, the phases it may go to. Any phase
// before harvested may also go to dropped: Run ended with every request
// answered, or nobody wants the chunk's rows.
var transitions = [...][]phase{
	queued:      {priming, creating, reconciling, requeued, closed},
	priming:     {creating, closed},
	creating:    {polling, reconciling, requeued, closed},
	reconciling: {polling, requeued},
	polling:     {harvesting, leftOpen, closed},
	harvesting:  {harvested, leftOpen, closed},
	harvested:   {closed},
	dropped:     {closed},
}

// enter moves c to phase next, the one place a chunk's phase changes, and
// keeps the org's counters with it: c leaves its org's window and its
// org's unresolved creates (and the create turn) with the phases that hold
// them, and settles its seed (seed.go) when it finishes. Its retries start
// afresh. Loop-owned.
func (r *Runner) enter(c *chunk, next phase) {
	prev := c.phase
	ok := next == dropped && !prev.finished()
	for _, p := range transitions[prev] {
		ok = ok || p == next
	}
	if !ok {
		panic(fmt.Sprintf("batch: chunk %s cannot go from %v to %v", c.id, prev, next))
	}
	c.phase, c.wake, c.try = next, time.Time{}, tries{}
	o := c.org
	if prev.holdsWindow() && !next.holdsWindow() {
		o.inflight -= c.n()
	}
	if prev.unresolved() && !next.unresolved() {
		o.creating--
		if o.turn == c {
			o.turn = nil
		}
	}
	if !prev.finished() && next.finished() {
		r.seedEnded(c, next == requeued)
	}
	r.in.poke() // the org's window, its create turn: the loop looks again
}

// wanted reports whether anyone still waits for a row of c.
func (r *Runner) wanted(c *chunk) bool {
	return c.waiting > 0 || (r.input == inputOpen && c.unattached > 0)
}

// maybeClose writes c's terminal record once c is harvested or dropped,
// every row it delivered is durable and none is parked: harvested, or
// dropped — nothing for a chunk never journaled (or an intent a resume
// must reconcile). Written by the flusher, unsynced: a lost one costs one
// more download on resume.
func (r *Runner) maybeClose(c *chunk) {
	if (c.phase != harvested && c.phase != dropped) || c.keepOpen || c.awaiting > 0 || c.parkedN > 0 {
		return
	}
	if c.phase == harvested {
		r.flush.queue(record{Op: opHarvested, Chunk: c.id, At: r.now(), Batch: c.batch})
	} else if c.batch != "" || c.recovered {
		r.flush.queue(record{Op: opDropped, Chunk: c.id, At: r.now(), Batch: c.batch, Why: "no request of the chunk is wanted any more"})
	}
	r.enter(c, closed)
}

// takeUnhandled marks c's attached requests without an outcome handled and
// returns them, in body order.
func (r *Runner) takeUnhandled(c *chunk) []*call.Request {
	var out []*call.Request
	for _, id := range c.ids {
		if q := c.reqs[id]; q != nil && !c.handled[id] {
			c.handled[id] = true
			out = append(out, q)
		}
	}
	return out
}

// freeUnattached forgets c's ids that were not submitted: a later Submit
// of one starts afresh.
func (r *Runner) freeUnattached(c *chunk) {
	if c.unattached == 0 {
		return
	}
	for _, id := range c.ids {
		if r.recovered[id] == c {
			delete(r.recovered, id)
		}
	}
	c.unattached = 0
}

// What abandon does with the requests of a chunk that has no batch.
const (
	moveRequeue = iota // back to the queue, for another chunk
	moveReroute        // to the sync path
)

// abandon closes c, which has no batch (or one that will never be
// harvested), and moves its requests: back to the front of the queue, or
// to the sync path. A journaled chunk is recorded abandoned first.
func (r *Runner) abandon(c *chunk, why string, move int) {
	if !c.intentAt.IsZero() {
		if err := r.j.append(record{Op: opAbandoned, Chunk: c.id, At: r.now(), Batch: c.batch, Why: why}, true); err != nil {
			r.fail(err)
			return
		}
	}
	back := r.takeUnhandled(c)
	r.freeUnattached(c)
	if move == moveRequeue {
		c.waiting -= len(back)
		r.q.pushFront(back)
		r.enter(c, requeued)
		return
	}
	r.enter(c, closed)
	for _, q := range back {
		r.emitReroute(c, q, why)
	}
}

// giveUp ends this run's work on c's batch and re-routes its requests
// without an outcome. keepOpen leaves the journal entry open, so a resume
// with a working key can still harvest it; its ids not submitted yet are
// then held back (see Holds), not sent again.
func (r *Runner) giveUp(c *chunk, why string, keepOpen bool) {
	if !keepOpen {
		if err := r.j.append(record{Op: opAbandoned, Chunk: c.id, At: r.now(), Batch: c.batch, Why: why}, true); err != nil {
			r.fail(err)
			return
		}
	}
	if keepOpen {
		// Held from now on; what was submitted before joins c first, and
		// is re-routed with its other requests.
		var ids, hashes []string
		for i, id := range c.ids {
			if r.recovered[id] == c {
				ids, hashes = append(ids, id), append(hashes, c.hashes[i])
			}
		}
		r.place(r.in.holdAndTake(ids, hashes))
	}
	r.stats.GivenUp++
	back := r.takeUnhandled(c)
	r.freeUnattached(c)
	if keepOpen {
		r.enter(c, leftOpen)
	} else {
		r.enter(c, closed)
	}
	r.log.Warn("batch: giving a batch up; its requests are re-routed to sync", "org", c.org.label, "batch", c.batch,
		"requests", len(back), "reason", why)
	for _, q := range back {
		r.emitReroute(c, q, "batch given up: "+why)
	}
}

// drop ends this run's work on c, which no request waits for.
func (r *Runner) drop(c *chunk) {
	r.enter(c, dropped)
	r.maybeClose(c)
}
