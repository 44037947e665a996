package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/cacheprefix"
	"github.com/sluice-dev/sluice/cost"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/event"
	"github.com/sluice-dev/sluice/plan"
	"github.com/sluice-dev/sluice/results"
	"github.com/sluice-dev/sluice/route"
)

// Run runs the job to completion, or until ctx ends (then it stops
// admitting, lets requests in flight finish within Grace, makes everything
// written durable and returns an error wrapping ErrInterrupted).
//
// The steps are the methods of run, in this order (docs/route.md).
func Run(ctx context.Context, o Options) (*Report, error) {
	r := newRun(o)
	// One run per results file, its journal included.
	unlock, err := results.LockWait(ctx, r.o.Output, r.o.LockWait, r.o.LockWaiting(r.o.Output))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := r.scan(ctx); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	// On every path the results file and the cache writer are closed (both
	// idempotent: the steps that end a run close them first, to report
	// their errors).
	defer r.w.Close()
	defer r.cache.finish(r.rep)
	switch {
	case r.todo > 0 && r.todo == r.in.cached:
		return r.fromCache(ctx)
	case r.todo == 0:
		return r.nothingToDo()
	}
	if err := r.discover(ctx); err != nil {
		return nil, err
	}
	if err := r.plan(); err != nil {
		return nil, err
	}
	if err := r.send(ctx); err != nil {
		return nil, err
	}
	defer r.stopFeed()
	defer r.stopServe()
	r.drain(ctx)
	return r.report(ctx)
}

// run is one job run: what each step learns, for the steps after it.
type run struct {
	o       Options
	started time.Time
	rep     *Report

	// scan
	st *results.State
	in *surveyed
	// open
	w       *results.Writer
	durable atomic.Int64
	cache   *cacheSide
	ledger  cost.Ledger
	// orgs is how many organizations the dispatcher serves, read once
	// (prefixSharers).
	orgsOnce sync.Once
	orgs     int
	// pc sums what the prompt cache did for the answers (sink).
	pcMu sync.Mutex
	pc   PromptCacheReport
	// batchResults counts the batch path's answers by class (sink): the
	// dispatcher's snapshot counts only its own.
	batchResults batchCounts
	todo         int    // requests this run gives a result
	model        string // for the key probes: the input's first model
	// discover (rotations append while the run sends)
	disc []dispatch.Discovery
	// plan
	routing route.Routing
	d       *dispatch.Dispatcher
	// send
	fan                 *route.Fanout
	batchRunner         atomic.Pointer[batch.Runner] // for OnDurable, set once the fan-out opens
	feedCtx, serveCtx   context.Context
	stopFeed, stopServe context.CancelFunc
	served, batchDone   chan error
	fed, rotWG, progWG  sync.WaitGroup
	rotDone, progDone   chan struct{}
	feedErr, batchErr   error
	stopReason          atomic.Value // string: why a halt stopped the run
	writeErr            atomic.Value // error: the results file failed
	// re-plans (--route auto)
	sideMu       sync.Mutex // a batch path starting, against the sync feeder's end
	batchStarted bool
	batchFed     sync.WaitGroup
	batchFeedErr error
	syncPassing  atomic.Bool  // the sync feeder is in a pass over the input
	syncAnswered atomic.Int64 // sync answers so far
	replanWG     sync.WaitGroup
	replanStop   chan struct{} // closed when the feeders are done
	replans      atomic.Int64
	repMu        sync.Mutex // the report's Replans, appended while the run sends
	// drain
	serveErr error
}

