// Package batch sends requests through the Message Batches API: it cuts
// them into chunks by count and body bytes, creates each chunk as a batch
// on the organization with the most free window, polls it, streams its
// results, and hands every request back exactly once, as a result or as a
// request to re-route to the sync dispatcher.
//
// A write-ahead journal makes a crash at any point cost neither a second
// payment nor a batch: the intent of a create is fsynced before it, the id
// right after, and a resume adopts an orphaned batch through the org's list
// instead of creating it again.
//
// One goroutine, the loop (Run's), owns the Runner's state; the network
// and disk work of a chunk runs in steps that report to it, as attempts
// report to dispatch's loop. The design note is docs/batch.md.
package batch

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
)

// ErrStopped is returned by Submit once the Runner stopped, or after
// CloseInput.
var ErrStopped = errors.New("batch: runner stopped or input closed")

// errCrash is a simulated crash (tests).
var errCrash = errors.New("batch: simulated crash")

// errFinished cancels the steps nobody waits for once every request has
// its outcome.
var errFinished = errors.New("batch: finished")

// Runner drives requests through Message Batches. Create with New; feed
// with Submit and CloseInput while Run runs; report durable results with
// Durable; Close after Run returned.
//
// Every submitted request gets exactly one callback — Config.OnResult or
// Config.OnReroute — unless Run stops first (context cancelled, journal
// failure): then the rest get none and a resume picks them up. The one
// exception is a request held back (see Holds): it gets no callback in this
// run, and a run with a key of its batch's org harvests it. Callbacks run
// on Run's goroutine, one at a time; they may block (the Runner waits),
// but must not call Submit.
type Runner struct {
	cfg   Config
	log   *slog.Logger
	j     *journal
	flush *flusher
	in    *intake
	runID string
	// holds: the not-done ids of the chunks the journal left open;
	// read-only after New.
	holds  map[string]bool
	events chan report // steps → the loop

	// The loop's: nothing else reads or writes them.
	orgs      []*orgState           // by label
	chunks    []*chunk              // the chunks this run still acts on
	q         queue                 // requests waiting to be cut
	recovered map[string]*chunk     // ids of resumed chunks not yet submitted
	parked    map[string]*parkedRow // harvested rows waiting for their request
	durWait   map[string]*chunk     // delivered ids not yet reported durable
	claimed   map[string]bool       // batch ids the journal knows
	warned    map[string]bool       // warnings logged once
	outcomes  int64                 // callbacks given
	input     inputEnd
	cancelWhy string
	primeOne  bool // the endpoint refused a max_tokens 0 primer and took 1
	stats     Stats
	live      runState

	pub   published // what Stats reads
	crash crashHook
}

// runState is the run in progress. Loop-owned.
type runState struct {
	// ctx ends on an interrupt or a fatal error; pollCtx also when every
	// request has its outcome (it stops the steps of chunks nobody waits
	// for, while a results download under way finishes on ctx).
	ctx, pollCtx context.Context
	cancel       context.CancelCauseFunc
	steps        int   // steps running
	fatal        error // why the Runner stopped for good
}

// published is the loop's view for Stats, copied at the end of each turn.
type published struct {
	mu     sync.Mutex
	stats  Stats
	parked int
}

// crashHook is the tests' simulated crash: at, when set, is asked at each
// crash point; true makes the Runner stop there as if the process had
// died (the journal frozen, no more callbacks).
type crashHook struct {
	at   func(point string) bool
	dead atomic.Bool
}

// parkedRow is a harvested row of a resumed chunk whose request has not
// been submitted yet.
type parkedRow struct {
	c    *chunk
	row  *resultRow
	hash string
}

// Holds reports whether customID is a not-done id (Config.Done) of a chunk
// the journal left open when New ran (an intent not resolved, or a batch
// not harvested, dropped or abandoned). Such a request must be submitted
// to this Runner and sent nowhere else in this run, or it may be paid
// twice: it joins its resumed chunk, gets the row harvested for it, or is
// held back when no usable key reaches its batch's org (Submit accepts it
// and gives it no callback). The answer is fixed at New and does not
// change during the run, so callers asking at different times agree; if
// the chunk is abandoned before the id is submitted, Submit treats it as a
// new request. Safe for concurrent use; valid from New on.
func (r *Runner) Holds(customID string) bool {
	return r.holds[customID] // written only by New: no lock needed
}

