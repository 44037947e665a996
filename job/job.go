// Package job runs one `sluice run`: it validates the input, resumes from
// what the results file already holds, discovers the keys' organizations,
// streams the remaining requests through the dispatcher, and writes each
// result durably before it counts as done.
//
// Resume is re-running the same command: ids already in the results file
// are skipped, a torn last line is repaired, rows that ran out of retries on
// transport trouble are driven again, and a changed request under a
// completed id is refused unless AllowChanged.
package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/cache"
	"github.com/sluice-dev/sluice/cost"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/jsonl"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/results"
)

// Options configure a run.
type Options struct {
	Input, Output string
	// SkipInvalid records invalid lines as errored results instead of
	// stopping before anything is sent.
	SkipInvalid bool
	// AllowChanged re-runs requests whose params changed under an id that
	// is already done (the old result is dropped).
	AllowChanged bool
	// MaxCost stops admitting new requests once the ledger reaches it (USD;
	// 0 = no limit).
	MaxCost float64
	// Dispatch configures the engine; Client and Keys are required.
	Dispatch dispatch.Config
	// Grace bounds how long requests in flight may finish after the
	// context is cancelled (default 30 s); Abort cuts it short.
	Grace time.Duration
	// Abort, when closed, cancels requests in flight at once.
	Abort <-chan struct{}
	// Progress receives the live display (Terminal) or periodic log lines.
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
	// Command is how the user ran sluice, for the resume hint.
	Command string
	Logger  *slog.Logger
	// SyncOff disables fsync (tests only).
	SyncOff bool
	// MaxErrors is how many invalid lines are listed (default 50).
	MaxErrors int
	// Rotations, if set, brings the changes of re-read key sources
	// (SIGHUP, the keys file changed) while the job runs: new keys join
	// after a probe, removed keys take no new request and their requests
	// in flight finish (dispatch.ApplyRotation).
	Rotations <-chan keys.Rotation
	// Redact, if set, scrubs key values from error text before it is
	// logged or written (keys.Pool.Redact): a gateway may echo a key.
	Redact func(string) string
	// Plan, if set, picks the route once the input has been surveyed
	// (`run --route auto`); nil means Routing{Route: RouteSync}.
	Plan func(s jsonl.Summary, pending int) (Routing, error)
	// OnDurable, if set, is told the running count of results made
	// durable this run, after each commit (benchmarks time with it).
	OnDurable func(total int64)

	// Cache, if set (and not Off), answers requests it holds without a
	// call — the row is written with route "cache" and costs nothing —
	// and, unless read-only, stores every new answer (never a non-answer:
	// see package cache). Requests are looked up by
	// cache.KeyOf(params, CacheExtra...).
	Cache      *cache.Cache
	CacheExtra []string
	// CacheAccept, if set, vets a cached answer before it is served: a
	// rejected one is a miss, and the request is sent (judge --redrive
	// parse_error rejects answers that parse to a class being re-asked,
	// which the cache would otherwise hand back on every resume).
	CacheAccept func(message []byte) bool
	// Redrive, if set, names done ids whose rows are driven again on top of
	// the transport-class ones (judge --redrive parse_error). The cache
	// may answer them, subject to CacheAccept.
	Redrive func(id string) bool
	// KeepChanged, if set, names done ids whose row is kept although their
	// request changed since (judge --redrive re-asks some rows with a new
	// max_tokens and keeps the rest as they are); any other changed id is
	// refused as usual (ChangedError).
	KeepChanged func(id string) bool
}

// Routes a request can take.
const (
	RouteSync  = "sync"
	RouteBatch = "batch"
	RouteSplit = "split" // BatchShare of the requests by batch, the rest sync
	// RouteCache marks a row answered from the response cache, without a call.
	RouteCache = "cache"
)

