// Package batch sends requests through the Message Batches API: it cuts
// them into chunks by count and body bytes, creates each chunk as a batch
// on the organization with the most free window, polls it, streams its
// results, and hands every request back exactly once, as a result or as a
// request to re-route to the sync dispatcher.
//
// A write-ahead journal makes a crash at any point cost neither a second
// payment nor a batch: the intent of a create is fsynced before it, the id
// right after, and a resume adopts an orphaned batch through the org's list
// instead of creating it again. The design note is docs/batch.md.
package batch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/keys"
)

// ErrStopped is returned by Submit once the Runner stopped, or after
// CloseInput.
var ErrStopped = errors.New("batch: runner stopped or input closed")

// errCrash is a simulated crash (tests).
var errCrash = errors.New("batch: simulated crash")

// errFinished cancels the goroutines of chunks nobody waits for once every
// request has its outcome.
var errFinished = errors.New("batch: finished")

// Runner drives requests through Message Batches. Create with New; feed
// with Submit and CloseInput while Run runs; report durable results with
// Durable; Close after Run returned.
//
// Every submitted request gets exactly one callback — Config.OnResult or
// Config.OnReroute — unless Run stops first (context cancelled, journal
// failure): then the rest get none and a resume picks them up. The one
// exception is a request held back (see Holds): it gets no callback in this
// run, and a run with a key of its batch's org harvests it. Callbacks are
// serialized (never two at once) and run on the Runner's goroutines or on
// the goroutine calling Submit; they may block, but must not call Submit.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	j      *journal
	orgs   []*orgState // by label
	byOrg  map[string]*orgState
	target int // requests per chunk: min(ChunkSize, the largest window)
	maxPen int // Submit blocks while this many requests wait to be cut
	runID  string

	mu          sync.Mutex
	pending     []*call.Request       // not yet in a chunk, oldest first
	sizes       []int64               // body bytes of each pending request
	recovered   map[string]*chunk     // ids of journaled chunks not yet submitted this run
	parked      map[string]*parkedRow // harvested rows waiting for their request
	open        []*chunk              // every chunk of this run
	durWait     map[string]*chunk     // delivered ids not yet reported durable
	claimed     map[string]bool       // batch ids the journal knows
	heldBack    map[string]string     // id → params hash, of open chunks no usable key reaches
	holds       map[string]bool       // not-done ids of the chunks the journal left open; read-only after New
	byteCap     int64                 // most body bytes per chunk: MaxChunkBytes, halved by 413s
	warned      map[string]bool       // warnings logged once
	outstanding int                   // submitted requests without an outcome
	inputClosed bool
	cutNow      bool // cut a partial chunk now: the feeder has paused (CutWaiting)
	stopped     bool
	started     bool
	seq         int
	space       chan struct{} // closed when pending shrinks
	stats       Stats
	fatal       error
	cancelWhy   string        // set by Cancel: no batch is created any more
	cancelled   chan struct{} // closed by Cancel: wakes the chunks' polls

	kick chan struct{}
	cbMu sync.Mutex // serializes callbacks

	// Durable ids and unsynced journal records wait here for the Runner's
	// own goroutine (or Close): the results writer never waits on the
	// journal, nor does anyone holding mu.
	bgMu    sync.Mutex
	bgIDs   []string
	bgRecs  []record
	bgKick  chan struct{}
	flushMu sync.Mutex // one flush at a time

	dead atomic.Bool
	// primeOne: the endpoint refused a max_tokens 0 primer and took 1.
	primeOne atomic.Bool
	// ctx ends on an interrupt or a fatal error; pollCtx also when every
	// request has its outcome (it stops chunks nobody waits for, while a
	// harvest under way finishes on ctx).
	ctx       context.Context
	cancel    context.CancelCauseFunc
	pollCtx   context.Context
	stopPolls context.CancelCauseFunc
	wg        sync.WaitGroup

	// crashAt, when set (tests), is asked at each crash point; true makes
	// the Runner stop there as if the process had died.
	crashAt func(point string) bool
}

// orgState is one organization's batch path. Guarded by Runner.mu, except
// createMu.
type orgState struct {
	id, label string
	keys      []*keys.Key
	window    int // most requests in unended batches
	inflight  int // requests in unended batches (and unresolved intents)
	creating  int // chunks whose create is unresolved: at most one is new
	paused    time.Time
	dead      bool
	failures  int // consecutive ambiguous create failures
	// primed is, per shared prefix (call.Request.CachePrefix), when the
	// org's prompt cache is to be primed again (prime.go).
	primed map[uint64]time.Time
	// seeds is, per shared prefix, whether a batch has warmed it here
	// (seed.go).
	seeds    map[uint64]*seed
	createMu sync.Mutex
}

