// Package dispatch is sluice's scheduler: it sends each request on the lane
// (organization × model pool) with the most headroom, owns every retry and
// backoff, moves requests off dead keys, and reports one Result per request.
//
// One goroutine (the loop) owns all scheduling state, so nothing on the hot
// path is shared except the lanes' own small locks. Each attempt runs in its
// own goroutine and reports back to the loop; a request waiting to retry is
// a heap entry, never a goroutine holding a slot. The same Dispatcher serves
// `sluice run`, the batch path, judge and proxy: Submit for streams, Do for
// one call.
package dispatch

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/keys"
)

// Request is one Messages request to send (call.Request: the batch runner
// takes the same type).
type Request = call.Request

// Result is the final word on one Request (call.Result).
type Result = call.Result

// DefaultCaps are the per-key etiquette caps on concurrency per family.
var DefaultCaps = map[api.Family]int{
	api.FamilySonnet: 100, api.FamilyHaiku: 120, api.FamilyOpus: 40, api.FamilyFable: 40, api.FamilyUnknown: 40,
}

// Config configures a Dispatcher.
type Config struct {
	Client *client.Client
	// Keys to use; their Org must be set (see Discover). Keys of one org
	// share that org's lanes.
	Keys []*keys.Key
	// Caps per family override DefaultCaps.
	Caps map[api.Family]int
	// Lane is the template for every lane (Cap is set per family).
	Lane lane.Config
	// Retry bounds attempts.
	Retry RetryPolicy
	// MaxRetryAfter caps a server's retry-after (default
	// DefaultMaxRetryAfter): a longer one is logged, once per lane, and
	// honoured only up to the cap — a retry-after of a day must not stop a
	// lane silently for a day, nor an overflowing one be ignored.
	MaxRetryAfter time.Duration
	// NewBudget makes the budget of one lane (default budget.NewLocal);
	// org is the organization id, never a key.
	NewBudget func(org string, pool api.Pool) budget.Budget
	// MaxQueued bounds requests accepted but not yet sent (default 4 ×
	// the sum of caps); Submit blocks beyond it.
	MaxQueued int
	// Seed seeds the backoff jitter.
	Seed uint64
	// Now reads the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// Path is the endpoint (default /v1/messages).
	Path string
	// StreamIdle ends a streamed answer (StreamSender) that delivers no
	// event for this long, as a lost connection (Transport): a stalled
	// stream must not hold its lane slot forever. Default
	// DefaultStreamIdle; negative disables it.
	StreamIdle time.Duration
}

// DefaultMaxRetryAfter is Config.MaxRetryAfter's default.
const DefaultMaxRetryAfter = api.DefaultMaxRetryAfter

// DefaultStreamIdle is Config.StreamIdle's default: the API keeps a
// healthy stream busy with ping events between content, so a minute of
// silence is a stall, not a slow answer.
const DefaultStreamIdle = 60 * time.Second

// ErrNoLiveKey means every key able to serve a request is dead.
var ErrNoLiveKey = errors.New("dispatch: no live key left")

// ErrStopped is the error of a request aborted by shutdown.
var ErrStopped = errors.New("dispatch: stopped before the request finished")

// Dispatcher schedules requests. Create with New, run Serve in a goroutine.
type Dispatcher struct {
	cfg  Config
	rng  *rand.Rand
	now  func() time.Time
	log  *slog.Logger
	orgs map[string]*orgState // by org id

	submit   chan *item
	done     chan *attempt
	withdraw chan *item // a SubmitSend context ended (stream.go)
	reclaim  chan reclaimCall
	closed   chan struct{} // Close: no more submissions
	closeOne sync.Once
	served   chan struct{} // Serve returned
	err      error         // why Serve returned, valid after served

	attemptCtx   context.Context
	abortAttempt context.CancelFunc

	// loop-owned
	lanes  map[laneKey]*laneState
	byPool map[api.Pool][]*laneState
	queues map[api.Pool]*fifo
	// parked holds, by prompt prefix, queued items every lane holds back
	// while that prefix is being written (warm.go), so the items behind
	// them go on; the writer's end puts them back at the queue's front.
	parked map[uint64][]*item
	// workers are the attempts' goroutines waiting for their next
	// attempt, the longest idle first (worker.go).
	workers []*worker
	parkedN map[api.Pool]int // parked items by pool (tombstones of withdrawn ones included)
	retries retryHeap
	queued  int
	flying  int

	mu       sync.Mutex // guards stats, meters, and laneList for Snapshot (the loop, its only writer, reads it without)
	stats    Stats
	laneList []*laneState
	meters   map[api.Pool]*poolMeter
	addKeys  chan []*keys.Key // AddKeys → the loop
	// unservable counts the queued requests of pools no key may use any
	// more (every key dead, or dead for the pool), as of the last admit.
	// Loop-owned.
	unservable int
}

