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
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/event"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/internal/format/results"
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
	routing, err := r.plan()
	if err != nil {
		return nil, err
	}
	if err := r.send(ctx, routing); err != nil {
		return nil, err
	}
	defer r.stopFeed()
	defer r.stopServe()
	return r.report(ctx, r.drain(ctx))
}

// run is one job run: what each step learns, for the steps after it. How
// the requests are sent — both sides, re-plans, the batch path's start and
// end — is the fan-out's (route.Fanout.Drive), not the run's.
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
	tally   tally // what the answers add up to (sink)
	todo    int   // requests this run gives a result
	// discover (rotations append while the run sends)
	disc []dispatch.Discovery
	// plan
	orgs int // organizations the live keys reach (prefixSharers)
	d    *dispatch.Dispatcher
	// send
	fan                      atomic.Pointer[route.Fanout]
	feedCtx, serveCtx        context.Context
	stopFeed, stopServe      context.CancelFunc
	served                   chan error
	drove                    chan route.Driven // the fan-out's end, once the dispatcher is closed
	stopReason               atomic.Value      // string: why a halt stopped the run
	writeErr                 atomic.Value      // error: the results file failed
	stopRotate, stopProgress func()            // the loops beside the send
}

// tally is what the answers add up to, as the sink records them.
type tally struct {
	ledger cost.Ledger
	mu     sync.Mutex
	pc     PromptCacheReport // guarded by mu
	// batch counts the batch path's answers by class: the dispatcher's
	// snapshot counts only its own.
	batch        batchCounts
	syncAnswered atomic.Int64
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
	r := &run{o: o, started: o.Now()}
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
		if f := r.fan.Load(); f != nil {
			f.Durable(ids)
		}
		if r.o.OnDurable != nil {
			r.o.OnDurable(n)
		}
	}})
	if err != nil {
		return err
	}
	r.rep.Requests.AlreadyDone = len(r.st.Done)
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

// probeModel is the model the key probes ask for: the input's first.
func (r *run) probeModel() string {
	if r.in.firstModel == "" {
		return "claude-sonnet-4-5"
	}
	return r.in.firstModel
}

// discover learns each key's organization with a free probe.
func (r *run) discover(ctx context.Context) error {
	disc, err := dispatch.Discover(ctx, r.o.Dispatch.Client, r.o.Dispatch.Keys, r.probeModel())
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
func (r *run) plan() (route.Routing, error) {
	// Every organization a live key reaches, whichever route it serves: a
	// batch org writes a shared prefix too (its primer).
	seen := map[string]bool{}
	for _, d := range r.disc {
		if dead, _ := d.Key.Dead(); !dead {
			seen[d.Key.Org()] = true
		}
	}
	r.orgs = len(seen)
	routing := route.Routing{Route: route.Sync}
	if r.o.Plan != nil {
		// The planner sizes what will be sent: cache hits cost nothing;
		// and what the prompt cache can spare what is sent.
		if r.in.prefixes != nil {
			r.in.summary.Prefix = r.in.prefixes.Reach(r.prefixSharers(route.SideSync))
			r.in.summary.BatchPrefix = r.in.prefixes.Reach(r.prefixSharers(route.SideBatch))
		}
		var err error
		if routing, err = r.o.Plan(r.in.summary, r.todo-r.in.cached); err != nil {
			return routing, err
		}
	}
	r.rep.Route, r.rep.RouteWhy, r.rep.PredictedSeconds = routing.Route, routing.Why, routing.Predicted.Seconds()
	r.routed(event.Route, "", routing)
	dc := r.o.Dispatch
	dc.Keys = routing.SyncKeys(dc.Keys)
	var err error
	r.d, err = dispatch.New(dc)
	return routing, err
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
		r.tally.batch.add(res.Class)
	}
	if res.Class == api.ClassOK {
		r.cache.store(res.Request, res.Body, via)
		r.tally.ledger.Add(res.Org, res.Request.Model, res.Usage, batchID != "")
		r.countPromptCache(res, batchID != "")
		if r.o.MaxCost > 0 && r.tally.ledger.Bound() >= r.o.MaxCost {
			r.halt(fmt.Sprintf("--max-cost $%.2f reached", r.o.MaxCost))
		}
	}
	if err := r.w.Write(rec); err != nil && r.writeErr.CompareAndSwap(nil, err) {
		r.halt("writing results failed")
	}
}