// key returns the org's first live key that is neither suspect nor
// retired, else its first suspect one (which its next call re-probes),
// else a retired one (removed from the key sources: it still polls and
// harvests the batches in flight, it creates none — see creatable), or nil
// when it has none. Requires Runner.mu.
func (o *orgState) key() *keys.Key {
	var suspect, retired *keys.Key
	for _, k := range o.keys {
		if dead, _ := k.Dead(); dead {
			continue
		}
		switch {
		case k.Retired():
			if retired == nil {
				retired = k
			}
		case !k.Suspect(keys.AllPools):
			return k
		case suspect == nil:
			suspect = k
		}
	}
	if suspect != nil {
		return suspect
	}
	return retired
}

// creatable reports whether o has a live key that is not retired: new
// batches go only there. Requires Runner.mu.
func (o *orgState) creatable() bool {
	for _, k := range o.keys {
		if dead, _ := k.Dead(); !dead && !k.Retired() {
			return true
		}
	}
	return false
}

// chunk is one batch: its requests and where it is in its life. The
// lifecycle fields are owned by the chunk's goroutine; the rest is guarded
// by Runner.mu.
type chunk struct {
	id        string
	org       *orgState
	ids       []string
	hashes    []string
	index     map[string]int
	list      []*call.Request // new chunks: the requests, in body order
	wire      string          // the wire-id prefix ("": the caller's ids), see wireIDLen
	bytes     int64
	recovered bool
	journaled bool // an intent is in the journal

	// lifecycle (the chunk's goroutine; read by others only after it ends)
	intentAt time.Time
	// createdBy bounds the creation of this chunk's batch from above: when
	// this run's failed create returned, or, for a resumed intent, when
	// this run opened the journal (the create ended with the process).
	createdBy time.Time
	batch     string
	created   time.Time
	expires   time.Time
	adopted   bool // found in the org's list: maybe not sluice's, never cancelled
	cancelAt  time.Time
	canceled  bool // the cancel was accepted
	fresh     bool // created by this run: the first poll waits
	// seedFor: the shared prefixes this chunk seeds, one request each
	// (seed.go); nil for every other chunk.
	seedFor []uint64
	// plain: indices of requests sent without their added breakpoint
	// (seed.go), journaled with the intent.
	plain    []int
	rerouted bool // abandoned to the sync path (not requeued)

	// guarded by Runner.mu
	reqs       map[string]*call.Request // attached requests
	handled    map[string]bool          // ids whose outcome is decided in this chunk
	stale      map[string]bool          // submitted with other params: drop the row
	waiting    int                      // attached requests without an outcome
	unattached int                      // ids in Runner.recovered
	awaiting   int                      // rows delivered, not yet durable
	parkedN    int
	inWindow   bool
	resolving  bool // counts in org.creating
	harvested  bool // every row processed
	closed     bool // a terminal journal record is written
	finished   bool // this run is done with it
	keepOpen   bool // given up but left open in the journal for a resume
	foreign    bool // its adopted batch proved another's (counted once)
}

func (c *chunk) n() int { return len(c.ids) }

// parkedRow is a harvested row of a recovered chunk whose request has not
// been submitted yet.
type parkedRow struct {
	c    *chunk
	row  *resultRow
	hash string
}

// Stats is a snapshot of the batch path.
type Stats struct {
	Submitted int64 // requests accepted by Submit (held ones aside)
	Results   int64 // OnResult calls
	Rerouted  int64 // OnReroute calls
	Pending   int   // requests not yet in a chunk
	// Held is the requests held back: their journaled batch belongs to an
	// org no usable key reaches (see Holds).
	Held int
	// Batches created, adopted after a crash or an ambiguous create,
	// ended, cancelled by sluice, and given up (re-routed).
	Created, Adopted, Ended, Cancelled, GivenUp int64
	// Foreign is the adopted batches whose results showed them another's
	// (other custom_ids, or answers from another model): nothing was
	// harvested from them and their chunks were re-driven.
	Foreign int64
	// Primed counts the sync primers that wrote a shared prefix into an
	// org's prompt cache before its batches; PrimeFailed those that got no
	// answer (the batch was created anyway).
	Primed, PrimeFailed int64
	// Seeds counts the seed batches created (one request per shared
	// prefix, to warm an organization's cache before its other chunks of
	// those prefixes: seed.go); AsWritten the requests whose added
	// breakpoint was taken off because their organization's cache was not
	// batch-warm (a resumed run counts those of its recovered chunks).
	Seeds, AsWritten int64
	// InFlight is, per org label, the requests in unended batches.
	InFlight map[string]int
	// Turnaround is, per org label, the batches that ended without being
	// cancelled and their create-to-end times by the API's own clock
	// (created_at to ended_at): what the planner's queue model is checked
	// against (package observe records it).
	Turnaround map[string]Turnaround
}