type laneKey struct {
	org  string
	pool api.Pool
}

type orgState struct {
	id    string
	label string
	keys  []*keys.Key // live keys; loop-owned
	live  atomic.Int32
	rr    int
	// ws is the workspace this state's keys send once the organization's
	// lanes were split by workspace ("" : the organization's own lanes);
	// ws is written under d.mu (Snapshot reads it), the split record is
	// loop-owned (workspace.go).
	ws    string
	split *wsSplit
	bid   string // budgetID's, for a workspace split off; fixed
	// wide paces every lane of the organization together at a limit on
	// its usage across all models that a 429 named (orgwide.go); nil
	// until one did. Loop-owned pointer; the budget is safe to share.
	wide budget.Budget
}

type laneState struct {
	// noKey: no key of the org can ever serve this pool again (dead,
	// dead for the pool, or retired), as of the last admit; for Snapshot
	// and ExpectedWait, which read it from other goroutines.
	noKey atomic.Bool
	org   *orgState
	pool  api.Pool
	l     *lane.Lane
	meter *poolMeter
	// cappedLogged: a retry-after above the cap was logged (loop-owned).
	cappedLogged bool
	// prefixes: the shared prompt prefixes this lane has warmed or is
	// warming (warm.go; loop-owned).
	prefixes map[uint64]*prefixState
}

type item struct {
	req  *Request
	cb   func(Result)
	pool api.Pool
	// wide is what the attempt in flight took from its organization's
	// limit across all models (orgwide.go); loop-owned.
	wide      *budget.Grant
	attempts  int
	congested int
	failed    int
	first     time.Time
	enqueued  time.Time // when the loop took it: Result.Queued counts from here
	due       time.Time
	last      *client.Outcome
	// ctx, cancel, send, onWait and unwatch are set by SubmitSend
	// (stream.go) and never change.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	send    Sender
	onWait  func()
	unwatch func() bool
	// where is the request now; loop-owned. A request that ends while it
	// sits in a queue or the retry heap (withdrawn) stays there as a
	// tombstone, skipped when it comes up.
	where where
}

type where uint8

const (
	atNew    where = iota // not yet received by the loop
	atQueue               // in its pool's queue
	atRetry               // in the retry heap
	atFlight              // an attempt is running
	atEnd                 // its Result was delivered
)

type attempt struct {
	it     *item
	ls     *laneState
	key    *keys.Key
	ticket lane.Ticket
	// out is the attempt's outcome; out.Sent: the request was written to
	// the server whole, so the API may have done (and billed) the work
	// even if the attempt was canceled.
	out client.Outcome
	// sentAt is when the attempt was launched: a refusal is new evidence
	// against a suspect key only from an attempt sent after it fell under
	// suspicion.
	sentAt time.Time
	w      *worker // the goroutine that runs it
}

