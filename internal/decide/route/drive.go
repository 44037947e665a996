package route

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// Feed is one pass of side s over the caller's requests, in input order.
// For each request, take(line, id) says whether s sends it now; a true
// claims the request for s (when the run may re-plan, no other side will
// ever take that line), and the caller must then submit it, or end it
// itself (answer it, or leave it for a restart). submit sends it to s with
// the context the caller picks for it. first is true on s's first pass.
// An error ends s's feeding; so does ctx ending.
type Feed func(ctx context.Context, s Side, first bool, take func(line int, id string) bool,
	submit func(context.Context, *dispatch.Request) error) error

// Driver is what Drive needs from its caller: the requests (Feed), the
// sync side (Sync), and the hooks of a run that re-plans.
type Driver struct {
	// Feed reads the caller's requests, a pass at a time (required).
	Feed Feed
	// Sync sends a request on the sync side; its answer goes to the
	// caller's sink (required).
	Sync func(ctx context.Context, req *dispatch.Request) error
	// Prepare, if set, readies a request for side s just before it is
	// sent: fed by a pass, or handed over by a re-plan.
	Prepare func(s Side, req *dispatch.Request)
	// BatchContext is the batch path's Run context (default: Drive's).
	BatchContext context.Context
	// Fed, if set, is called once every feeder has ended, before the
	// batch path has (the requests' memory may go).
	Fed func()
	// Unanswered, if set, receives the custom_id of each request the
	// batch path accepted and neither answered nor gave back, once it has
	// stopped (a shutdown, a journal error, a row held for an org no key
	// reaches): it is the caller's to leave for a restart.
	Unanswered func(id string)

	// Replan, when the run may re-plan (Config.Lines > 0), is asked every
	// Every (default 1 s) for a new routing until the routing freezes;
	// ok false keeps the routing in force.
	Replan func(Progress) (r Routing, ok bool)
	Every  time.Duration
	// Reclaim takes back from the sync side the requests it holds but has
	// not sent that toBatch says now go to batch (Fanout.Reroute).
	Reclaim func(toBatch func(*dispatch.Request) bool) []*dispatch.Request
	// Rerouted, if set, hears of each routing Replan proposed: err nil
	// when it is in force, else why it was refused (the routing in force
	// stays).
	Rerouted func(r Routing, err error)
}

// Progress is what the feeders have done, for a re-plan.
type Progress struct {
	// Taken is how many lines the sides have taken.
	Taken int
	// SyncPassing: the sync feeder is in a pass over the input (it still
	// has work to hand the dispatcher).
	SyncPassing bool
}

// Driven is how Drive ended.
type Driven struct {
	// Feed is the first feeder error: the sync feeder's, else the batch
	// feeder's (ctx's error when it ended the feeding, context.Canceled
	// when Drive did: the batch path failed).
	Feed error
	// Batch is the batch path's Run error (nil without a batch path).
	Batch error
}

// driving is the state of a Drive under way, guarded by Fanout.mu.
type driving struct {
	ctx, bctx context.Context
	cut       context.CancelCauseFunc // ends ctx: the batch path failed
	d         *Driver
	started   bool           // a batch side was started
	fed       sync.WaitGroup // the batch feeder
	feedErr   error          // the batch feeder's, read after fed.Wait
	ran       chan error     // the batch path's Run
}

// Drive sends the requests: it starts the batch side (the Runner and its
// feeder) when there is a batch path, feeds the sync side on the calling
// goroutine, re-routes on a re-plan (opening and starting a batch side the
// new routing needs), closes the batch input when its feeder ends (StopInput
// when it was cut short: resumed chunks stay the next run's), waits for
// the batch path to finish, and sweeps the requests it never answered
// (Driver.Unanswered). When the batch path's Run returns an error while
// the feeders run (it failed — a journal failure — or BatchContext
// ended), Drive ends the feeding at once: neither side takes another
// request, and Driven.Batch says why. It returns when all of that is
// done; the caller closes its sync side and the Runner (Batch().Close)
// afterwards — the batch path re-routes to the sync side until Drive
// returns.
//
// Every request the feeders offer is claimed by one side at most, and
// every one is claimed by the end (docs/route.md, "Nothing is sent twice,
// nothing is left behind"). Drive is called once.
func (f *Fanout) Drive(ctx context.Context, d Driver) Driven {
	ctx, cut := context.WithCancelCause(ctx)
	defer cut(nil)
	dr := &driving{ctx: ctx, bctx: d.BatchContext, cut: cut, d: &d, ran: make(chan error, 1)}
	if dr.bctx == nil {
		dr.bctx = ctx
	}
	if d.Unanswered != nil {
		f.out.mu.Lock()
		f.out.ids = map[string]struct{}{}
		f.out.mu.Unlock()
	}
	f.mu.Lock()
	f.drv = dr
	if br := f.runner.Load(); br != nil {
		f.startBatchLocked(br)
	}
	f.mu.Unlock()

	stopReplan := func() {}
	if f.taken != nil && d.Replan != nil {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			f.replan(ctx, stop)
		}()
		stopReplan = func() { close(stop); <-done }
	}

	syncErr := f.feed(ctx, SideSync, func(ctx context.Context, req *dispatch.Request) error { return d.Sync(ctx, req) })
	// The sync side has left: the routing is frozen, or the batch path
	// runs already — no batch side starts after this.
	f.mu.Lock()
	started := dr.started
	f.mu.Unlock()
	dr.fed.Wait()
	if d.Fed != nil {
		d.Fed()
	}
	var out Driven
	if started {
		out.Batch = <-dr.ran
	}
	stopReplan()
	out.Feed = syncErr
	if out.Feed == nil {
		out.Feed = dr.feedErr
	}
	if d.Unanswered != nil {
		f.out.mu.Lock()
		ids := f.out.ids
		f.out.ids = nil
		f.out.mu.Unlock()
		for id := range ids {
			d.Unanswered(id)
		}
	}
	return out
}