// Turnaround sums one organization's ended batches.
type Turnaround struct {
	OrgID    string
	Batches  int64
	Requests int64   // in those batches
	Seconds  float64 // their create-to-end times, summed
}

// New opens the journal, recovers the chunks it leaves open, and returns a
// Runner ready to Run.
func New(cfg Config) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg: cfg, log: cfg.Logger,
		byOrg:     map[string]*orgState{},
		recovered: map[string]*chunk{}, parked: map[string]*parkedRow{},
		durWait: map[string]*chunk{}, claimed: map[string]bool{},
		heldBack: map[string]string{}, holds: map[string]bool{}, warned: map[string]bool{}, byteCap: cfg.MaxChunkBytes,
		space: make(chan struct{}), kick: make(chan struct{}, 1), bgKick: make(chan struct{}, 1), cancelled: make(chan struct{}),
	}
	for _, k := range cfg.Keys {
		if dead, _ := k.Dead(); dead {
			continue
		}
		id := k.Org()
		if id == "" {
			return nil, fmt.Errorf("batch: key %s has no organization; run dispatch.Discover first", k)
		}
		if strings.HasPrefix(id, ProvisionalOrgPrefix) {
			// Its real org is unknown: batches created with it could not
			// be matched to a journal, nor journaled ones reached.
			r.log.Info("batch: key's organization is unknown; it is not used for batches", "key", k)
			continue
		}
		o := r.byOrg[id]
		if o == nil {
			o = &orgState{id: id, label: k.Label(), primed: map[uint64]time.Time{}, seeds: map[uint64]*seed{}}
			r.byOrg[id] = o
			r.orgs = append(r.orgs, o)
		}
		o.keys = append(o.keys, k)
	}
	if len(r.orgs) == 0 {
		r.log.Warn("batch: no key with a known organization; requests are re-routed to sync and journaled batches held back")
	}
	sort.Slice(r.orgs, func(i, j int) bool { return r.orgs[i].label < r.orgs[j].label })
	widest := 0
	for _, o := range r.orgs {
		o.window = cfg.WindowPerOrg
		if w := cfg.WindowByOrg[o.label]; w > 0 {
			o.window = w
		}
		widest = max(widest, o.window)
	}
	r.target = cfg.ChunkSize
	if widest > 0 {
		r.target = min(r.target, widest)
	}
	r.maxPen = 2 * r.target

	j, order, entries, err := openJournal(cfg.Journal, cfg.NoSync)
	if err != nil {
		return nil, err
	}
	r.j = j
	j.notify = chunkEvents(cfg.Events, entries) // the history's batch events (events.go)
	now := cfg.Now()
	r.runID = strconv.FormatInt(now.UnixNano(), 36) + "-" + strconv.FormatUint(uint64(rand.Uint32()), 36)
	r.target -= fingerprint(r.runID, r.target)
	if err := j.append(record{Op: opRun, V: journalVersion, At: now}, false); err != nil {
		j.close()
		return nil, err
	}
	for _, id := range order {
		if err := r.recover(id, entries[id], now); err != nil {
			j.close()
			return nil, err
		}
	}
	return r, nil
}