// Run drives every submitted request to its outcome. It returns nil once
// the input is closed and every request has had its callback; the
// context's cause when ctx ends first (batches keep running on the API and
// a resume harvests them); or the error that stopped it (the journal).
func (r *Runner) Run(ctx context.Context) error {
	if !r.in.start() {
		return errors.New("batch: Run called twice")
	}
	var stopPolls context.CancelCauseFunc
	r.live.ctx, r.live.cancel = context.WithCancelCause(ctx)
	r.live.pollCtx, stopPolls = context.WithCancelCause(r.live.ctx)
	defer r.flush.start()()

	normal := r.loop()

	// Nothing more is submitted or started: the steps running report, and
	// their reports are applied; a results download under way finishes.
	r.in.stop()
	stopPolls(errFinished)
	for r.live.steps > 0 {
		r.apply(<-r.events)
	}
	r.live.cancel(errFinished)
	defer r.publish()
	if r.live.fatal != nil {
		return r.live.fatal
	}
	if !normal {
		return context.Cause(ctx)
	}
	// Chunks nobody waits for: closed once their delivered rows are durable.
	r.applyDurable(r.in.take().durable)
	for _, c := range r.chunks {
		if !c.phase.finished() {
			r.enter(c, dropped)
		}
		r.maybeClose(c)
	}
	return nil
}

// loop is the Runner's one goroutine: each turn it takes what callers
// handed in, cuts chunks and starts the steps that are due, then waits for
// a step's report, a caller or a timer. It returns true once the input is
// closed and every request has had its callback, false when ctx ended or
// the Runner failed.
func (r *Runner) loop() bool {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if r.live.ctx.Err() != nil {
			return false
		}
		now := r.now()
		accepted := r.intake(now)
		wake := time.Time{}
		if r.live.fatal == nil {
			wake = earliest(r.schedule(now), r.advance(now))
		}
		r.publish()
		switch {
		case r.live.fatal != nil:
			return false
		case r.input != inputOpen && r.outcomes == accepted:
			return true
		}
		d := time.Hour
		if !wake.IsZero() {
			d = max(wake.Sub(r.now()), time.Millisecond)
		}
		timer.Reset(d)
		select {
		case rep := <-r.events:
			r.apply(rep)
		case <-r.in.kick:
		case <-timer.C:
		case <-r.live.ctx.Done():
		}
	}
}

// intake applies what callers handed in since the last turn — keys
// joining, a Cancel, CutWaiting, submitted requests, durable ids, the end
// of the input, in that order — and returns how many requests were
// accepted in all.
func (r *Runner) intake(now time.Time) int64 {
	a := r.in.take()
	r.addKeys(a.keys)
	if a.cancelWhy != "" && r.cancelWhy == "" {
		r.cancelWhy = a.cancelWhy
		for _, c := range r.chunks {
			if c.phase == polling && !c.inStep && r.cancelDue(c) {
				c.wake = time.Time{} // cancel it now, not at its next poll
			}
		}
	}
	r.q.cutNow = a.cutNow
	r.place(a.reqs)
	r.applyDurable(a.durable)
	if a.end != inputOpen && r.input == inputOpen {
		r.input = a.end
		keep := a.end == inputKept
		for id, p := range r.parked {
			delete(r.parked, id)
			p.c.parkedN--
			if keep {
				p.c.keepOpen = true
			} else {
				r.maybeClose(p.c)
			}
		}
		for id, c := range r.recovered {
			delete(r.recovered, id)
			c.unattached--
			c.keepOpen = c.keepOpen || keep
		}
	}
	return a.accepted
}

// applyDurable counts delivered rows durable (Durable): a chunk closes
// once every row it delivered is.
func (r *Runner) applyDurable(ids []string) {
	for _, id := range ids {
		c := r.durWait[id]
		if c == nil {
			continue
		}
		delete(r.durWait, id)
		c.awaiting--
		r.maybeClose(c)
	}
}

// advance moves each chunk that is due and has no step running: its
// phase's next step, or its next phase. It returns when the next chunk
// will be due, and forgets the chunks this run is done with.
func (r *Runner) advance(now time.Time) (wake time.Time) {
	for _, c := range r.chunks {
		if c.inStep || c.phase.finished() {
			continue
		}
		if !c.wake.IsZero() && now.Before(c.wake) {
			wake = earliest(wake, c.wake)
			continue
		}
		switch c.phase {
		case queued:
			r.advanceQueued(c, now)
		case creating:
			r.startCreate(c)
		case reconciling:
			r.advanceReconcile(c, now)
		case polling:
			r.advancePoll(c, now)
		case harvesting:
			r.advanceHarvest(c, now)
		}
		if r.live.fatal != nil {
			return time.Time{}
		}
		if !c.inStep && !c.phase.finished() {
			wake = earliest(wake, c.wake)
		}
	}
	r.chunks = slices.DeleteFunc(r.chunks, func(c *chunk) bool { return c.phase.terminal() })
	return wake
}

// report is what a step hands the loop.
type report interface{ of() *chunk }