// Routing is how a run sends its requests.
type Routing struct {
	Route string
	// BatchShare is the fraction of requests routed to batch in a split;
	// a request's side is a function of its custom_id, so a resumed run
	// routes it the same way.
	BatchShare float64
	// Batch configures the batch path: ChunkSize, WindowPerOrg,
	// StuckAfter, Deadline, poll intervals. Client, Keys, Journal and the
	// callbacks are set by Run.
	Batch batch.Config
	// SyncOrgs, if set, restricts the sync route to these organizations,
	// named by the label of their first key (a small job needs fewer).
	SyncOrgs []string
	// Why explains the choice; Predicted is the planner's wall-clock.
	Why       string
	Predicted time.Duration
}

// keysOfOrgs keeps the keys of the organizations named (by the label of
// their first key) in orgs; with none matched it keeps them all.
func keysOfOrgs(ks []*keys.Key, orgs []string) []*keys.Key {
	want := map[string]bool{}
	for _, o := range orgs {
		want[o] = true
	}
	label := map[string]string{} // org id → label of its first key
	for _, k := range ks {
		if _, ok := label[k.Org()]; !ok {
			label[k.Org()] = k.Label()
		}
	}
	var out []*keys.Key
	for _, k := range ks {
		if want[label[k.Org()]] {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return ks
	}
	return out
}

// toBatch reports whether the request with this id goes to batch.
func (r Routing) toBatch(id string) bool {
	switch r.Route {
	case RouteBatch:
		return true
	case RouteSplit:
		h := fnv.New32a()
		h.Write([]byte(id))
		return float64(h.Sum32()%10000) < r.BatchShare*10000
	}
	return false
}

// ErrInterrupted is returned (wrapped) when a run stopped before every
// request was done; re-running the same command resumes it.
var ErrInterrupted = errors.New("job: interrupted")

// InvalidInputError lists the bad lines of an input file.
type InvalidInputError struct {
	File    string
	Errors  []jsonl.LineError
	Total   int // every invalid line, listed or not
	Scanned int
}

func (e *InvalidInputError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d of %d lines are invalid; nothing was sent", e.File, e.Total, e.Scanned)
	for _, le := range e.Errors {
		fmt.Fprintf(&b, "\n  %s:%d: %s", e.File, le.Line, le.Reason)
	}
	if e.Total > len(e.Errors) {
		fmt.Fprintf(&b, "\n  … and %d more", e.Total-len(e.Errors))
	}
	b.WriteString("\nfix them, or pass --skip-invalid to record them as errored results")
	return b.String()
}

// ChangedError lists ids whose request changed since their result was written.
type ChangedError struct {
	Output string
	IDs    []string
	Total  int
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("%d requests changed since their results were written to %s (first: %s); pass --allow-changed to run them again, or write to a new output file",
		e.Total, e.Output, strings.Join(e.IDs, ", "))
}

// Run runs the job to completion, or until ctx ends (then it stops
// admitting, lets requests in flight finish within Grace, makes everything
// written durable and returns an error wrapping ErrInterrupted).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
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
	started := time.Now()
	rep := &Report{Input: o.Input, Output: o.Output, StartedAt: started.UTC()}

	// 0. One run per results file (its batch journal included).
	unlock, err := results.Lock(o.Output)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// 1. Resume state.
	st, err := results.Scan(o.Output)
	if err != nil {
		return nil, err
	}
	// 2. Validate every line before anything is sent; compare requests
	// already done with their recorded fingerprint.
	plan, err := survey(ctx, o, st)
	if err != nil {
		return nil, err
	}
	rep.Requests.Total = plan.summary.Lines
	rep.Requests.Invalid = plan.summary.Invalid
	if plan.summary.Invalid > 0 && !o.SkipInvalid {
		return nil, &InvalidInputError{File: o.Input, Errors: plan.errors, Total: plan.summary.Invalid, Scanned: plan.summary.Lines}
	}
	if len(plan.changed) > 0 && !o.AllowChanged {
		return nil, &ChangedError{Output: o.Output, IDs: plan.changed, Total: plan.nChanged}
	}
	// Rows to drive again: only ids of this input (a row of another
	// input is kept as it is).
	drop := func(id string, _ results.Entry) bool {
		return plan.redrive[id] || (o.AllowChanged && plan.changedSet[id])
	}
	rep.Requests.Redriven = len(plan.redrive)
	if o.AllowChanged {
		rep.Requests.Redriven += plan.nChanged
	}
	if st.TornBytes > 0 {
		o.Logger.Info("repairing a torn last line in the results file", "bytes", st.TornBytes)
	}

	// 3. Open the results file; count durable results as they land.
	var durable atomic.Int64
	var batchRunner atomic.Pointer[batch.Runner]
	w, err := results.Open(o.Output, st, drop, results.Options{NoSync: o.SyncOff, OnDurable: func(ids []string) {
		n := durable.Add(int64(len(ids)))
		if br := batchRunner.Load(); br != nil {
			br.Durable(ids)
		}
		if o.OnDurable != nil {
			o.OnDurable(n)
		}
	}})
	if err != nil {
		return nil, err
	}
	rep.Requests.AlreadyDone = len(st.Done)

	// 4. Keys: learn each key's org with a free probe.
	model := plan.firstModel
	if model == "" {
		model = "claude-sonnet-4-5"
	}
	todo := plan.pending
	if o.AllowChanged {
		todo += plan.nChanged
	}
	var ledger cost.Ledger
	cached := newCacheSide(o, w)
	defer cached.finish(rep)             // on every path: the cache writer is flushed
	rep.Requests.FromCache = plan.cached // updated from what was served
	if todo > 0 && todo == plan.cached {
		// Everything left is in the cache: serve it without a call (not
		// even the free key probes).
		ferr := feed(ctx, o, st, drop, func(string) bool { return true }, cached.serve,
			func(req *dispatch.Request) error {
				return fmt.Errorf("%w: the cache changed while the run started (%s is no longer in it); re-run %s to resume", ErrInterrupted, req.ID, o.Command)
			}, w)
		closeErr := w.Close()
		rep.WallSeconds = time.Since(started).Seconds()
		rep.Requests.Written = int(durable.Load())
		rep.BindingLimit = "none (every request was answered from the cache)"
		rep.Route = "cache"
		cached.finish(rep)
		if errors.Is(ferr, context.Canceled) {
			rep.Stopped = "interrupted"
			ferr = fmt.Errorf("%w: %d of %d requests answered from the cache; re-run %s to resume", ErrInterrupted, rep.Requests.Written, todo, o.Command)
		}
		if ferr != nil {
			return rep, ferr
		}
		if closeErr != nil {
			return rep, fmt.Errorf("job: writing results: %w", closeErr)
		}
		return rep, nil
	}
	if todo == 0 {
		if err := w.Close(); err != nil {
			return rep, fmt.Errorf("job: writing results: %w", err)
		}
		rep.WallSeconds = time.Since(started).Seconds()
		rep.BindingLimit = "none (nothing to do)"
		return rep, nil
	}
	disc, err := dispatch.Discover(ctx, o.Dispatch.Client, o.Dispatch.Keys, model)
	{
		for _, d := range disc {
			if dead, why := d.Key.Dead(); dead {
				o.Logger.Warn("key is not usable", "key", d.Key, "reason", why)
			}
		}
		if err != nil {
			w.Close()
			return nil, err
		}
		rep.Keys = keyReports(disc)
	}

	// 5. Route: sync, batch, or a split, decided once the input's shape
	// is known; then the dispatcher on the organizations the route uses.
	routing := Routing{Route: RouteSync}
	if o.Plan != nil {
		// The planner sizes what will be sent: cache hits cost nothing.
		if routing, err = o.Plan(plan.summary, todo-plan.cached); err != nil {
			w.Close()
			return nil, err
		}
	}
	rep.Route, rep.RouteWhy, rep.PredictedSeconds = routing.Route, routing.Why, routing.Predicted.Seconds()
	dc := o.Dispatch
	if len(routing.SyncOrgs) > 0 {
		dc.Keys = keysOfOrgs(dc.Keys, routing.SyncOrgs)
	}
	d, err := dispatch.New(dc)
	if err != nil {
		w.Close()
		return nil, err
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	var stopReason atomic.Value
	// halt stops feeding and admitting; requests in flight finish within
	// Grace (step 6), or sooner on an interrupt.
	halt := func(why string) {
		if stopReason.CompareAndSwap(nil, why) {
			o.Logger.Warn("stopping: "+why+"; requests in flight finish (interrupt to abort them)", "grace", o.Grace.String())
		}
		stopFeed()
		stopServe()
	}
	var writeErr atomic.Value
	record := func(r dispatch.Result) {
		if r.Aborted {
			return
		}
		rec := toRecord(r, o.Redact)
		if r.Class == api.ClassOK {
			cached.store(r.Request, r.Body, "sync")
			ledger.Add(r.Org, r.Request.Model, r.Usage, false)
			if o.MaxCost > 0 && ledger.Total() >= o.MaxCost {
				halt(fmt.Sprintf("--max-cost $%.2f reached", o.MaxCost))
			}
		}
		if err := w.Write(rec); err != nil {
			// The results file is in an unknown state: nothing more may be
			// sent, or it would be paid for and lost.
			if writeErr.CompareAndSwap(nil, err) {
				halt("writing results failed")
			}
		}
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(serveCtx) }()

	// 5b. The batch path: for a batch or split route, and on any route
	// when the journal holds batches a previous run left open — their
	// requests must be answered by those batches, or they are paid twice.
	var br *batch.Runner
	batchDone := make(chan error, 1)
	openJournal, err := batch.HasJournal(o.Output + ".batch-journal")
	if err != nil {
		stopServe()
		<-served
		w.Close()
		return nil, err
	}
	if routing.Route != RouteSync || openJournal {
		bc := routing.Batch
		// On a sync route the runner only finishes what the journal left
		// open: no new batch.
		bc.HarvestOnly = routing.Route == RouteSync
		bc.Client, bc.Keys, bc.NoSync, bc.Logger = o.Dispatch.Client, o.Dispatch.Keys, o.SyncOff, o.Logger
		bc.Journal = o.Output + ".batch-journal"
		// st.Done holds the kept rows only: rows being driven again were
		// dropped from it by Open.
		bc.Done = func(id string) bool { _, ok := st.Done[id]; return ok }
		bc.OnResult = func(r batch.Result) {
			rec := toRecord(r.Result, o.Redact)
			rec.Sluice.Route, rec.Sluice.BatchID = RouteBatch, r.BatchID
			if r.Class == api.ClassOK {
				cached.store(r.Request, r.Body, RouteBatch)
				ledger.Add(r.Org, r.Request.Model, r.Usage, true)
				if o.MaxCost > 0 && ledger.Total() >= o.MaxCost {
					halt(fmt.Sprintf("--max-cost $%.2f reached", o.MaxCost))
				}
			}
			if err := w.Write(rec); err != nil && writeErr.CompareAndSwap(nil, err) {
				halt("writing results failed")
			}
		}
		bc.OnReroute = func(req *dispatch.Request, why string) {
			o.Logger.Debug("batch request re-routed to sync", "id", req.ID, "why", why)
			d.Submit(serveCtx, req, record) // ErrStopped: the run is stopping; resume re-drives it
		}
		if br, err = batch.New(bc); err != nil {
			stopServe()
			<-served
			w.Close()
			return nil, err
		}
		batchRunner.Store(br)
		go func() { batchDone <- br.Run(feedCtx) }()
	}

	// Two feeders, each its own pass over the input, so a full batch
	// window never holds up the sync side, nor sync back-pressure the
	// batch side.
	toBatch := func(id string) bool { return br != nil && (br.Holds(id) || routing.toBatch(id)) }
	var feedErr, batchFeedErr, batchErr error
	var fed sync.WaitGroup
	fed.Go(func() {
		// The dispatcher stays open until the batch path has finished:
		// it re-routes requests to it until then.
		defer d.Close()
		var bf sync.WaitGroup
		if br != nil {
			bf.Go(func() {
				batchFeedErr = feed(feedCtx, o, st, drop, toBatch, cached.serve, func(req *dispatch.Request) error { return br.Submit(feedCtx, req) }, nil)
				if batchFeedErr != nil || feedCtx.Err() != nil {
					br.StopInput() // cut short: resumed chunks stay the next run's
				} else {
					br.CloseInput()
				}
			})
		}
		feedErr = feed(feedCtx, o, st, drop, func(id string) bool { return !toBatch(id) }, cached.serve,
			func(req *dispatch.Request) error { return d.Submit(feedCtx, req, record) }, w)
		bf.Wait()
		if br != nil {
			batchErr = <-batchDone
			if errors.Is(batchErr, batch.ErrJournal) {
				halt("the batch journal failed")
			}
		}
		if feedErr == nil {
			feedErr = batchFeedErr
		}
	})

	// Key rotations while the job runs. Its discoveries join the report
	// (read after rotWG.Wait).
	rotDone := make(chan struct{})
	var rotWG sync.WaitGroup
	if o.Rotations != nil {
		rotWG.Go(func() {
			for {
				select {
				case rot := <-o.Rotations:
					joiners := []dispatch.KeyJoiner{d}
					if br != nil {
						joiners = append(joiners, br)
					}
					more, err := dispatch.ApplyRotation(ctx, o.Dispatch.Client, rot, model, o.Logger, joiners...)
					if err != nil && ctx.Err() == nil && !errors.Is(err, dispatch.ErrStopped) {
						o.Logger.Warn("key rotation failed", "err", err)
					}
					disc = append(disc, more...)
				case <-rotDone:
					return
				case <-ctx.Done():
					return
				}
			}
		})
	}

	prog := newProgress(o, d, &ledger, &durable, todo, len(st.Done))
	progDone := make(chan struct{})
	var progWG sync.WaitGroup
	progWG.Go(func() { prog.run(progDone) })

	// 6. Wait for the end, an interrupt, or a halt (write error,
	// --max-cost). Stopped either way, attempts in flight finish within
	// Grace; the second interrupt (o.Abort) cuts them short, and so does
	// the first when a halt is already draining.
	var serveErr error
	drain := func(interrupt <-chan struct{}) error {
		select {
		case err := <-served:
			return err
		case <-time.After(o.Grace):
		case <-o.Abort:
		case <-interrupt:
		}
		d.Abort()
		return <-served
	}
	select {
	case serveErr = <-served:
	case <-serveCtx.Done():
		serveErr = drain(ctx.Done())
	case <-ctx.Done():
		stopFeed()
		stopServe() // stop admitting; attempts in flight finish
		serveErr = drain(nil)
	}
	fed.Wait()
	closeErr := w.Close()
	cached.finish(rep)
	if br != nil {
		if err := br.Close(); err != nil && batchErr == nil {
			batchErr = err
		}
		rep.Batch = br.Stats()
	}
	close(progDone) // the last frame shows every durable result
	progWG.Wait()

	// 7. Report. Keys as they are now: one may have died during the run.
	rep.finish(d, &ledger, durable.Load(), time.Since(started))
	close(rotDone)
	rotWG.Wait()
	rep.Keys = keyReports(disc)
	if e, _ := writeErr.Load().(error); e != nil {
		return rep, fmt.Errorf("job: writing results: %w", e)
	}
	if closeErr != nil {
		return rep, fmt.Errorf("job: writing results: %w", closeErr)
	}
	// ErrStopped: the dispatcher stopped first (no live key, a halt); the
	// reason is reported below.
	// An interrupt cancels ctx with the caller's own cause (not
	// context.Canceled): an error then is the interrupt, reported below as
	// resumable, not a failure (the batch path exited 1 on Ctrl-C).
	interrupted := ctx.Err() != nil
	if feedErr != nil && !interrupted && !errors.Is(feedErr, context.Canceled) && !errors.Is(feedErr, dispatch.ErrStopped) && !errors.Is(feedErr, batch.ErrStopped) {
		return rep, feedErr
	}
	if batchErr != nil && !interrupted && !errors.Is(batchErr, context.Canceled) {
		return rep, fmt.Errorf("job: batch path: %w", batchErr)
	}
	remaining := max(0, todo-int(durable.Load()))
	if s, _ := stopReason.Load().(string); s != "" && remaining > 0 {
		rep.Stopped = s
		return rep, fmt.Errorf("%w: %s; %d requests not run; re-run %s to resume", ErrInterrupted, s, remaining, o.Command)
	}
	if errors.Is(serveErr, dispatch.ErrNoLiveKey) {
		rep.Stopped = "no live key left"
		return rep, fmt.Errorf("%w: every key is dead (see the log); %d requests not run; fix the keys and re-run %s to resume", ErrInterrupted, remaining, o.Command)
	}
	if remaining > 0 {
		rep.Stopped = "interrupted"
		return rep, fmt.Errorf("%w: %d of %d requests done, %d to go; re-run %s to resume", ErrInterrupted, todo-remaining, todo, remaining, o.Command)
	}
	return rep, nil
}

// plan is what the survey pass found.
type plan struct {
	summary jsonl.Summary
	// pending counts the lines that will get a result this run: valid
	// lines (and with SkipInvalid, invalid ones with a usable first-seen
	// id) that are not done, or whose row is driven again.
	pending int
	// redrive holds the done ids of this input whose rows are driven
	// again: transport-class rows, and rows of lines that were invalid and
	// now are valid.
	redrive    map[string]bool
	errors     []jsonl.LineError
	changed    []string // first few, for the message
	nChanged   int
	changedSet map[string]bool
	firstModel string
	// cached counts the pending requests the cache will answer.
	cached int
}

// countCached counts info's request if the cache holds its answer.
func (p *plan) countCached(o Options, info jsonl.Info) {
	if o.Cache == nil || o.Cache.Mode() == cache.Off {
		return
	}
	k, err := cache.KeyOf(info.Params, o.CacheExtra...)
	if err != nil {
		return
	}
	if msg, ok := o.Cache.Lookup(k); ok && (o.CacheAccept == nil || o.CacheAccept(msg)) {
		p.cached++
	}
}

// survey validates the input and compares done requests with their record.
func survey(ctx context.Context, o Options, st *results.State) (*plan, error) {
	f, err := os.Open(o.Input)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	defer f.Close()
	p := &plan{changedSet: map[string]bool{}, redrive: map[string]bool{}}
	var v jsonl.Validator
	r := jsonl.NewReader(f)
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("job: reading %s: %w", o.Input, err)
		}
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("%w: while checking the input; nothing was sent", ErrInterrupted)
		}
		info, err := v.CheckShared(n, line)
		if err != nil {
			le, _ := errors.AsType[jsonl.LineError](err)
			if len(p.errors) < o.MaxErrors {
				p.errors = append(p.errors, le)
			}
			if id := recordableInvalid(le); o.SkipInvalid && id != "" {
				if _, done := st.Done[id]; !done {
					p.pending++
				}
			}
			continue
		}
		if p.firstModel == "" {
			p.firstModel = info.Model
		}
		e, done := st.Done[info.CustomID]
		switch {
		case !done:
			p.pending++
			p.countCached(o, info)
		case e.Class == api.ClassTransport || e.Class == api.ClassInvalidInput:
			p.redrive[info.CustomID] = true
			p.pending++
			p.countCached(o, info)
		case o.Redrive != nil && o.Redrive(info.CustomID):
			p.redrive[info.CustomID] = true
			p.pending++
			p.countCached(o, info)
		case o.KeepChanged != nil && o.KeepChanged(info.CustomID):
		case e.ParamsHash != "" && e.ParamsHash != info.ParamsHash:
			p.nChanged++
			p.changedSet[info.CustomID] = true
			if len(p.changed) < 5 {
				p.changed = append(p.changed, info.CustomID)
			}
		}
	}
	p.summary = v.Summary()
	return p, nil
}