// send starts the dispatcher's loop and the fan-out, which feeds both
// sides (route.Fanout.Drive: two feeders, each its own pass over the
// input, so a full batch window never holds up the sync side, nor sync
// back-pressure the batch side) and applies re-plans. Key rotations and the
// progress display run beside them.
func (r *run) send(ctx context.Context, routing route.Routing) error {
	r.feedCtx, r.stopFeed = context.WithCancel(ctx)
	r.serveCtx, r.stopServe = context.WithCancel(context.Background())
	r.served = make(chan error, 1)
	go func() { r.served <- r.d.Serve(r.serveCtx) }()

	// The batch path: for a batch or split route, and on any route when
	// the journal holds batches a previous run left open — their requests
	// must be answered by those batches, or they are paid twice.
	fan, err := route.Open(route.Config{
		Routing: routing, Client: r.o.Dispatch.Client, Keys: r.o.Dispatch.Keys,
		Logger: r.o.Logger, NoSync: r.o.SyncOff, Journal: r.o.Output + ".batch-journal",
		MaxRetryAfter: r.o.Dispatch.MaxRetryAfter,
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
	r.fan.Store(fan)
	drv := route.Driver{
		Feed: r.feed,
		Sync: func(ctx context.Context, req *dispatch.Request) error { return r.d.Submit(ctx, req, r.syncSink) },
		Prepare: func(s route.Side, req *dispatch.Request) {
			r.in.prepare(s, req, r.prefixSharers(s), r.o.Logger) // this side's TTL
		},
	}
	if r.o.Replan != nil {
		drv.Replan, drv.Every, drv.Reclaim, drv.Rerouted = r.measure, r.o.ReplanInterval, r.reclaim, r.rerouted
	}
	r.drove = make(chan route.Driven, 1)
	go func() {
		out := fan.Drive(r.feedCtx, drv)
		// A journal failure: Drive ended the feeding as it happened; the
		// halt stops the dispatcher admitting and says why.
		if errors.Is(out.Batch, batch.ErrJournal) {
			r.halt("the batch journal failed")
		}
		// The dispatcher stays open until the batch path has finished: it
		// re-routes requests to it until then.
		r.d.Close()
		r.drove <- out
	}()

	// Key rotations while the job runs; their discoveries join the report
	// (read once stopRotate returns).
	r.stopRotate = beside(func(stop <-chan struct{}) {
		if r.o.Rotations != nil {
			r.rotate(ctx, stop)
		}
	})
	prog := newProgress(r.o, r.d, &r.tally.ledger, &r.durable, r.todo, len(r.st.Done))
	r.stopProgress = beside(prog.run)
	r.watchStart()
	return nil
}

// beside runs loop on its own goroutine until the returned stop is called;
// stop returns once loop has.
func beside(loop func(stop <-chan struct{})) (stop func()) {
	ch, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		loop(ch)
	}()
	return func() {
		close(ch)
		<-done
	}
}

// feed is one pass of side s over the input (route.Feed): the lines take
// gives s, cache hits answered here, invalid lines recorded on the sync
// side's first pass.
func (r *run) feed(ctx context.Context, s route.Side, first bool, take func(int, string) bool, submit func(context.Context, *dispatch.Request) error) error {
	var w *results.Writer
	if s == route.SideSync && first {
		w = r.w
	}
	return feed(ctx, r.o, r.st, r.drop, take, r.cache.serve, func(req *dispatch.Request) error { return submit(ctx, req) }, w)
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
	r.tally.syncAnswered.Add(1)
	r.sink(res, "")
}

// measure hands the Router what the run measures (route.Driver.Replan):
// the lanes, and the requests not yet sent — lines no side has taken, and
// those the sync queue holds but never sent (a re-plan to batch takes them
// back).
func (r *run) measure(p route.Progress) (route.Routing, bool) {
	_, views := r.d.Snapshot()
	queued, err := r.d.Reclaimable(r.feedCtx)
	if err != nil {
		return route.Routing{}, false // stopping
	}
	unsent := r.todo - r.in.cached - p.Taken + int(r.cache.hits.Load()) + queued
	return r.o.Replan(route.Measure{At: r.o.Now(), Lanes: views, Unsent: max(unsent, 0),
		SyncAnswered: r.tally.syncAnswered.Load(), SyncBacklog: p.SyncPassing})
}

// reclaim takes back the requests the sync queue holds unsent that a new
// routing sends to batch (route.Driver.Reclaim).
func (r *run) reclaim(toBatch func(*dispatch.Request) bool) []*dispatch.Request {
	back, err := r.d.Reclaim(r.feedCtx, toBatch)
	if err != nil {
		return nil // stopping: they stay where they are
	}
	if len(back) > 0 {
		r.o.Logger.Info("re-plan: unsent requests taken back from the sync queue", "requests", len(back))
	}
	return back
}

// rerouted logs and reports a re-plan, applied or refused
// (route.Driver.Rerouted). The report's Replans are read once the fan-out
// has ended.
func (r *run) rerouted(nr route.Routing, err error) {
	if err != nil {
		r.o.Logger.Warn("re-plan not applied: the route stays "+r.fan.Load().Routing().Route, "err", err)
		if r.o.ReplanRefused != nil {
			r.o.ReplanRefused(nr)
		}
		r.routed(event.Replan, "refused", nr)
		return
	}
	r.routed(event.Replan, "applied", nr)
	r.rep.Replans = append(r.rep.Replans, ReplanReport{AtSeconds: r.since().Seconds(), Route: nr.Route, BatchShare: nr.BatchShare,
		PredictedSeconds: nr.Predicted.Seconds(), Why: nr.Why})
}

// rotate applies key rotations until the run ends: new keys join the
// dispatcher (and the batch path) after a probe, removed ones take no new
// request once their organization has another working key
// (dispatch.Rotator).
func (r *run) rotate(ctx context.Context, stop <-chan struct{}) {
	rotator := dispatch.NewRotator(r.o.Dispatch.Client, r.o.Dispatch.Keys, r.probeModel(), r.o.Logger)
	for {
		select {
		case rot := <-r.o.Rotations:
			joiners := []dispatch.KeyJoiner{r.d}
			if br := r.fan.Load().Batch(); br != nil {
				joiners = append(joiners, br)
			}
			more, err := rotator.Apply(ctx, rot, joiners...)
			if err != nil && ctx.Err() == nil && !errors.Is(err, dispatch.ErrStopped) {
				r.o.Logger.Warn("key rotation failed", "err", err)
			}
			r.disc = append(r.disc, more...)
			r.keysJoined(rot)
		case <-stop:
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
// fan-out's end is waited for.
func (r *run) drain(ctx context.Context) ending {
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
	var e ending
	select {
	case e.serveErr = <-r.served:
	case <-r.serveCtx.Done():
		e.serveErr = grace(ctx.Done())
	case <-ctx.Done():
		r.record(event.Event{Kind: event.Interrupt, Why: "interrupted; requests in flight finish"})
		r.stopFeed()
		r.stopServe() // stop admitting; attempts in flight finish
		e.serveErr = grace(nil)
	}
	e.Driven = <-r.drove
	return e
}

// ending is how the sending ended: the dispatcher's Serve error and the
// fan-out's.
type ending struct {
	serveErr error
	route.Driven
}

// report fills the report — keys as they are now: one may have died during
// the run — and says how the run ended: done, resumable (ErrInterrupted),
// or failed.
func (r *run) report(ctx context.Context, e ending) (*Report, error) {
	rep := r.rep
	closeErr := r.w.Close()
	r.cache.finish(rep)
	r.tally.mu.Lock()
	rep.PromptCache = r.tally.pc
	r.tally.mu.Unlock()
	if br := r.fan.Load().Batch(); br != nil {
		if err := br.Close(); err != nil && e.Batch == nil {
			e.Batch = err
		}
		rep.Batch = br.Stats()
	}
	r.stopProgress() // the last frame shows every durable result

	rep.finish(r.d, &r.tally.batch, &r.tally.ledger, r.durable.Load(), r.since())
	if r.o.Observe != nil {
		_, views := r.d.Snapshot()
		r.o.Observe(views, rep.Batch, int(r.in.summary.MeanMaxTokens()+0.5))
	}
	r.stopRotate()
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
	if err := e.Feed; err != nil && !interrupted && !errors.Is(err, context.Canceled) && !errors.Is(err, dispatch.ErrStopped) && !errors.Is(err, batch.ErrStopped) {
		return rep, err
	}
	if e.Batch != nil && !interrupted && !errors.Is(e.Batch, context.Canceled) {
		return rep, fmt.Errorf("job: batch path: %w", e.Batch)
	}
	remaining := max(0, r.todo-int(r.durable.Load()))
	if s, _ := r.stopReason.Load().(string); s != "" && remaining > 0 {
		rep.Stopped = s
		return rep, fmt.Errorf("%w: %s; %d requests not run; re-run %s to resume", ErrInterrupted, s, remaining, r.o.Command)
	}
	if errors.Is(e.serveErr, dispatch.ErrNoLiveKey) {
		rep.Stopped = "no live key left"
		return rep, fmt.Errorf("%w: every key is dead (see the log); %d requests not run; fix the keys and re-run %s to resume", ErrInterrupted, remaining, r.o.Command)
	}
	if remaining > 0 && !interrupted && e.Feed != nil && !errors.Is(e.Feed, context.Canceled) {
		// A side stopped taking requests (its dispatcher or batch path
		// stopped) with no interrupt: say which, not "interrupted".
		rep.Stopped = "a side stopped taking requests: " + e.Feed.Error()
		return rep, fmt.Errorf("%w: %v; %d of %d requests done, %d to go; re-run %s to resume", ErrInterrupted, e.Feed, r.todo-remaining, r.todo, remaining, r.o.Command)
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
	r.tally.mu.Lock()
	defer r.tally.mu.Unlock()
	if res.Request.Sent != nil {
		r.tally.pc.Added++
	}
	r.tally.pc.ReadTokens += u.CacheReadInputTokens
	r.tally.pc.WriteTokens += u.CacheCreationInputTokens
	if batch {
		r.tally.pc.BatchReadTokens += u.CacheReadInputTokens
		r.tally.pc.BatchWriteTokens += u.CacheCreationInputTokens
	}
	if m, ok := api.LookupModel(res.Request.Model); !batch && (!ok || !m.CacheReadsCountITPM) {
		r.tally.pc.ITPMSpared += u.CacheReadInputTokens // batches are not charged to ITPM at all
	}
	r.tally.pc.SavedUSD += uncached - billed
}

// primed counts a sync primer the batch path sent before a batch
// (docs/caching.md, "Priming before batches"): its cost is the run's (the
// ledger and --max-cost) and, being spent only for the cache, comes off
// what the cache saved; its write is one of the prompt cache's.
func (r *run) primed(p batch.Prime) {
	if !p.OK {
		return
	}
	r.tally.ledger.Add(p.Org, p.Model, p.Usage, false)
	usd, _ := cost.Cost(p.Model, p.Usage, false)
	r.tally.mu.Lock()
	r.tally.pc.Primers++
	r.tally.pc.WriteTokens += p.Usage.CacheCreationInputTokens
	r.tally.pc.ReadTokens += p.Usage.CacheReadInputTokens
	r.tally.pc.SavedUSD -= usd
	r.tally.mu.Unlock()
	if r.o.MaxCost > 0 && r.tally.ledger.Bound() >= r.o.MaxCost {
		r.halt(fmt.Sprintf("--max-cost $%.2f reached", r.o.MaxCost))
	}
}

// prefixSharers is how many pending requests must share a prompt prefix
// before sluice adds a breakpoint for it on side s (cacheprefix.Sharers,
// plan.BatchSharers, over the organizations the run's live keys reach;
// docs/caching.md).
func (r *run) prefixSharers(s route.Side) int {
	if s == route.SideBatch {
		if !r.o.CachePrefixBatch {
			return math.MaxInt32 // no prefix is shared that widely: batch requests go as written
		}
		return plan.BatchSharers(r.orgs)
	}
	return cacheprefix.Sharers(r.orgs)
}