// start runs step as c's step on a goroutine of its own; the report it
// returns goes to the loop. Loop-owned.
func (r *Runner) start(c *chunk, ctx context.Context, step func(ctx context.Context) report) {
	c.inStep = true
	r.live.steps++
	go func() { r.events <- step(ctx) }()
}

// apply applies a step's report on the loop.
func (r *Runner) apply(rep report) {
	if rows, ok := rep.(*rowsReport); ok {
		rows.reply <- r.takeRows(rows.c, rows.rows)
		return
	}
	c := rep.of()
	c.inStep = false
	r.live.steps--
	switch rep := rep.(type) {
	case *primeReport:
		r.primed(rep)
	case *createReport:
		r.createDone(rep)
	case *listReport:
		r.listed(rep)
	case *pollReport:
		r.polled(rep)
	case *harvestReport:
		r.harvestDone(rep)
	}
}

// stopped reports whether err (a step's, with ctx the step's context)
// means the Runner is stopping — an interrupt, a fatal error, or the end
// of the run — and, for a fatal one, fails it. Its chunk then waits where
// it is.
func (r *Runner) stopped(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, errCrash), errors.Is(err, ErrJournal):
		r.fail(err)
		return true
	}
	return ctx.Err() != nil
}

// fail stops the Runner for good: a journal failure or a simulated crash.
func (r *Runner) fail(err error) {
	if r.live.fatal != nil {
		return
	}
	r.live.fatal = err
	r.crash.dead.Store(true)
	if errors.Is(err, errCrash) {
		r.j.freeze()
	}
	r.log.Error("batch: stopping", "err", err)
	if r.live.cancel != nil {
		r.live.cancel(err)
	}
}

// crashed reports whether a test asked for a crash at point, and if so
// freezes the journal and silences the callbacks, as a killed process
// would. Steps call it too.
func (r *Runner) crashed(point string) bool {
	if r.crash.at == nil || !r.crash.at(point) {
		return false
	}
	r.j.freeze()
	r.crash.dead.Store(true)
	return true
}

// emitResult delivers res: c's row, or nil.
func (r *Runner) emitResult(c *chunk, res Result) {
	if r.crash.dead.Load() {
		return
	}
	if c != nil {
		c.awaiting++
		r.durWait[res.Request.ID] = c
	}
	r.cfg.OnResult(res)
	r.stats.Results++
	r.done(c)
}

// emitReroute gives req back for the sync path.
func (r *Runner) emitReroute(c *chunk, req *call.Request, why string) {
	if r.crash.dead.Load() {
		return
	}
	r.cfg.OnReroute(req, why)
	r.stats.Rerouted++
	r.done(c)
}

// done counts one outcome.
func (r *Runner) done(c *chunk) {
	if c != nil {
		c.waiting--
	}
	r.outcomes++
}

// publish copies what Stats reads, and tells the intake how many requests
// wait to be cut.
func (r *Runner) publish() {
	s := r.stats
	s.Pending = len(r.q.reqs)
	s.InFlight = make(map[string]int, len(r.orgs))
	for _, o := range r.orgs {
		s.InFlight[o.label] = o.inflight
	}
	s.Turnaround = maps.Clone(r.stats.Turnaround)
	s.QueueBound = maps.Clone(r.stats.QueueBound)
	r.pub.mu.Lock()
	r.pub.stats, r.pub.parked = s, len(r.parked)
	r.pub.mu.Unlock()
	r.in.setQueued(len(r.q.reqs))
}

// Stats returns a snapshot: the loop's at the end of its last turn, and
// the intake's now.
func (r *Runner) Stats() Stats {
	accepted, arrived, held := r.in.counts()
	r.pub.mu.Lock()
	s := r.pub.stats
	r.pub.mu.Unlock()
	s.Submitted, s.Held = accepted, held
	s.Pending += arrived
	s.InFlight = maps.Clone(s.InFlight)
	s.Turnaround = maps.Clone(s.Turnaround)
	s.QueueBound = maps.Clone(s.QueueBound)
	return s
}

// parkedRows is how many harvested rows wait for their request, as of the
// loop's last turn (tests).
func (r *Runner) parkedRows() int {
	r.pub.mu.Lock()
	defer r.pub.mu.Unlock()
	return r.pub.parked
}

// Close applies the Durable calls made after Run returned, writes the
// records they close, and closes the journal. Call it after Run has
// returned (or without Run) and after the last Durable call.
func (r *Runner) Close() error {
	r.applyDurable(r.in.take().durable)
	r.flush.flush()
	return r.j.close()
}

// now is the injected clock.
func (r *Runner) now() time.Time { return r.cfg.Now() }

// total is a batch's request count.
func total(c api.RequestCounts) int {
	return int(c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired)
}