// New returns a Dispatcher over cfg.Keys. Keys must have an org (Discover
// sets it); dead keys are skipped.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Client == nil {
		return nil, errors.New("dispatch: Config.Client is required")
	}
	cfg.Retry.defaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NewBudget == nil {
		cfg.NewBudget = func(string, api.Pool) budget.Budget { return budget.NewLocal() }
	}
	if cfg.Path == "" {
		cfg.Path = "/v1/messages"
	}
	if cfg.StreamIdle == 0 {
		cfg.StreamIdle = DefaultStreamIdle
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	d := &Dispatcher{
		cfg: cfg, now: cfg.Now, log: cfg.Logger,
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		orgs:   map[string]*orgState{},
		submit: make(chan *item), withdraw: make(chan *item), reclaim: make(chan reclaimCall), closed: make(chan struct{}), served: make(chan struct{}),
		addKeys: make(chan []*keys.Key),
		lanes:   map[laneKey]*laneState{}, byPool: map[api.Pool][]*laneState{}, queues: map[api.Pool]*fifo{}, parked: map[uint64][]*item{}, parkedN: map[api.Pool]int{},
		meters: map[api.Pool]*poolMeter{},
	}
	d.attemptCtx, d.abortAttempt = context.WithCancel(context.Background())
	sumCap := 0
	for _, k := range cfg.Keys {
		if dead, _ := k.Dead(); dead {
			continue
		}
		org := k.Org()
		if org == "" {
			return nil, fmt.Errorf("dispatch: key %s has no organization; run Discover first", k)
		}
		o, ok := d.orgs[org]
		if !ok {
			o = &orgState{id: org, label: k.Label()}
			d.orgs[org] = o
			sumCap += d.capFor(api.FamilySonnet)
		}
		o.keys = append(o.keys, k)
		o.live.Add(1)
	}
	if len(d.orgs) == 0 {
		return nil, ErrNoLiveKey
	}
	if d.cfg.MaxQueued <= 0 {
		d.cfg.MaxQueued = 4 * max(sumCap, 100)
	}
	d.done = make(chan *attempt, 4*max(sumCap, 100))
	d.stats.Lanes = map[string]*LaneStats{}
	return d, nil
}

func (d *Dispatcher) capFor(f api.Family) int {
	if c, ok := d.cfg.Caps[f]; ok && c > 0 {
		return c
	}
	return DefaultCaps[f]
}

// Submit queues req; cb receives its Result exactly once, on the
// dispatcher's goroutine (keep it short). Submit blocks while the queue is
// full, and returns ErrStopped once the dispatcher stops accepting work.
func (d *Dispatcher) Submit(ctx context.Context, req *Request, cb func(Result)) error {
	it := &item{req: req, cb: cb, pool: api.PoolOf(req.Model)}
	select {
	case d.submit <- it:
		return nil
	case <-d.closed:
		return ErrStopped
	case <-d.served:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Do sends one request and waits for its Result.
func (d *Dispatcher) Do(ctx context.Context, req *Request) Result {
	ch := make(chan Result, 1)
	if err := d.Submit(ctx, req, func(r Result) { ch <- r }); err != nil {
		return Result{Request: req, Aborted: true, Err: err}
	}
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		// The result still arrives on ch (buffered) and is dropped.
		return Result{Request: req, Aborted: true, Err: ctx.Err()}
	}
}

// Close stops accepting submissions; Serve returns once every accepted
// request has a Result.
func (d *Dispatcher) Close() { d.closeOne.Do(func() { close(d.closed) }) }

// Abort cancels attempts in flight (their requests end Aborted).
func (d *Dispatcher) Abort() { d.abortAttempt() }

// Done is closed when Serve has returned.
func (d *Dispatcher) Done() <-chan struct{} { return d.served }

// Err is why Serve returned (nil, ErrNoLiveKey, or the context's error);
// valid after Done.
func (d *Dispatcher) Err() error { return d.err }

// Serve runs the scheduling loop until Close and every accepted request is
// finished, or ctx ends (then it stops admitting, lets attempts in flight
// finish — Abort cuts them short — and ends the rest Aborted).
func (d *Dispatcher) Serve(ctx context.Context) error {
	defer close(d.served)
	defer d.retireWorkers(time.Time{}) // every one: flying is 0 here
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopping, idled := false, false
	accepting := true
	for {
		now := d.now()
		d.retireWorkers(now)
		wake := time.Time{}
		if !stopping && ctx.Err() != nil {
			// Noticed before admitting: a callback may have cancelled ctx
			// (a halt) while the loop had other events to handle.
			stopping = true
		}
		if !stopping {
			wake = d.admit(now)
			// Queued work no key can serve ends the run only once no
			// more can come (closed, or the queue is full of it).
			unservable := d.unservable == d.queued && (!accepting || d.queued >= d.cfg.MaxQueued)
			if d.queued > 0 && d.flying == 0 && (d.noLiveLane() || unservable) {
				d.err = ErrNoLiveKey
				stopping = true
			}
		}
		if stopping && !idled {
			// Nothing is admitted any more: the drain is nobody's wait.
			idle(d.laneList, now)
			idled = true
		}
		if stopping && d.flying == 0 {
			d.abortQueued()
			if d.err == nil {
				d.err = context.Cause(ctx)
			}
			return d.err
		}
		if !accepting && d.queued == 0 && d.flying == 0 {
			return nil
		}
		submit := d.submit
		if !accepting || stopping || d.queued >= d.cfg.MaxQueued {
			submit = nil
		}
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(now), time.Millisecond))
		} else {
			timer.Reset(time.Hour)
		}
		var ctxDone <-chan struct{}
		if !stopping {
			ctxDone = ctx.Done()
		}
		var closed <-chan struct{}
		if accepting {
			closed = d.closed
		}
		select {
		case it := <-submit:
			d.enqueue(it, now)
		case a := <-d.done:
			d.ended(a)
		case it := <-d.withdraw:
			d.withdrawItem(it)
		case c := <-d.reclaim:
			d.reclaimNow(c)
		case ks := <-d.addKeys:
			d.addKeysNow(ks, now)
		case <-timer.C:
		case <-closed:
			accepting = false
		case <-ctxDone:
			stopping = true
		}
	}
}