func newRun(o Options) *run {
	if o.Logger == nil {
		o.Logger = nopLogger
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.MaxErrors <= 0 {
		o.MaxErrors = 50
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
		if !o.Terminal {
			o.ProgressInterval = 10 * time.Second
		}
	}
	if o.Command == "" {
		o.Command = "the same command"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReplanInterval <= 0 {
		o.ReplanInterval = time.Second
	}
	r := &run{o: o, started: o.Now(), replanStop: make(chan struct{})}
	r.rep = &Report{Input: o.Input, Output: o.Output, StartedAt: r.started.UTC()}
	return r
}

func (r *run) since() time.Duration { return r.o.Now().Sub(r.started) }

// scan reads the resume state and surveys the input: every line validated
// before anything is sent, requests already done compared with their
// recorded fingerprint.
func (r *run) scan(ctx context.Context) error {
	var err error
	if r.st, err = results.Scan(r.o.Output); err != nil {
		return err
	}
	if r.in, err = survey(ctx, r.o, r.st); err != nil {
		return err
	}
	r.rep.Requests.Total = r.in.summary.Lines
	r.rep.Requests.Invalid = r.in.summary.Invalid
	return nil
}

// validate refuses invalid input (unless SkipInvalid) and changed requests
// (unless AllowChanged) before anything is sent.
func (r *run) validate() error {
	if r.in.summary.Invalid > 0 && !r.o.SkipInvalid {
		return &InvalidInputError{File: r.o.Input, Errors: r.in.errors, Total: r.in.summary.Invalid, Scanned: r.in.summary.Lines}
	}
	if len(r.in.changed) > 0 && !r.o.AllowChanged {
		return &ChangedError{Output: r.o.Output, IDs: r.in.changed, Total: r.in.nChanged}
	}
	r.rep.Requests.Redriven = len(r.in.redrive)
	if r.o.AllowChanged {
		r.rep.Requests.Redriven += r.in.nChanged
	}
	r.warnUnpriced()
	return nil
}

// warnUnpriced logs, once per model, that the model table has no price for
// a model of the input (docs/models.md): its lane is its own and its cost
// unknown until an overlay prices it.
func (r *run) warnUnpriced() {
	models := make([]string, 0, len(r.in.summary.Models))
	for m := range r.in.summary.Models {
		if _, ok := cost.Price(m); !ok {
			models = append(models, m)
		}
	}
	sort.Strings(models)
	for _, m := range models {
		_, known := api.LookupModel(m)
		what := "is not in the model table: it gets a lane of its own (pool " + string(api.PoolOf(m)) + ", the " + string(api.FamilyOf(m)) + " cap)"
		if known {
			what = "has no price in the model table"
		}
		capNote := ""
		if r.o.MaxCost > 0 {
			capNote = "; --max-cost counts its requests at the table's highest prices"
		}
		r.o.Logger.Warn("model " + m + " " + what + " and its cost is unknown" + capNote + "; --models FILE or SLUICE_MODELS with its prices makes it exact (docs/models.md)")
	}
}

// drop names the rows driven again: only ids of this input (a row of
// another input is kept as it is).
func (r *run) drop(id string, _ results.Entry) bool {
	return r.in.redrive[id] || (r.o.AllowChanged && r.in.changedSet[id])
}

// open opens the results file, counting durable results as they land, and
// the cache side.
func (r *run) open() error {
	if r.st.TornBytes > 0 {
		r.o.Logger.Info("repairing a torn last line in the results file", "bytes", r.st.TornBytes)
	}
	var err error
	r.w, err = results.Open(r.o.Output, r.st, r.drop, results.Options{NoSync: r.o.SyncOff, OnDurable: func(ids []string) {
		n := r.durable.Add(int64(len(ids)))
		if br := r.batchRunner.Load(); br != nil {
			br.Durable(ids)
		}
		if r.o.OnDurable != nil {
			r.o.OnDurable(n)
		}
	}})
	if err != nil {
		return err
	}
	r.rep.Requests.AlreadyDone = len(r.st.Done)
	r.model = r.in.firstModel
	if r.model == "" {
		r.model = "claude-sonnet-4-5"
	}
	r.todo = r.in.pending
	if r.o.AllowChanged {
		r.todo += r.in.nChanged
	}
	r.cache = newCacheSide(r.o, r.w)
	r.rep.Requests.FromCache = r.in.cached // updated from what was served
	return nil
}

// fromCache ends a run whose every pending request the cache answers: no
// call, not even the free key probes.
func (r *run) fromCache(ctx context.Context) (*Report, error) {
	ferr := feed(ctx, r.o, r.st, r.drop, func(int, string) bool { return true }, r.cache.serve,
		func(req *dispatch.Request) error {
			return fmt.Errorf("%w: the cache changed while the run started (%s is no longer in it); re-run %s to resume", ErrInterrupted, req.ID, r.o.Command)
		}, r.w)
	closeErr := r.w.Close()
	rep := r.rep
	rep.WallSeconds = r.since().Seconds()
	rep.Requests.Written = int(r.durable.Load())
	rep.BindingLimit = "none (every request was answered from the cache)"
	rep.Route = route.Cache
	r.cache.finish(rep)
	if errors.Is(ferr, context.Canceled) {
		rep.Stopped = "interrupted"
		ferr = fmt.Errorf("%w: %d of %d requests answered from the cache; re-run %s to resume", ErrInterrupted, rep.Requests.Written, r.todo, r.o.Command)
	}
	if ferr != nil {
		return rep, ferr
	}
	if closeErr != nil {
		return rep, fmt.Errorf("job: writing results: %w", closeErr)
	}
	return rep, nil
}

// nothingToDo ends a run with every request already done.
func (r *run) nothingToDo() (*Report, error) {
	if err := r.w.Close(); err != nil {
		return r.rep, fmt.Errorf("job: writing results: %w", err)
	}
	r.rep.WallSeconds = r.since().Seconds()
	r.rep.BindingLimit = "none (nothing to do)"
	return r.rep, nil
}

// discover learns each key's organization with a free probe.
func (r *run) discover(ctx context.Context) error {
	disc, err := dispatch.Discover(ctx, r.o.Dispatch.Client, r.o.Dispatch.Keys, r.model)
	for _, d := range disc {
		if dead, why := d.Key.Dead(); dead {
			r.o.Logger.Warn("key is not usable", "key", d.Key, "reason", why)
		}
	}
	if err != nil {
		return err
	}
	r.disc = disc
	r.rep.Keys = keyReports(disc)
	return nil
}

// plan picks the route — sync, batch or a split, decided once the input's
// shape is known — and builds the dispatcher on the organizations the route
// uses.
func (r *run) plan() error {
	r.routing = route.Routing{Route: route.Sync}
	if r.o.Plan != nil {
		// The planner sizes what will be sent: cache hits cost nothing;
		// and what the prompt cache can spare what is sent.
		if r.in.prefixes != nil {
			r.in.summary.Prefix = r.in.prefixes.Reach(r.prefixSharers(route.SideSync))
			r.in.summary.BatchPrefix = r.in.prefixes.Reach(r.prefixSharers(route.SideBatch))
		}
		var err error
		if r.routing, err = r.o.Plan(r.in.summary, r.todo-r.in.cached); err != nil {
			return err
		}
	}
	r.rep.Route, r.rep.RouteWhy, r.rep.PredictedSeconds = r.routing.Route, r.routing.Why, r.routing.Predicted.Seconds()
	r.routed(event.Route, "", r.routing)
	dc := r.o.Dispatch
	dc.Keys = r.routing.SyncKeys(dc.Keys)
	var err error
	r.d, err = dispatch.New(dc)
	return err
}

// halt stops feeding and admitting; requests in flight finish within Grace
// (drain), or sooner on an interrupt.
func (r *run) halt(why string) {
	if r.stopReason.CompareAndSwap(nil, why) {
		r.record(event.Event{Kind: event.Halt, Why: why})
		r.o.Logger.Warn("stopping: "+why+"; requests in flight finish (interrupt to abort them)", "grace", r.o.Grace.String())
	}
	r.stopFeed()
	r.stopServe()
}

// sink records one answer, sync or batch (batchID set): the cache's store,
// the ledger and the --max-cost halt, the results line. A write error halts
// the run: the results file is in an unknown state, and anything more sent
// would be paid for and lost.
func (r *run) sink(res dispatch.Result, batchID string) {
	if res.Aborted {
		return
	}
	r.answered(res, batchID)
	rec := toRecord(res, r.o.Redact)
	via := route.Sync
	if batchID != "" {
		via = route.Batch
		rec.Sluice.Route, rec.Sluice.BatchID = via, batchID
		r.batchResults.add(res.Class)
	}
	if res.Class == api.ClassOK {
		r.cache.store(res.Request, res.Body, via)
		r.ledger.Add(res.Org, res.Request.Model, res.Usage, batchID != "")
		r.countPromptCache(res, batchID != "")
		if r.o.MaxCost > 0 && r.ledger.Bound() >= r.o.MaxCost {
			r.halt(fmt.Sprintf("--max-cost $%.2f reached", r.o.MaxCost))
		}
	}
	if err := r.w.Write(rec); err != nil && r.writeErr.CompareAndSwap(nil, err) {
		r.halt("writing results failed")
	}
}

// send starts the dispatcher's loop and the fan-out, then feeds: two
// feeders, each its own pass over the input, so a full batch window never
// holds up the sync side, nor sync back-pressure the batch side. Key
// rotations and the progress display run beside them.
func (r *run) send(ctx context.Context) error {
	r.feedCtx, r.stopFeed = context.WithCancel(ctx)
	r.serveCtx, r.stopServe = context.WithCancel(context.Background())
	r.served = make(chan error, 1)
	go func() { r.served <- r.d.Serve(r.serveCtx) }()

	// The batch path: for a batch or split route, and on any route when
	// the journal holds batches a previous run left open — their requests
	// must be answered by those batches, or they are paid twice.
	fan, err := route.Open(route.Config{
		Routing: r.routing, Client: r.o.Dispatch.Client, Keys: r.o.Dispatch.Keys,
		Logger: r.o.Logger, NoSync: r.o.SyncOff, Journal: r.o.Output + ".batch-journal",
		// st.Done holds the kept rows only: rows being driven again were
		// dropped from it by Open.
		Done:  func(id string) bool { _, ok := r.st.Done[id]; return ok },
		Sink:  r.sink,
		Prime: r.primed, Events: r.o.Watch,
		Lines: r.replanLines(),
		Reroute: func(req *dispatch.Request, why string) {
			r.o.Logger.Debug("batch request re-routed to sync", "id", req.ID, "why", why)
			r.d.Submit(r.serveCtx, req, r.syncSink) // ErrStopped: the run is stopping; resume re-drives it
		},
	})
	if err != nil {
		r.stopFeed()
		r.stopServe()
		<-r.served
		return err
	}
	r.fan = fan
	r.batchDone = make(chan error, 1)
	if br := fan.Batch(); br != nil {
		r.startBatch(br)
	}
	r.fed.Go(func() {
		// The dispatcher stays open until the batch path has finished: it
		// re-routes requests to it until then.
		defer r.d.Close()
		r.feedErr = r.feedSide(route.SideSync, func(req *dispatch.Request) error { return r.d.Submit(r.feedCtx, req, r.syncSink) }, r.w)
		// No batch path starts after this: the sync side has left, so the
		// routing is frozen unless a batch feeder runs (and then the batch
		// path exists already).
		r.sideMu.Lock()
		started := r.batchStarted
		r.sideMu.Unlock()
		r.batchFed.Wait()
		if started {
			r.batchErr = <-r.batchDone
			if errors.Is(r.batchErr, batch.ErrJournal) {
				r.halt("the batch journal failed")
			}
		}
		if r.feedErr == nil {
			r.feedErr = r.batchFeedErr
		}
	})
	if r.o.Replan != nil {
		r.replanWG.Go(r.replan)
	}

	// Key rotations while the job runs; their discoveries join the report
	// (read after rotWG.Wait).
	r.rotDone = make(chan struct{})
	if r.o.Rotations != nil {
		r.rotWG.Go(func() { r.rotate(ctx) })
	}
	prog := newProgress(r.o, r.d, &r.ledger, &r.durable, r.todo, len(r.st.Done))
	r.progDone = make(chan struct{})
	r.progWG.Go(func() { prog.run(r.progDone) })
	r.watchStart()
	return nil
}

// replanLines is route.Config.Lines: the input's last line number when
// the run may re-plan, else 0.
func (r *run) replanLines() int {
	if r.o.Replan == nil {
		return 0
	}
	return max(r.in.lastLine, 1)
}

// syncSink is the dispatcher's callback: a sync answer to the one sink.
func (r *run) syncSink(res dispatch.Result) {
	r.syncAnswered.Add(1)
	r.sink(res, "")
}

// startBatch runs the batch path and its feeder: when the run opens, or
// when a re-plan opens the batch path mid-run.
func (r *run) startBatch(br *batch.Runner) {
	r.sideMu.Lock()
	defer r.sideMu.Unlock()
	r.startBatchLocked(br)
}

// startBatchLocked is startBatch with sideMu held: a re-plan opens the
// batch path in the same critical section as its re-route, so a sync
// feeder ending in between cannot miss the batch path it must wait for.
func (r *run) startBatchLocked(br *batch.Runner) {
	r.batchStarted = true
	r.batchRunner.Store(br)
	go func() { r.batchDone <- br.Run(r.feedCtx) }()
	r.batchFed.Go(func() {
		r.batchFeedErr = r.feedSide(route.SideBatch, func(req *dispatch.Request) error { return br.Submit(r.feedCtx, req) }, nil)
		if r.batchFeedErr != nil || r.feedCtx.Err() != nil {
			br.StopInput() // cut short: resumed chunks stay the next run's
		} else {
			br.CloseInput()
		}
	})
}

// feedSide is one side's feeder: a pass over the input taking the lines
// the routing gives side s, and more passes while a re-plan changes the
// routing (route.Fanout.PassDone; docs/route.md, "Re-planning mid-run").
// w, if set, records invalid lines on the first pass.
func (r *run) feedSide(s route.Side, submit func(*dispatch.Request) error, w *results.Writer) error {
	defer r.fan.Leave(s)
	for {
		gen := r.fan.Generation()
		for _, req := range r.fan.Handoff(s) {
			r.in.prepare(s, req, r.prefixSharers(s), r.o.Logger) // this side's TTL
			if err := submit(req); err != nil {
				return err
			}
		}
		if s == route.SideSync {
			r.syncPassing.Store(true)
		}
		prepared := func(req *dispatch.Request) error {
			r.in.prepare(s, req, r.prefixSharers(s), r.o.Logger)
			return submit(req)
		}
		err := feed(r.feedCtx, r.o, r.st, r.drop, func(line int, id string) bool { return r.fan.Take(s, line, id) }, r.cache.serve, prepared, w)
		if s == route.SideSync {
			r.syncPassing.Store(false)
		}
		if err != nil {
			return err
		}
		w = nil
		if br := r.fan.Batch(); s == route.SideBatch && br != nil && !r.fan.Frozen() {
			br.CutWaiting() // what this pass submitted must not wait for a full chunk
		}
		again, err := r.fan.PassDone(r.feedCtx, s, gen)
		if err != nil || !again {
			return err
		}
	}
}

// replan hands the Router what the run measures about once a second until
// the routing is frozen or the run stops, and applies a new routing.
func (r *run) replan() {
	t := time.NewTicker(r.o.ReplanInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.replanStop:
			return
		}
		if r.fan.Frozen() {
			return
		}
		_, views := r.d.Snapshot()
		// Unsent: lines no side has taken, and those the sync queue holds
		// but never sent (a re-plan to batch takes them back).
		queued, err := r.d.Reclaimable(r.feedCtx)
		if err != nil {
			return
		}
		unsent := r.todo - r.in.cached - r.fan.Taken() + int(r.cache.hits.Load()) + queued
		nr, ok := r.o.Replan(route.Measure{At: r.o.Now(), Lanes: views, Unsent: max(unsent, 0),
			SyncAnswered: r.syncAnswered.Load(), SyncBacklog: r.syncPassing.Load()})
		if !ok {
			continue
		}
		r.sideMu.Lock()
		br, err := r.fan.Reroute(nr, func(toBatch func(*dispatch.Request) bool) []*dispatch.Request {
			back, err := r.d.Reclaim(r.feedCtx, toBatch)
			if err != nil {
				return nil // stopping: they stay where they are
			}
			if len(back) > 0 {
				r.o.Logger.Info("re-plan: unsent requests taken back from the sync queue", "requests", len(back))
			}
			return back
		})
		if err == nil && br != nil {
			r.startBatchLocked(br)
		}
		r.sideMu.Unlock()
		if err != nil {
			r.o.Logger.Warn("re-plan not applied: the route stays "+r.fan.Routing().Route, "err", err)
			if r.o.ReplanRefused != nil {
				r.o.ReplanRefused(nr)
			}
			r.routed(event.Replan, "refused", nr)
			continue
		}
		r.routed(event.Replan, "applied", nr)
		r.replans.Add(1)
		r.repMu.Lock()
		r.rep.Replans = append(r.rep.Replans, ReplanReport{AtSeconds: r.since().Seconds(), Route: nr.Route, BatchShare: nr.BatchShare,
			PredictedSeconds: nr.Predicted.Seconds(), Why: nr.Why})
		r.repMu.Unlock()
	}
}

// rotate applies key rotations until the run ends: new keys join the
// dispatcher (and the batch path) after a probe, removed ones take no new
// request once their organization has another working key
// (dispatch.Rotator).
func (r *run) rotate(ctx context.Context) {
	rotator := dispatch.NewRotator(r.o.Dispatch.Client, r.o.Dispatch.Keys, r.model, r.o.Logger)
	for {
		select {
		case rot := <-r.o.Rotations:
			joiners := []dispatch.KeyJoiner{r.d}
			if br := r.fan.Batch(); br != nil {
				joiners = append(joiners, br)
			}
			more, err := rotator.Apply(ctx, rot, joiners...)
			if err != nil && ctx.Err() == nil && !errors.Is(err, dispatch.ErrStopped) {
				r.o.Logger.Warn("key rotation failed", "err", err)
			}
			r.disc = append(r.disc, more...)
			r.keysJoined(rot)
		case <-r.rotDone:
			return
		case <-ctx.Done():
			return
		}
	}
}

// drain waits for the end, an interrupt, or a halt (write error,
// --max-cost, a journal failure). Stopped either way, attempts in flight
// finish within Grace; the second interrupt (Options.Abort) cuts them
// short, and so does the first when a halt is already draining. Then the
// feeders are waited for and the writer and the batch path closed.
func (r *run) drain(ctx context.Context) {
	grace := func(interrupt <-chan struct{}) error {
		select {
		case err := <-r.served:
			return err
		case <-time.After(r.o.Grace):
		case <-r.o.Abort:
		case <-interrupt:
		}
		r.d.Abort()
		return <-r.served
	}
	select {
	case r.serveErr = <-r.served:
	case <-r.serveCtx.Done():
		r.serveErr = grace(ctx.Done())
	case <-ctx.Done():
		r.record(event.Event{Kind: event.Interrupt, Why: "interrupted; requests in flight finish"})
		r.stopFeed()
		r.stopServe() // stop admitting; attempts in flight finish
		r.serveErr = grace(nil)
	}
	r.fed.Wait()
	close(r.replanStop)
	r.replanWG.Wait()
}

// report fills the report — keys as they are now: one may have died during
// the run — and says how the run ended: done, resumable (ErrInterrupted),
// or failed.
func (r *run) report(ctx context.Context) (*Report, error) {
	rep := r.rep
	closeErr := r.w.Close()
	r.cache.finish(rep)
	r.pcMu.Lock()
	rep.PromptCache = r.pc
	r.pcMu.Unlock()
	if br := r.fan.Batch(); br != nil {
		if err := br.Close(); err != nil && r.batchErr == nil {
			r.batchErr = err
		}
		rep.Batch = br.Stats()
	}
	close(r.progDone) // the last frame shows every durable result
	r.progWG.Wait()

	rep.finish(r.d, &r.batchResults, &r.ledger, r.durable.Load(), r.since())
	if r.o.Observe != nil {
		_, views := r.d.Snapshot()
		r.o.Observe(views, rep.Batch, int(r.in.summary.MeanMaxTokens()+0.5))
	}
	close(r.rotDone)
	r.rotWG.Wait()
	rep.Keys = keyReports(r.disc)
	if e, _ := r.writeErr.Load().(error); e != nil {
		return rep, fmt.Errorf("job: writing results: %w", e)
	}
	if closeErr != nil {
		return rep, fmt.Errorf("job: writing results: %w", closeErr)
	}
	// ErrStopped: the dispatcher stopped first (no live key, a halt); the
	// reason is reported below. An interrupt cancels ctx with the caller's
	// own cause (not context.Canceled): an error then is the interrupt,
	// reported below as resumable, not a failure (the batch path exited 1
	// on Ctrl-C).
	interrupted := ctx.Err() != nil
	if err := r.feedErr; err != nil && !interrupted && !errors.Is(err, context.Canceled) && !errors.Is(err, dispatch.ErrStopped) && !errors.Is(err, batch.ErrStopped) {
		return rep, err
	}
	if r.batchErr != nil && !interrupted && !errors.Is(r.batchErr, context.Canceled) {
		return rep, fmt.Errorf("job: batch path: %w", r.batchErr)
	}
	remaining := max(0, r.todo-int(r.durable.Load()))
	if s, _ := r.stopReason.Load().(string); s != "" && remaining > 0 {
		rep.Stopped = s
		return rep, fmt.Errorf("%w: %s; %d requests not run; re-run %s to resume", ErrInterrupted, s, remaining, r.o.Command)
	}
	if errors.Is(r.serveErr, dispatch.ErrNoLiveKey) {
		rep.Stopped = "no live key left"
		return rep, fmt.Errorf("%w: every key is dead (see the log); %d requests not run; fix the keys and re-run %s to resume", ErrInterrupted, remaining, r.o.Command)
	}
	if remaining > 0 {
		rep.Stopped = "interrupted"
		return rep, fmt.Errorf("%w: %d of %d requests done, %d to go; re-run %s to resume", ErrInterrupted, r.todo-remaining, r.todo, remaining, r.o.Command)
	}
	return rep, nil
}

// countPromptCache adds an answer's prompt-cache tokens to the report, and
// what they saved: the answer's cost with its cache reads and writes billed
// as plain input, less its cost as billed.
func (r *run) countPromptCache(res dispatch.Result, batch bool) {
	u := res.Usage
	if res.Request.Sent == nil && u.CacheReadInputTokens == 0 && u.CacheCreationInputTokens == 0 {
		return
	}
	plain := u
	plain.InputTokens += u.CacheReadInputTokens + u.CacheCreationInputTokens
	plain.CacheReadInputTokens, plain.CacheCreationInputTokens, plain.CacheCreation = 0, 0, nil
	billed, _ := cost.Cost(res.Request.Model, u, batch)
	uncached, _ := cost.Cost(res.Request.Model, plain, batch)
	r.pcMu.Lock()
	defer r.pcMu.Unlock()
	if res.Request.Sent != nil {
		r.pc.Added++
	}
	r.pc.ReadTokens += u.CacheReadInputTokens
	r.pc.WriteTokens += u.CacheCreationInputTokens
	if batch {
		r.pc.BatchReadTokens += u.CacheReadInputTokens
		r.pc.BatchWriteTokens += u.CacheCreationInputTokens
	}
	if m, ok := api.LookupModel(res.Request.Model); !batch && (!ok || !m.CacheReadsCountITPM) {
		r.pc.ITPMSpared += u.CacheReadInputTokens // batches are not charged to ITPM at all
	}
	r.pc.SavedUSD += uncached - billed
}

// primed counts a sync primer the batch path sent before a batch
// (docs/caching.md, "Priming before batches"): its cost is the run's (the
// ledger and --max-cost) and, being spent only for the cache, comes off
// what the cache saved; its write is one of the prompt cache's.
func (r *run) primed(p batch.Prime) {
	if !p.OK {
		return
	}
	r.ledger.Add(p.Org, p.Model, p.Usage, false)
	usd, _ := cost.Cost(p.Model, p.Usage, false)
	r.pcMu.Lock()
	r.pc.Primers++
	r.pc.WriteTokens += p.Usage.CacheCreationInputTokens
	r.pc.ReadTokens += p.Usage.CacheReadInputTokens
	r.pc.SavedUSD -= usd
	r.pcMu.Unlock()
	if r.o.MaxCost > 0 && r.ledger.Bound() >= r.o.MaxCost {
		r.halt(fmt.Sprintf("--max-cost $%.2f reached", r.o.MaxCost))
	}
}

// prefixSharers is how many pending requests must share a prompt prefix
// before sluice adds a breakpoint for it on side s (cacheprefix.Sharers,
// plan.BatchSharers, over the organizations the run's live keys reach;
// docs/caching.md).
func (r *run) prefixSharers(s route.Side) int {
	r.orgsOnce.Do(func() {
		// Every organization a live key reaches, whichever route it
		// serves: a batch org writes the prefix too (its primer).
		seen := map[string]bool{}
		for _, d := range r.disc {
			if dead, _ := d.Key.Dead(); !dead {
				seen[d.Key.Org()] = true
			}
		}
		r.orgs = len(seen)
	})
	if s == route.SideBatch {
		if !r.o.CachePrefixBatch {
			return math.MaxInt32 // no prefix is shared that widely: batch requests go as written
		}
		return plan.BatchSharers(r.orgs)
	}
	return cacheprefix.Sharers(r.orgs)
}