// startBatchLocked runs the batch path br and its feeder: when Drive
// begins, or when a re-plan opens the batch path mid-run — in the same
// critical section as its re-route, so the sync feeder's end cannot miss a
// batch side it must wait for.
func (f *Fanout) startBatchLocked(br *batch.Runner) {
	dr := f.drv
	dr.started = true
	go func() {
		err := br.Run(dr.bctx)
		if err != nil {
			// The batch path stopped for good (a journal failure: a side
			// effect it could not record must not happen) or was stopped:
			// the run cannot end well, so nothing more is fed to either side.
			dr.cut(err)
		}
		dr.ran <- err
	}()
	dr.fed.Go(func() {
		dr.feedErr = f.feed(dr.ctx, SideBatch, func(ctx context.Context, req *dispatch.Request) error {
			f.out.add(req.ID)
			err := br.Submit(ctx, req)
			if err != nil {
				f.out.done(req.ID) // never accepted
			}
			return err
		})
		if dr.feedErr != nil || dr.ctx.Err() != nil {
			br.StopInput() // cut short: resumed chunks stay the next run's
		} else {
			br.CloseInput()
		}
	})
}

// feed is side s's feeder: the requests a re-plan handed it, then a pass
// over the input taking the lines the routing gives s, and more passes
// while a re-plan changes the routing (PassDone).
func (f *Fanout) feed(ctx context.Context, s Side, submit func(context.Context, *dispatch.Request) error) error {
	defer func() {
		f.Leave(s) // no Reroute hands s anything after this
		f.giveBack(ctx, s, f.Handoff(s))
	}()
	d := f.drv.d
	send := func(ctx context.Context, req *dispatch.Request) error {
		if d.Prepare != nil {
			d.Prepare(s, req)
		}
		return submit(ctx, req)
	}
	take := func(line int, id string) bool { return f.Take(s, line, id) }
	for first := true; ; first = false {
		gen := f.Generation()
		back := f.Handoff(s)
		for i, req := range back {
			if err := send(ctx, req); err != nil {
				f.giveBack(ctx, s, back[i:])
				return err
			}
		}
		f.passing[s].Store(true)
		err := d.Feed(ctx, s, first, take, send)
		f.passing[s].Store(false)
		if err != nil {
			return err
		}
		if br := f.Batch(); s == SideBatch && br != nil && !f.Frozen() {
			br.CutWaiting() // what this pass submitted must not wait for a full chunk
		}
		again, err := f.PassDone(ctx, s, gen)
		if err != nil || !again {
			return err
		}
	}
}

// giveBack sends back to sync (Config.Reroute) the requests a re-plan had
// taken back from the sync queue for side s's feeder, which stopped on an
// error before sending them: they were never sent, so sync may still send
// them. An interrupt (ctx ended) leaves them for the resume.
func (f *Fanout) giveBack(ctx context.Context, s Side, reqs []*dispatch.Request) {
	if s != SideBatch || f.cfg.Reroute == nil || ctx.Err() != nil {
		return
	}
	for _, req := range reqs {
		f.cfg.Reroute(req, "the batch feeder stopped")
	}
}

// replan asks the Driver for a routing every Every until the routing is
// frozen, ctx ends or stop is closed, and puts the ones it proposes in
// force (Reroute).
func (f *Fanout) replan(ctx context.Context, stop <-chan struct{}) {
	d := f.drv.d
	every := d.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		if f.Frozen() {
			return
		}
		nr, ok := d.Replan(Progress{Taken: f.Taken(), SyncPassing: f.passing[SideSync].Load()})
		if !ok {
			continue
		}
		_, err := f.Reroute(nr, d.Reclaim)
		if d.Rerouted != nil {
			d.Rerouted(nr, err)
		}
	}
}

// outstanding is the custom_ids the batch path accepted and has not yet
// answered or given back, kept only when Drive's caller sweeps them
// (ids nil: nothing is kept).
type outstanding struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (o *outstanding) add(id string) {
	o.mu.Lock()
	if o.ids != nil {
		o.ids[id] = struct{}{}
	}
	o.mu.Unlock()
}

func (o *outstanding) done(id string) {
	o.mu.Lock()
	if o.ids != nil {
		delete(o.ids, id)
	}
	o.mu.Unlock()
}