// recover turns an open journal entry into a chunk of this run.
func (r *Runner) recover(id string, e *entry, now time.Time) error {
	if e.batch != "" {
		r.claimed[e.batch] = true
	}
	if e.closed {
		return nil
	}
	in := e.intent
	todo := 0
	for _, cid := range in.IDs {
		if !r.cfg.Done(cid) {
			todo++
		}
	}
	if todo == 0 {
		return r.j.append(record{Op: opDropped, Chunk: id, At: now, Why: "every request is done"}, false)
	}
	o := r.byOrg[in.Org]
	if o == nil && e.batch == "" {
		// The journal never saw the batch created: the chunk is closed and
		// its requests start afresh. Were the create to have reached the
		// API after all (a crash right after it), they are paid twice.
		r.log.Warn("batch: a journaled create on an organization no usable key reaches was never confirmed; its requests are sent again",
			"chunk", id, "org", in.OrgLabel, "requests", todo)
		return r.j.append(record{Op: opAbandoned, Chunk: id, At: now,
			Why: "organization unreachable and no batch recorded"}, true)
	}
	if o == nil {
		// The batch exists and may be running: its requests wait for a
		// run with a key of its org rather than be paid twice.
		r.log.Warn("batch: a journaled batch belongs to an organization no usable key reaches; its requests are held back for a run with a key of that organization",
			"chunk", id, "org", in.OrgLabel, "batch", e.batch, "requests", todo)
		for i, cid := range in.IDs {
			if !r.cfg.Done(cid) {
				r.heldBack[cid] = in.Params[i]
				r.holds[cid] = true
			}
		}
		return nil
	}
	c := &chunk{
		id: id, org: o, ids: in.IDs, hashes: in.Params, index: make(map[string]int, len(in.IDs)), wire: in.Wire,
		bytes: in.Bytes, recovered: true, journaled: true, adopted: e.adopted, plain: in.Plain,
		intentAt: in.At, batch: e.batch, created: e.created, expires: e.expires,
		cancelAt: e.cancelAt, canceled: e.canceled,
		// Its create, if any, was the dead process's: before now.
		createdBy: now,
		reqs:      map[string]*call.Request{}, handled: map[string]bool{}, stale: map[string]bool{},
	}
	for i, cid := range in.IDs {
		c.index[cid] = i
		if r.cfg.Done(cid) {
			c.handled[cid] = true
			continue
		}
		r.recovered[cid] = c
		r.holds[cid] = true
		c.unattached++
	}
	c.inWindow = true
	o.inflight += c.n()
	if c.batch == "" {
		c.resolving = true
		o.creating++
	}
	r.open = append(r.open, c)
	r.log.Info("batch: resuming a journaled chunk", "chunk", id, "org", o.label, "batch", c.batch, "requests", c.n(), "to_do", todo)
	return nil
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

// Submit hands req to the batch path. It blocks while enough requests wait
// to be cut into chunks, and returns ErrStopped after CloseInput or once
// the Runner stopped. A request whose id a resumed chunk carries, with the
// same params hash, joins that chunk instead of a new one; one whose id is
// held back (see Holds) with the same params hash is accepted and gets no
// callback in this run.
func (r *Runner) Submit(ctx context.Context, req *call.Request) error {
	size := itemSize(req)
	r.mu.Lock()
	if r.inputClosed || r.stopped {
		r.mu.Unlock()
		return ErrStopped
	}
	id := req.ID
	if h, ok := r.heldBack[id]; ok && h == req.ParamsHash {
		r.mu.Unlock()
		return nil
	}
	r.outstanding++
	if p := r.parked[id]; p != nil {
		delete(r.parked, id)
		c := p.c
		c.parkedN--
		if p.hash == req.ParamsHash {
			r.stats.Submitted++
			r.asJournaled(c, req)
			c.reqs[id] = req
			c.waiting++
			r.mu.Unlock()
			r.deliverRow(c, req, p.row)
			r.mu.Lock()
			r.maybeClose(c)
			r.mu.Unlock()
			return nil
		}
		r.maybeClose(c)
	} else if c := r.recovered[id]; c != nil {
		delete(r.recovered, id)
		c.unattached--
		if c.hashes[c.index[id]] == req.ParamsHash {
			r.stats.Submitted++
			r.asJournaled(c, req)
			c.reqs[id] = req
			c.waiting++
			r.mu.Unlock()
			return nil
		}
		// The request changed since the chunk was journaled: the batch's
		// row answers the old one.
		c.stale[id] = true
		c.handled[id] = true
	}
	if size+int64(envelope) > r.cfg.MaxChunkBytes {
		r.stats.Submitted++
		r.mu.Unlock()
		r.emitReroute(nil, req, fmt.Sprintf("request of %d bytes is larger than a batch may be", size))
		return nil
	}
	if why := r.noBatch(r.now()); why != "" {
		r.stats.Submitted++
		r.mu.Unlock()
		r.emitReroute(nil, req, why)
		return nil
	}
	for len(r.pending) >= r.maxPen {
		ch := r.space
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			// Not submitted: it counts nowhere.
			r.mu.Lock()
			r.outstanding--
			r.mu.Unlock()
			r.poke()
			return ctx.Err()
		}
		r.mu.Lock()
		if r.stopped {
			r.outstanding--
			r.mu.Unlock()
			return ErrStopped
		}
	}
	r.stats.Submitted++
	r.pending = append(r.pending, req)
	r.sizes = append(r.sizes, size)
	r.cutNow = false
	r.mu.Unlock()
	r.poke()
	return nil
}

// CutWaiting cuts the requests waiting now into a chunk, short or not: the
// feeder has paused (a run that may re-plan ends a pass over its input
// but not the input), and they should not wait for a full chunk that may
// never come. A later Submit waits for a full chunk again.
func (r *Runner) CutWaiting() {
	r.mu.Lock()
	r.cutNow = len(r.pending) > 0
	r.mu.Unlock()
	r.poke()
}