// feed streams the input, submitting the requests mine selects that are
// not done and that fromCache did not answer. With w set it also records
// invalid lines (--skip-invalid): exactly one feeder of a run does that.
func feed(ctx context.Context, o Options, st *results.State, drop func(string, results.Entry) bool,
	mine func(id string) bool, fromCache func(*dispatch.Request) (bool, error), submit func(*dispatch.Request) error, w *results.Writer) error {
	f, err := os.Open(o.Input)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	defer f.Close()
	r := jsonl.NewReader(f)
	// The same checks as the survey, uniqueness included, so a duplicated
	// custom_id is never sent or recorded twice.
	var v jsonl.Validator
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			return nil
		}
		// Cache hits never block on submit, so look at ctx here too.
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("job: reading %s: %w", o.Input, err)
		}
		info, verr := v.Check(n, line)
		if verr != nil {
			// Only reached with SkipInvalid: survey refused otherwise.
			le, _ := errors.AsType[jsonl.LineError](verr)
			id := recordableInvalid(le)
			if id == "" || w == nil {
				continue
			}
			if e, done := st.Done[id]; done && !drop(id, e) {
				continue
			}
			if err := w.Write(invalidRecord(id, n, verr)); err != nil {
				return err
			}
			continue
		}
		if e, done := st.Done[info.CustomID]; (done && !drop(info.CustomID, e)) || !mine(info.CustomID) {
			continue
		}
		req := &dispatch.Request{
			ID: info.CustomID, Params: info.Params, Model: info.Model,
			MaxTokens: info.MaxTokens, EstInput: info.EstInputTokens, ParamsHash: info.ParamsHash,
		}
		if hit, err := fromCache(req); hit || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err := submit(req); err != nil {
			return err
		}
	}
}