// ended takes in a, an attempt its worker has just handed back: the
// worker rests, the attempt is finished. Loop-owned.
func (d *Dispatcher) ended(a *attempt) {
	d.rest(a.w, d.now()) // not the loop's now, read before the select waited: perhaps through the whole attempt
	d.finish(a)
}

// AddKeys adds keys to a serving dispatcher (a rotation: the key sources
// were re-read). Each key must have its org (Discover sets it); a key of a
// known org joins its lanes, a key of a new org gets lanes of its own for
// every pool in use. Keys already present, dead or retired are skipped. A
// key is taken out by retiring it (keys.Key.Retire): it takes no new
// attempt, and its attempts in flight finish. AddKeys returns ErrStopped
// once Serve has returned.
func (d *Dispatcher) AddKeys(ctx context.Context, ks []*keys.Key) error {
	for _, k := range ks {
		if k.Org() == "" {
			return fmt.Errorf("dispatch: key %s has no organization; run Discover first", k)
		}
	}
	select {
	case d.addKeys <- ks:
		return nil
	case <-d.served:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addKeysNow is AddKeys on the loop.
func (d *Dispatcher) addKeysNow(ks []*keys.Key, now time.Time) {
	for _, k := range ks {
		if dead, _ := k.Dead(); dead || k.Retired() {
			continue
		}
		o, ok := d.orgFor(k)
		if !ok {
			o = &orgState{id: k.Org(), label: k.Label()}
			d.orgs[o.id] = o
			for pool := range d.byPool {
				d.addLane(o, pool, now)
			}
		}
		if slices.Contains(o.keys, k) {
			continue
		}
		o.keys = append(o.keys, k)
		o.live.Add(1)
		d.log.Info("key joined the run", "key", k, "org", o.label)
	}
}

func (d *Dispatcher) enqueue(it *item, now time.Time) {
	it.first, it.enqueued = time.Time{}, now
	d.mu.Lock()
	d.stats.Submitted++
	d.mu.Unlock()
	if err := it.withdrawn(); err != nil {
		it.where = atEnd
		it.cb(Result{Request: it.req, Aborted: true, Err: err})
		return
	}
	q := d.queues[it.pool]
	if q == nil {
		q = &fifo{}
		d.queues[it.pool] = q
	}
	q.push(it)
	it.where = atQueue
	d.queued++
	d.ensureLanes(it.pool, now)
}

// ensureLanes creates the lanes of pool on every live org on first use.
func (d *Dispatcher) ensureLanes(pool api.Pool, now time.Time) {
	if _, ok := d.byPool[pool]; ok {
		return
	}
	ids := make([]string, 0, len(d.orgs))
	for id := range d.orgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	d.byPool[pool] = nil
	for _, id := range ids {
		d.addLane(d.orgs[id], pool, now)
	}
}

// addLane creates the lane of org o for pool. Loop-owned.
func (d *Dispatcher) addLane(o *orgState, pool api.Pool, now time.Time) {
	cfg := d.cfg.Lane
	cfg.Cap = d.capFor(api.FamilyOfPool(pool))
	s := &laneState{org: o, pool: pool, l: lane.New(cfg, d.cfg.NewBudget(o.budgetID(), pool), now), meter: d.meter(pool)}
	d.lanes[laneKey{o.budgetID(), pool}] = s
	d.byPool[pool] = append(d.byPool[pool], s)
	d.mu.Lock()
	d.laneList = append(d.laneList, s)
	d.mu.Unlock()
}

// admit launches every attempt that can go now and returns when the loop
// should look again (zero: only on an event).
func (d *Dispatcher) admit(now time.Time) time.Time {
	var wake time.Time
	soon := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	d.unservable = 0
	// Retries whose time has come go to the front of their pool's queue.
	for d.retries.Len() > 0 && !d.retries[0].due.After(now) {
		it := heap.Pop(&d.retries).(*item)
		if it.where == atEnd {
			continue // withdrawn while it waited
		}
		it.where = atQueue
		d.queues[it.pool].pushFront(it)
	}
	if d.retries.Len() > 0 {
		soon(d.retries[0].due)
	}
	for pool, q := range d.queues {
		lanes := d.byPool[pool]
		for q.len() > 0 {
			it := q.peek()
			if it.where == atEnd { // withdrawn while it waited
				q.pop()
				continue
			}
			if d.dropWithdrawn(q, it) {
				continue
			}
			ls, key, tk, wait, none, held := d.pick(lanes, it, now)
			if held {
				// Every lane that could take it is writing its prefix:
				// set it aside so the rest of the queue goes on.
				q.pop()
				d.park(it)
				continue
			}
			if none {
				// No key may ever use this pool again: its requests wait
				// for the rest of the work, then end with ErrNoLiveKey.
				d.unservable += q.len()
				break
			}
			if ls == nil {
				if wait > 0 {
					soon(now.Add(wait))
				}
				break
			}
			q.pop()
			d.launch(it, ls, key, tk, now)
		}
		if len(lanes) > 0 {
			lanes[0].meter.setWaiting(q.len() + d.parkedN[pool]) // parked requests go back ahead of the queue
		}
		if q.len() == 0 {
			// Nothing waits: a lane at its limit now is not holding work
			// back (the report's binding limit counts waiting). Time a
			// request spends only in retry backoff is not counted: a
			// lane's pause would hold it, but so would its own backoff.
			idle(lanes, now)
		}
	}
	return wake
}

// pick tries the live lanes of the request's pool in order of headroom and
// returns the first that admits it (with the key to send with), or the
// shortest known wait. none reports that no lane of the pool has a key
// that can ever serve it (every key dead, or dead for this pool).
func (d *Dispatcher) pick(lanes []*laneState, it *item, now time.Time) (ls *laneState, key int, tk lane.Ticket, wait time.Duration, none, held bool) {
	type cand struct {
		ls  *laneState
		key int
		h   float64
	}
	var cs [8]cand
	c := cs[:0]
	none = true
	for _, ls := range lanes {
		k, next := d.keyFor(ls, now)
		ls.noKey.Store(k < 0 && next.IsZero())
		switch {
		case k >= 0:
			c = append(c, cand{ls, k, ls.l.Headroom(now)})
		case next.IsZero():
			ls.l.Idle(now) // dead: holds nothing back from here on
			continue
		default:
			// Every key suspect: nothing is held back by the lane's
			// limits until the next re-probe.
			ls.l.Idle(now)
			if wait == 0 || next.Sub(now) < wait {
				wait = next.Sub(now)
			}
		}
		none = false
	}
	// Not sort.SliceStable: its reflection allocated a dozen times an
	// admission and moved c to the heap.
	slices.SortStableFunc(c, func(a, b cand) int {
		switch { // most headroom first
		case a.h > b.h:
			return -1
		case a.h < b.h:
			return 1
		}
		return 0
	})
	nHeld := 0
	for _, x := range c {
		if x.ls.prefixHeld(it) {
			nHeld++
			continue // its writer's answer wakes the loop
		}
		dem := x.ls.l.Demand(float64(it.req.EstInput), float64(it.req.MaxTokens))
		og, ow := x.ls.org.takeWide(now, dem) // orgwide.go
		if ow > 0 {
			if wait == 0 || ow < wait {
				wait = ow
			}
			continue
		}
		tk, r, w := x.ls.l.TryAcquire(now, dem, float64(it.req.EstInput))
		if r == budget.Granted {
			x.ls.prefixSent(it, now)
			it.wide = og
			return x.ls, x.key, tk, 0, false, false
		}
		x.ls.org.settleWide(now, og, budget.Demand{})
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
	}
	return nil, -1, lane.Ticket{}, wait, none, nHeld > 0 && nHeld == len(c)
}

// keyFor returns the index in ls's org of the next key (round robin) that
// may send for ls's pool now, or -1 and when one may (a suspect key's
// re-probe), or -1 and a zero time when none ever will. Loop-owned.
func (d *Dispatcher) keyFor(ls *laneState, now time.Time) (int, time.Time) {
	o := ls.org
	var soonest time.Time
	for i := range o.keys {
		j := (o.rr + i) % len(o.keys)
		ok, next := o.keys[j].Usable(now, ls.pool)
		if ok {
			return j, time.Time{}
		}
		if !next.IsZero() && (soonest.IsZero() || next.Before(soonest)) {
			soonest = next
		}
	}
	return -1, soonest
}

func (d *Dispatcher) launch(it *item, ls *laneState, keyIdx int, tk lane.Ticket, now time.Time) {
	d.queued--
	d.flying++
	it.where = atFlight
	it.attempts++
	if it.first.IsZero() {
		it.first = now
	}
	ls.meter.admitted(now)
	o := ls.org
	key := o.keys[keyIdx]
	o.rr = keyIdx + 1
	key.Launched(now, ls.pool)
	a := &attempt{it: it, ls: ls, key: key, ticket: tk, sentAt: now}
	d.run(a)
}

// finish handles a finished attempt: settle the lane, then retry, move or
// complete the request.
func (d *Dispatcher) finish(a *attempt) {
	d.flying--
	now := d.now()
	o, it := &a.out, a.it
	it.last = o
	if a.ls.prefixDone(it, o, a.sentAt) {
		d.unpark(it.req.CachePrefix)
	}
	d.capRetryAfter(a.ls, o)
	a.ls.l.Done(now, a.ticket, laneResult(a, o))
	a.ls.org.settleWide(now, it.wide, wideCharge(o))
	it.wide = nil
	d.orgLimited(a, now)
	d.noteWorkspace(a, now)
	d.count(a, o)

	retry := false
	switch o.Class {
	case client.OK, client.Invalid, client.RateLimited:
		// Past authentication: a suspect key is fine again.
		if a.key.Answered(a.sentAt, a.ls.pool) {
			d.log.Info("key answered again; no longer suspect", "key", a.key, "pool", a.ls.pool)
		}
	}
	switch o.Class {
	case client.OK:
		d.complete(it, api.ClassOK, a, now)
		return
	case client.Invalid:
		if o.ShouldRetry == 1 {
			it.failed++
			retry = it.failed < d.cfg.Retry.MaxFailed
			break
		}
		d.complete(it, api.ClassFinal, a, now)
		return
	case client.KeyDead:
		d.refused(a, now)
		it.attempts-- // a refusal costs the request nothing
		if d.endWithdrawn(it) {
			return
		}
		d.requeue(it)
		return
	case client.Canceled:
		if err := d.stopped(it); err != nil { // Abort, or withdrawn: end it, do not relaunch
			it.where = atEnd
			it.cb(Result{Request: it.req, Aborted: true, Err: err, Attempts: it.attempts})
			return
		}
		d.requeue(it)
		return
	case client.RateLimited, client.Overloaded:
		it.congested++
		retry = it.congested < d.cfg.Retry.MaxCongested && o.ShouldRetry != 0
	case client.ServerError, client.Transport:
		it.failed++
		retry = it.failed < d.cfg.Retry.MaxFailed && o.ShouldRetry != 0
	}
	if !retry {
		d.complete(it, api.ClassTransport, a, now)
		return
	}
	// Withdrawn while its attempt was in flight: the withdrawal found it
	// in flight and left it to end here, so it must not wait for a retry.
	if d.endWithdrawn(it) {
		return
	}
	n := it.congested + it.failed
	it.due = now.Add(d.cfg.Retry.Backoff(n, a.ls.l.MeanLatency(), o.RetryAfter, o.HasRetryAfter, d.rng.Float64()))
	d.queued++
	it.where = atRetry
	heap.Push(&d.retries, it)
	if it.onWait != nil {
		it.onWait()
	}
}

// laneResult is what an attempt's outcome tells its lane: the one mapping
// from the client's classes to the lane's signals.
func laneResult(a *attempt, o *client.Outcome) lane.Result {
	// A canceled attempt reached the server if its request was written
	// whole (or answered): the API may have done the work, so its budget
	// is not refunded.
	lr := lane.Result{Limits: o.Limits, Date: o.Date, Latency: o.Latency,
		Reached:  o.Class != client.Canceled || o.Sent || o.Status != 0,
		Answered: o.Status != 0}
	switch o.Class {
	case client.OK:
		lr.Signal = lane.Clean
		// What the API charged to ITPM: uncached input and cache writes,
		// and cache reads only for the models whose reads count.
		lr.InputTokens = float64(o.Usage.InputTokens + o.Usage.CacheCreationInputTokens)
		if o.Usage.CacheReadInputTokens > 0 && a.it != nil && a.it.req != nil { // the lookup only when it can matter
			if m, ok := api.LookupModel(a.it.req.Model); ok && m.CacheReadsCountITPM {
				lr.InputTokens += float64(o.Usage.CacheReadInputTokens)
			}
		}
		lr.OutputTokens = float64(o.Usage.OutputTokens)
	case client.Invalid:
		// Refused before the model ran: one request, no tokens, no
		// signal about capacity.
		lr.Signal = lane.Neutral
	case client.RateLimited:
		lr.Signal, lr.Named = lane.RateLimited, o.Named
		if o.HasRetryAfter {
			lr.RetryAfter = o.RetryAfter
		}
	case client.Overloaded:
		lr.Signal = lane.Overloaded
	case client.ServerError, client.Transport:
		lr.Signal = lane.Failed
	case client.KeyDead:
		lr.Signal, lr.Reached = lane.Neutral, false
	case client.Canceled:
		lr.Signal = lane.Aborted
	}
	return lr
}

// capRetryAfter caps the outcome's retry-after at MaxRetryAfter
// (api.CapRetryAfter, the rule the batch path's control calls follow too),
// logging the first capped one of each lane. Loop-owned.
func (d *Dispatcher) capRetryAfter(ls *laneState, o *client.Outcome) {
	if !o.HasRetryAfter {
		return
	}
	asked := o.RetryAfter
	var capped bool
	if o.RetryAfter, capped = api.CapRetryAfter(asked, d.cfg.MaxRetryAfter); capped && !ls.cappedLogged {
		ls.cappedLogged = true
		d.log.Warn("the API asked for a retry-after longer than the cap; waiting only up to the cap (--max-retry-after)",
			"org", ls.org.label, "pool", ls.pool, "retry_after", asked.String(), "cap", d.cfg.MaxRetryAfter.String())
	}
}

// endWithdrawn ends it (Aborted) if its request was withdrawn, and
// reports whether it did. Loop-owned.
func (d *Dispatcher) endWithdrawn(it *item) bool {
	err := it.withdrawn()
	if err == nil {
		return false
	}
	it.where = atEnd
	it.cb(Result{Request: it.req, Aborted: true, Err: err, Attempts: it.attempts})
	return true
}

// requeue puts it back at the front of its queue after an attempt that
// costs it nothing (dead key, canceled attempt).
func (d *Dispatcher) requeue(it *item) {
	d.queued++
	it.where = atQueue
	d.queues[it.pool].pushFront(it)
	if it.onWait != nil {
		it.onWait()
	}
}

// refused applies a key refusal by the one rule (keys.ApplyRefusal): a
// 401 or 403 goes to the key's health rule (suspect first, dead only when
// refusals last; a 403 for the lane's pool only), a workspace's usage
// limit kills the key, and a 402, the spend cap or exhausted credit kills
// every key of the org at once. Dead keys leave their org. Loop-owned.
func (d *Dispatcher) refused(a *attempt, now time.Time) {
	o, k := &a.out, a.key
	r := o.Refusal(a.ls.pool, a.sentAt, now)
	v, killed := keys.ApplyRefusal(k, a.ls.org.keys, r)
	switch {
	case v == keys.Suspected:
		d.log.Warn("key refused; it is held back and re-probed, and is dead only if refusals last",
			"key", k, "pool", r.Pool, "status", o.Status, "dead_after", k.Health().DeadAfter.String())
	case v == keys.Killed && len(killed) == 0:
		_, why := k.DeadFor(r.Pool)
		d.log.Warn("key can no longer use this model pool for this run; its requests move", "key", k, "pool", r.Pool, "reason", why)
	}
	d.dropKeys(a.ls.org, killed)
}

// dropKeys logs each key a refusal killed, once, by label, and takes every
// dead key out of org (one may have died on the batch path); an org
// without keys stops receiving requests. Loop-owned.
func (d *Dispatcher) dropKeys(org *orgState, killed []*keys.Key) {
	if len(killed) == 0 {
		return
	}
	for _, x := range killed {
		// Dead() holds the reason with any key value redacted.
		_, why := x.Dead()
		d.log.Warn("key is dead for this run; its requests move to live keys", "key", x, "reason", why)
	}
	live := org.keys[:0:0]
	for _, x := range org.keys {
		if dead, _ := x.Dead(); !dead {
			live = append(live, x)
		}
	}
	org.live.Add(int32(len(live) - len(org.keys)))
	org.keys = live
	if len(org.keys) == 0 {
		d.log.Warn("organization has no live key left", "org", org.label)
	}
}

func (d *Dispatcher) noLiveLane() bool {
	for _, o := range d.orgs {
		if len(o.keys) > 0 {
			return false
		}
	}
	return true
}

// complete delivers the final Result of it.
func (d *Dispatcher) complete(it *item, class string, a *attempt, now time.Time) {
	o := a.out
	r := Result{
		Request: it.req, Class: class, Status: o.Status, Body: o.Body,
		Org: a.ls.org.label, Key: a.key.Label(), Attempts: it.attempts,
		Latency: now.Sub(it.first), Queued: it.first.Sub(it.enqueued), Usage: o.Usage, StopReason: o.StopReason, Err: o.Err,
	}
	if class == api.ClassTransport && (len(r.Body) == 0 || o.Class == client.Transport) {
		r.Body = syntheticError(o, it.attempts)
	}
	it.where = atEnd
	d.mu.Lock()
	switch class {
	case api.ClassOK:
		d.stats.OK++
	case api.ClassFinal:
		d.stats.Final++
	default:
		d.stats.Transport++
	}
	d.mu.Unlock()
	it.cb(r)
}

// syntheticError is the error body recorded when no answer carried one.
func syntheticError(o client.Outcome, attempts int) []byte {
	msg := fmt.Sprintf("sluice: gave up after %d attempts", attempts)
	if o.Err != nil {
		msg += ": " + o.Err.Error()
	}
	b, _ := json.Marshal(api.NewErrorBody(api.ErrAPI, "", "%s", msg))
	return b
}

// abortQueued ends every request not yet finished as Aborted.
func (d *Dispatcher) abortQueued() {
	err := ErrStopped
	if d.err == ErrNoLiveKey {
		err = ErrNoLiveKey
	}
	abort := func(it *item) {
		if it.where == atEnd {
			return // a tombstone: withdrawn while it waited
		}
		it.where = atEnd
		it.cb(Result{Request: it.req, Aborted: true, Err: err, Attempts: it.attempts})
	}
	for _, q := range d.queues {
		for q.len() > 0 {
			abort(q.pop())
		}
	}
	for d.retries.Len() > 0 {
		abort(heap.Pop(&d.retries).(*item))
	}
	for p, its := range d.parked {
		for _, it := range its {
			abort(it)
		}
		delete(d.parked, p)
	}
	clear(d.parkedN)
	d.queued = 0
}

// idle tells each lane that no work waits for it at now.
func idle(lanes []*laneState, now time.Time) {
	for _, ls := range lanes {
		ls.l.Idle(now)
	}
}

// count updates the per-lane statistics.
func (d *Dispatcher) count(a *attempt, o *client.Outcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := a.ls.org.label + "/" + string(a.ls.pool)
	ls := d.stats.Lanes[name]
	if ls == nil {
		ls = &LaneStats{Org: a.ls.org.label, OrgID: a.ls.org.id, Pool: a.ls.pool}
		d.stats.Lanes[name] = ls
	}
	ls.Workspace = a.ls.org.ws
	ls.Attempts++
	switch o.Class {
	case client.OK:
		ls.OK++
		ls.InputTokens += o.Usage.InputTokens + o.Usage.CacheCreationInputTokens + o.Usage.CacheReadInputTokens
		ls.CacheReadTokens += o.Usage.CacheReadInputTokens
		ls.CacheWriteTokens += o.Usage.CacheCreationInputTokens
		ls.OutputTokens += o.Usage.OutputTokens
	case client.RateLimited:
		ls.RateLimited++
		d.stats.RetriesRateLimited++
	case client.Overloaded:
		ls.Overloaded++
		d.stats.RetriesOverloaded++
	case client.ServerError, client.Transport:
		ls.Failed++
		d.stats.RetriesFailed++
	case client.KeyDead:
		ls.KeyDead++
	}
}