// Cancel is for a caller that no longer wants the answers (a cancelled
// virtual batch), not for a stop that will resume (that is Run's ctx):
// no batch is created any more, the requests waiting to be cut into one
// and any submitted later are given back through OnReroute with why
// (except a request a resumed chunk carries: it joins that chunk), and
// each batch running is cancelled at once — its ended rows are harvested
// as usual, the rest come back through OnReroute. A batch adopted through
// the list may be a colleague's and is never cancelled. Safe to call
// more than once and from any goroutine; the first why counts.
func (r *Runner) Cancel(why string) {
	r.mu.Lock()
	if r.cancelWhy == "" {
		if why == "" {
			why = "cancelled"
		}
		r.cancelWhy = why
		close(r.cancelled)
	}
	r.mu.Unlock()
	r.poke()
}

// cancelReason is Cancel's why, or "". Takes r.mu.
func (r *Runner) cancelReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelWhy
}

// StopInput says no more requests will be submitted because the input was
// not fed to its end (an interrupt, a halt, a write error): a partial chunk
// may be cut, but the rows of resumed chunks whose requests never came are
// still the next run's — those chunks stay open in the journal, never
// recorded harvested (closing them made the next run batch, and pay for,
// their requests again).
func (r *Runner) StopInput() { r.endInput(true) }

// CloseInput says the whole input was submitted: a partial chunk may be
// cut, and rows of resumed chunks whose requests were not submitted are
// not wanted (the input no longer holds them).
func (r *Runner) CloseInput() { r.endInput(false) }

// endInput ends the input; keep leaves resumed chunks with unsubmitted
// requests open for the next run instead of closing them.
func (r *Runner) endInput(keep bool) {
	r.mu.Lock()
	if !r.inputClosed {
		r.inputClosed = true
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
	r.mu.Unlock()
	r.poke()
}

// Durable reports that the results of ids are on disk (results.Options
// OnDurable). Once every row a batch delivered is durable, the journal
// records it harvested and a resume will not download it again. Ids the
// batch path did not deliver are ignored. It never waits on the journal:
// the ids are queued for the Runner's own goroutine (or Close).
func (r *Runner) Durable(ids []string) {
	if len(ids) == 0 {
		return
	}
	r.bgMu.Lock()
	r.bgIDs = append(r.bgIDs, ids...)
	r.bgMu.Unlock()
	r.bgPoke()
}

// queueRecord queues an unsynced journal record for the background
// writer, so that nobody holding mu waits on the journal. Any lock may be
// held.
func (r *Runner) queueRecord(rec record) {
	r.bgMu.Lock()
	r.bgRecs = append(r.bgRecs, rec)
	r.bgMu.Unlock()
	r.bgPoke()
}

func (r *Runner) bgPoke() {
	select {
	case r.bgKick <- struct{}{}:
	default:
	}
}

// background flushes whenever Durable or queueRecord queued work, until
// stop is closed; then it flushes once more and closes done.
func (r *Runner) background(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-r.bgKick:
			r.flush()
		case <-stop:
			r.flush()
			return
		}
	}
}

// flush applies the queued durable ids and writes the queued records.
func (r *Runner) flush() {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	for {
		r.bgMu.Lock()
		ids := r.bgIDs
		r.bgIDs = nil
		r.bgMu.Unlock()
		if len(ids) > 0 {
			r.mu.Lock()
			for _, id := range ids {
				c := r.durWait[id]
				if c == nil {
					continue
				}
				delete(r.durWait, id)
				c.awaiting--
				r.maybeClose(c)
			}
			r.mu.Unlock()
		}
		r.bgMu.Lock()
		recs := r.bgRecs
		r.bgRecs = nil
		r.bgMu.Unlock()
		for _, rec := range recs {
			// Not synced: a lost harvested or dropped record costs one
			// more download on resume, whose rows of done ids are skipped.
			if err := r.j.append(rec, false); err != nil && !errors.Is(err, errCrash) {
				r.log.Warn("batch: journal", "err", err)
			}
		}
		if len(ids) == 0 && len(recs) == 0 {
			return
		}
	}
}

// Close applies the Durable calls still queued and closes the journal.
// Call it after Run has returned and after the last Durable call.
func (r *Runner) Close() error {
	r.flush()
	return r.j.close()
}

// Stats returns a snapshot.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Pending = len(r.pending)
	s.Held = len(r.heldBack)
	s.InFlight = map[string]int{}
	for _, o := range r.orgs {
		s.InFlight[o.label] = o.inflight
	}
	s.Turnaround = maps.Clone(r.stats.Turnaround)
	return s
}