// recordableInvalid returns the id an invalid line's errored result is
// recorded under, or "" when it has none: no readable, valid custom_id, or
// one already used by an earlier line (which gets the result).
func recordableInvalid(le jsonl.LineError) string {
	if le.Duplicate || !api.ValidCustomID(le.CustomID) {
		return ""
	}
	return le.CustomID
}

// toRecord renders a Result as a results line: the Batch results format,
// plus sluice's metadata under "sluice".
func toRecord(r dispatch.Result, redact func(string) string) api.ResultRecord {
	var res []byte
	if r.Class == api.ClassOK {
		res = append(append([]byte(`{"type":"succeeded","message":`), r.Body...), '}')
	} else {
		body := r.Body
		if !json.Valid(body) || len(body) == 0 {
			msg := "no error body"
			if r.Err != nil {
				msg = r.Err.Error()
			}
			body, _ = json.Marshal(api.NewErrorBody(api.ErrAPI, "", "%s", msg))
		}
		if redact != nil {
			body = []byte(redact(string(body)))
		}
		res = append(append([]byte(`{"type":"errored","error":`), body...), '}')
	}
	return api.ResultRecord{CustomID: r.Request.ID, Result: res, Sluice: &api.RunMeta{
		ParamsHash: r.Request.ParamsHash, Class: r.Class, Route: "sync", Org: r.Org, Key: r.Key,
		Attempts: r.Attempts, LatencyMs: r.Latency.Milliseconds(),
	}}
}

// invalidRecord is the errored result of a line that failed validation.
func invalidRecord(id string, line int, err error) api.ResultRecord {
	body, _ := json.Marshal(api.NewErrorBody(api.ErrInvalidRequest, "", "sluice: input line %d: %v", line, err))
	res := append(append([]byte(`{"type":"errored","error":`), body...), '}')
	return api.ResultRecord{CustomID: id, Result: res, Sluice: &api.RunMeta{Class: api.ClassInvalidInput, Route: "none"}}
}

func keyReports(disc []dispatch.Discovery) []KeyReport {
	var out []KeyReport
	for _, d := range disc {
		dead, why := d.Key.Dead()
		out = append(out, KeyReport{Label: d.Key.Label(), Last4: d.Key.Last4(), Org: d.Key.Org(), Dead: dead,
			Suspect: !dead && d.Key.Suspect(keys.AllPools), Reason: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
	return out
}