// Run drives every submitted request to its outcome. It returns nil once
// the input is closed and every request has had its callback; the
// context's cause when ctx ends first (batches keep running on the API and
// a resume harvests them); or the error that stopped it (the journal).
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("batch: Run called twice")
	}
	r.started = true
	r.ctx, r.cancel = context.WithCancelCause(ctx)
	r.pollCtx, r.stopPolls = context.WithCancelCause(r.ctx)
	for _, c := range r.open {
		r.launch(c)
	}
	r.mu.Unlock()
	bgStop, bgDone := make(chan struct{}), make(chan struct{})
	go r.background(bgStop, bgDone)
	defer func() {
		close(bgStop)
		<-bgDone
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	normal := false
	for {
		r.mu.Lock()
		if r.fatal != nil {
			r.mu.Unlock()
			break
		}
		launch, reroute, why, wake := r.schedule(r.cfg.Now())
		for _, c := range launch {
			r.launch(c)
		}
		done := r.inputClosed && r.outstanding == 0
		r.mu.Unlock()
		for _, req := range reroute {
			r.emitReroute(nil, req, why)
		}
		if len(reroute) > 0 {
			continue
		}
		if done {
			normal = true
			break
		}
		d := time.Hour
		if !wake.IsZero() {
			d = max(wake.Sub(r.cfg.Now()), time.Millisecond)
		}
		timer.Reset(d)
		select {
		case <-r.kick:
		case <-timer.C:
		case <-r.ctx.Done():
		}
		if r.ctx.Err() != nil {
			break
		}
	}

	r.mu.Lock()
	r.stopped = true
	close(r.space)
	r.space = make(chan struct{})
	r.mu.Unlock()
	r.stopPolls(errFinished)
	r.wg.Wait()
	r.cancel(errFinished)

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal != nil {
		return r.fatal
	}
	if !normal {
		return context.Cause(ctx)
	}
	// Chunks nobody waits for: closed once their delivered rows are durable.
	for _, c := range r.open {
		c.finished = true
		r.maybeClose(c)
	}
	return nil
}

// launch starts the goroutine of c. Requires r.mu.
func (r *Runner) launch(c *chunk) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		err := r.lifecycle(c)
		r.seedEnded(c)
		if err == nil || errors.Is(err, errFinished) || r.ctx.Err() != nil {
			return // done, or stopped from outside
		}
		r.fail(err)
	}()
}

// fail stops the Runner for good: a journal failure or a simulated crash.
func (r *Runner) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
		r.dead.Store(true)
		if errors.Is(err, errCrash) {
			r.j.freeze()
		}
		r.log.Error("batch: stopping", "err", err)
	}
	r.mu.Unlock()
	r.cancel(err)
	r.poke()
}

// crash reports whether a test asked for a crash at point, and if so
// freezes the journal.
func (r *Runner) crash(point string) bool {
	if r.crashAt == nil || !r.crashAt(point) {
		return false
	}
	r.j.freeze()
	r.dead.Store(true)
	return true
}

func (r *Runner) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// schedule cuts chunks from the pending requests onto the orgs with the
// most free window, and returns the chunks to launch, the requests to
// re-route (no org left, HarvestOnly, or too close to Config.Deadline) and
// why, and when to look again. Requires r.mu.
func (r *Runner) schedule(now time.Time) (launch []*chunk, reroute []*call.Request, why string, wake time.Time) {
	shrank := false
	defer func() {
		if shrank {
			close(r.space)
			r.space = make(chan struct{})
		}
	}()
	for len(r.pending) > 0 {
		if why := r.noBatch(now); why != "" {
			reroute = r.pending
			r.pending, r.sizes = nil, nil
			shrank = true
			return nil, reroute, why, time.Time{}
		}
		n, body := fit(r.pending, r.sizes, r.target, r.byteCap)
		if n == len(r.pending) && n < r.target && !r.inputClosed && !r.cutNow {
			break // wait for a full chunk
		}
		if seeds := r.cutSeeds(now, r.chunkPrefixes(len(r.pending)), &wake); len(seeds) > 0 {
			launch = append(launch, seeds...)
			shrank = true
			continue // the pending requests moved: fit again
		}
		o := r.pickOrg(n, now, r.chunkPrefixes(n), &wake)
		if o == nil {
			break
		}
		launch = append(launch, r.cut(n, body, o))
		shrank = true
	}
	// Requests still waiting are re-routed when creates stop.
	if co := r.cutoff(); len(r.pending) > 0 && !co.IsZero() && (wake.IsZero() || co.Before(wake)) {
		wake = co
	}
	return launch, nil, "", wake
}

// cutoff is when creating batches stops: Config.Deadline less the
// predicted turnaround of one batch. Zero without a deadline.
func (r *Runner) cutoff() time.Time {
	if r.cfg.Deadline.IsZero() {
		return time.Time{}
	}
	return r.cfg.Deadline.Add(-max(r.cfg.Turnaround, 0))
}

// noBatch says why a request cannot go into a new batch now, or "".
// Requires r.mu.
func (r *Runner) noBatch(now time.Time) string {
	switch {
	case r.cancelWhy != "":
		return r.cancelWhy
	case r.cfg.HarvestOnly:
		return "this run only finishes journaled batches"
	case r.noLiveOrg():
		return "no organization can take batches"
	}
	if co := r.cutoff(); !co.IsZero() && !now.Before(co) {
		if r.cfg.Turnaround > 0 {
			return fmt.Sprintf("a batch created now would not end by the deadline (turnaround %v)", r.cfg.Turnaround)
		}
		return "the deadline has passed"
	}
	return ""
}

// warnOnce logs a warning the first time its key is seen. Requires r.mu.
func (r *Runner) warnOnce(key, msg string, args ...any) {
	if r.warned[key] {
		return
	}
	r.warned[key] = true
	r.log.Warn(msg, args...)
}

// pickOrg returns the live org with the most free window that can take n
// requests now, has no create unresolved and holds none of the chunk's
// shared prefixes for a seed (seed.go), and moves wake to when one may
// become free. Requires r.mu.
func (r *Runner) pickOrg(n int, now time.Time, prefixes func() []uint64, wake *time.Time) *orgState {
	var best *orgState
	for _, o := range r.orgs {
		if !r.ready(o, n, now, wake) || r.seedHolds(o, prefixes(), now, wake) {
			continue
		}
		if best == nil || o.inflight < best.inflight {
			best = o
		}
	}
	return best
}

// ready reports whether o can have a chunk of n requests created now, and
// moves wake to the end of its pause. Requires r.mu.
func (r *Runner) ready(o *orgState, n int, now time.Time, wake *time.Time) bool {
	if o.dead || o.creating > 0 || o.window-o.inflight < n {
		return false
	}
	if o.key() == nil {
		r.orgDead(o, "no live key")
		return false
	}
	if !o.creatable() {
		return false // its keys left the run: it finishes its batches, starts none
	}
	if now.Before(o.paused) {
		if wake.IsZero() || o.paused.Before(*wake) {
			*wake = o.paused
		}
		return false
	}
	return true
}

// noLiveOrg reports whether every org's batch path is dead. Requires r.mu.
func (r *Runner) noLiveOrg() bool {
	for _, o := range r.orgs {
		if !o.dead && o.key() != nil {
			return false
		}
	}
	return true
}

// orgDead ends an org's batch path for this run. Requires r.mu.
func (r *Runner) orgDead(o *orgState, why string) {
	if o.dead {
		return
	}
	o.dead = true
	r.log.Warn("batch: organization can no longer take batches; its requests move", "org", o.label, "reason", why)
}

// AddKeys adds keys to a running Runner (a rotation): a key of an org the
// runner batches on joins it; a key of an org it does not know serves the
// sync path only until the next run (logged). A key is taken out by
// retiring it (keys.Key.Retire): the runner's next call uses another.
func (r *Runner) AddKeys(_ context.Context, ks []*keys.Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.poke()
	for _, k := range ks {
		var to *orgState
		for _, o := range r.orgs {
			if o.id == k.Org() {
				to = o
			}
		}
		switch {
		case to == nil:
			r.log.Info("batch: a new key's organization is not on the batch path of this run; it serves sync requests", "key", k)
		case !slices.Contains(to.keys, k):
			to.keys = append(to.keys, k)
			if to.dead {
				to.dead = false // a live key again: new chunks may go there
				r.log.Info("batch: organization takes batches again (a new key)", "org", to.label, "key", k)
			}
		}
	}
	return nil
}

// fingerprint is how many requests fewer than the target this run's chunks
// hold: a number in [0, target/16) drawn from the run id. A batch whose
// create answer was lost is found again by its request count (the list
// shows nothing else of it), and every job with the default chunk size
// would otherwise make batches of exactly 500: another job's batch created
// in the same seconds on the same org would match. With the spread, it
// matches one time in 31 at the default size, and harvest's check of the
// adopted batch (exactly the chunk's ids, answers from the chunk's models)
// still stands behind that.
func fingerprint(runID string, target int) int {
	spread := target / 16
	if spread <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(runID))
	return int(h.Sum32() % uint32(spread))
}

// cut makes a chunk of the first n pending requests on o and reserves its
// window. Requires r.mu.
func (r *Runner) cut(n int, body int64, o *orgState) *chunk {
	reqs := r.pending[:n:n]
	r.pending = r.pending[n:]
	r.sizes = r.sizes[n:]
	r.seq++
	c := &chunk{
		id: fmt.Sprintf("%s-%d", r.runID, r.seq), org: o, list: reqs, bytes: body,
		wire: wirePrefix(fmt.Sprintf("%s-%d", r.runID, r.seq)),
		ids:  make([]string, n), hashes: make([]string, n), index: make(map[string]int, n),
		reqs: make(map[string]*call.Request, n), handled: map[string]bool{}, stale: map[string]bool{},
		waiting: n, inWindow: true, resolving: true, fresh: true,
	}
	for i, q := range reqs {
		c.ids[i], c.hashes[i], c.index[q.ID], c.reqs[q.ID] = q.ID, q.ParamsHash, i, q
	}
	o.inflight += n
	o.creating++
	r.open = append(r.open, c)
	return c
}

// release frees c's window. Requires r.mu.
func (r *Runner) release(c *chunk) {
	if c.inWindow {
		c.inWindow = false
		c.org.inflight -= c.n()
	}
}

// resolved marks c's create resolved (created, adopted or abandoned).
func (r *Runner) resolved(c *chunk) {
	r.mu.Lock()
	if c.resolving {
		c.resolving = false
		c.org.creating--
	}
	r.mu.Unlock()
	r.poke()
}

// wanted reports whether anyone still waits for a row of c. Requires r.mu.
func (r *Runner) wanted(c *chunk) bool {
	return c.waiting > 0 || (!r.inputClosed && c.unattached > 0)
}

// maybeClose writes c's harvested record once every row it delivered is
// durable and none is parked. Requires r.mu.
func (r *Runner) maybeClose(c *chunk) {
	if c.closed || c.keepOpen || !(c.harvested || c.finished) || c.awaiting > 0 || c.parkedN > 0 {
		return
	}
	if c.finished && !c.harvested && c.batch == "" && !c.recovered {
		return // never journaled, or an intent a resume must reconcile
	}
	c.closed = true
	op, why := opHarvested, ""
	if !c.harvested {
		op, why = opDropped, "no request of the chunk is wanted any more"
	}
	// Written by the background writer, unsynced: see flush.
	r.queueRecord(record{Op: op, Chunk: c.id, At: r.cfg.Now(), Batch: c.batch, Why: why})
}

// requeue puts c's attached requests without an outcome back at the front
// of the pending queue and frees its unattached ids. Requires r.mu.
func (r *Runner) requeue(c *chunk) {
	var back []*call.Request
	for _, id := range c.ids {
		if q := c.reqs[id]; q != nil && !c.handled[id] {
			c.handled[id] = true
			back = append(back, q)
		}
	}
	r.freeUnattached(c)
	c.waiting -= len(back)
	sizes := make([]int64, len(back))
	for i, q := range back {
		sizes[i] = itemSize(q)
	}
	r.pending = append(back, r.pending...)
	r.sizes = append(sizes, r.sizes...)
}

// freeUnattached forgets c's ids that were not submitted: a later Submit
// of one starts afresh. Requires r.mu.
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

// takeUnhandled marks c's attached requests without an outcome handled and
// returns them. Requires r.mu.
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

// emitResult delivers res. The outcome counts only after the callback
// returned, so Run cannot return while a callback runs.
func (r *Runner) emitResult(c *chunk, res Result) {
	if r.dead.Load() {
		return
	}
	id := res.Request.ID
	r.mu.Lock()
	if c != nil {
		c.awaiting++
		r.durWait[id] = c
	}
	r.mu.Unlock()
	r.cbMu.Lock()
	r.cfg.OnResult(res)
	r.cbMu.Unlock()
	r.mu.Lock()
	r.stats.Results++
	r.done(c)
	r.mu.Unlock()
}

// emitReroute gives req back for the sync path.
func (r *Runner) emitReroute(c *chunk, req *call.Request, why string) {
	if r.dead.Load() {
		return
	}
	r.cbMu.Lock()
	r.cfg.OnReroute(req, why)
	r.cbMu.Unlock()
	r.mu.Lock()
	r.stats.Rerouted++
	r.done(c)
	r.mu.Unlock()
}

// done counts one outcome. Requires r.mu.
func (r *Runner) done(c *chunk) {
	if c != nil {
		c.waiting--
	}
	r.outstanding--
	if r.outstanding == 0 {
		r.poke()
	}
}

// now is the injected clock.
func (r *Runner) now() time.Time { return r.cfg.Now() }

// total is a batch's request count.
func total(c api.RequestCounts) int {
	return int(c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired)
}
