package plan

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// The batch model: the job is cut into chunks (batches) of at most Chunk
// requests, spread over organizations so that each org's share is
// proportional to its processing rate, with at most Window batches in
// flight (created, not ended) per org: a new batch is created when one
// ends. Each org's queue is then simulated event by event, as the
// simulator runs it: a batch starts its admission delay after create, the
// org processes one started batch at a time at its processing rate, the
// earliest started first. The route's wall-clock is the last end plus the
// batch overhead.

// Chunking rules, with their provenance in docs/plan.md.
const (
	// MaxBatchRequests is the API's limit on requests per batch.
	MaxBatchRequests = api.MaxBatchRequests
	// ChunkTarget is the preferred batch size: 500-request batches were
	// observed to end in about 5 minutes; 8,000-request ones starved.
	ChunkTarget = 500
	// MinChunk is the smallest batch the planner cuts a job into (a job of
	// fewer requests is one batch).
	MinChunk = 100
	// chunkStarveDivisor keeps a batch to a tenth of the starvation size,
	// and of the queue cap.
	chunkStarveDivisor = 10
	// windowShare keeps the requests in flight per org to half the
	// starvation size and half the queue cap: whether starvation follows
	// batch size or queue depth was never established, and colleagues
	// share the queue.
	windowShare = 0.5
	// batchSpread is how uncertain the batch queue is: the low end of the
	// range halves every delay and doubles the processing rate, the high
	// end the reverse.
	batchSpread = 2.0
	// DefaultStuckFactor: a batch with no end this many times its
	// predicted create-to-end time past its create is stuck.
	DefaultStuckFactor = 3.0
)

// BatchRun is the batch queue model's prediction for one job.
type BatchRun struct {
	N, Chunk int
	Orgs     []BatchOrg
	// End is when the last batch ends, from the first create (no
	// overhead).
	End time.Duration
	// MaxTurnaround is the longest create-to-end time of one batch.
	MaxTurnaround time.Duration
	// Expired counts batches that would reach their expiry before ending.
	Expired int
	// Binding is what bounds End: BindProcessing, BindAdmission,
	// BindStarvation (a batch above the starvation size) or BindWindow
	// (the window was capped below what keeps the queue busy).
	Binding string
}

// WindowRequests is the most requests in flight on any one organization,
// Window · Chunk.
func (r BatchRun) WindowRequests() int {
	w := 0
	for _, o := range r.Orgs {
		w = max(w, o.Window*r.Chunk)
	}
	return w
}

// MinWindowRequests is the smallest organization window in requests: the
// window for an organization the plan did not size, so it stays under
// every sized organization's queue cap.
func (r BatchRun) MinWindowRequests() int {
	w := 0
	for _, o := range r.Orgs {
		if n := o.Window * r.Chunk; n > 0 && (w == 0 || n < w) {
			w = n
		}
	}
	return w
}

// WindowByOrg is each organization's window in requests (Window · Chunk),
// by organization name: each stays under that organization's queue cap.
func (r BatchRun) WindowByOrg() map[string]int {
	m := make(map[string]int, len(r.Orgs))
	for _, o := range r.Orgs {
		m[o.Org] = o.Window * r.Chunk
	}
	return m
}

// BatchOrg is one organization's share of a batch run.
type BatchOrg struct {
	Org      string
	Requests int
	Batches  int
	// Window is the most batches in flight at once on this org; Window ·
	// Chunk requests stay under half the queue cap and half the
	// starvation size unless the caller forced them.
	Window int
	End    time.Duration
}

// batchOrgModel is one org's queue as the planner uses it.
type batchOrgModel struct {
	name     string
	model    BatchModel
	queueCap int
}

func batchOrgs(w World) []batchOrgModel {
	var bs []batchOrgModel
	for _, o := range w.Orgs {
		bs = append(bs, batchOrgModel{name: o.Name, model: w.batchModel(o), queueCap: o.BatchQueueCap})
	}
	// The fastest queues first; ties keep the world's order.
	sort.SliceStable(bs, func(a, b int) bool { return bs[a].model.ProcessingRate > bs[b].model.ProcessingRate })
	return bs
}

// chunkFor is the chunk size for n requests over orgs: spread the job over
// every org, but no batch below MinChunk (or n), none above ChunkTarget,
// MaxBatchRequests, a tenth of any org's starvation size or queue cap.
func chunkFor(n int, orgs []batchOrgModel) int {
	hi := min(ChunkTarget, MaxBatchRequests)
	for _, o := range orgs {
		if s := o.model.StarveAbove; s > 0 {
			hi = min(hi, max(1, s/chunkStarveDivisor))
		}
		if q := o.queueCap; q > 0 {
			hi = min(hi, max(1, q/chunkStarveDivisor))
		}
	}
	c := ceilDiv(n, len(orgs))
	c = max(c, min(n, MinChunk))
	return max(1, min(c, hi))
}

// windowFor is the batches in flight per org for chunk c: enough that the
// queue never idles (while one batch is processed, the next ones finish
// their admission: 1 + rate · admission ÷ c, plus one spare), but at most
// what keeps window · c under half the starvation size and half the queue
// cap. capped reports that the cap, not the need, set it.
func windowFor(o batchOrgModel, c int) (k int, capped bool) {
	need := int(math.Ceil(1+o.model.ProcessingRate*o.model.admission(c)/float64(c))) + 1
	limit := math.MaxInt
	if s := o.model.StarveAbove; s > 0 {
		limit = min(limit, int(windowShare*float64(s))/c)
	}
	if q := o.queueCap; q > 0 {
		limit = min(limit, int(windowShare*float64(q))/c)
	}
	limit = max(limit, 1)
	if need > limit {
		return limit, true
	}
	return need, false
}

// batchInput is a batch run to simulate: chunk sizes per org and windows.
type batchInput struct {
	orgs    []batchOrgModel
	sizes   [][]int // per org, in create order
	windows []int
	chunk   int
	capped  bool // some window was capped below the need
	poll    Poll // when the batch path sees a batch's end
}

// layout cuts n requests into chunks of c and deals them to the first
// orgs greedily: each chunk to the org that would finish its share
// soonest at its processing rate. window > 0 forces the window.
func layout(n, c, window int, orgs []batchOrgModel, poll Poll) batchInput {
	m := ceilDiv(n, c)
	orgs = orgs[:min(len(orgs), m)]
	in := batchInput{orgs: orgs, sizes: make([][]int, len(orgs)), windows: make([]int, len(orgs)), chunk: c, poll: poll}
	load := make([]int, len(orgs))
	for i := range m {
		size := min(c, n-i*c)
		best := 0
		for o := 1; o < len(orgs); o++ {
			if float64(load[o]+size)/orgs[o].model.ProcessingRate < float64(load[best]+size)/orgs[best].model.ProcessingRate {
				best = o
			}
		}
		load[best] += size
		in.sizes[best] = append(in.sizes[best], size)
	}
	for o := range orgs {
		k, capped := windowFor(orgs[o], c)
		if window > 0 {
			k, capped = window, false
		}
		in.windows[o] = min(k, max(1, len(in.sizes[o])))
		in.capped = in.capped || capped
	}
	return in
}

// simulate runs every org's queue with delays × df and rates × rf.
func (in batchInput) simulate(df, rf float64) BatchRun {
	r := BatchRun{Chunk: in.chunk}
	for o, org := range in.orgs {
		end, turn, expired := runQueue(org.model, in.poll, in.sizes[o], in.windows[o], df, rf)
		reqs := 0
		for _, s := range in.sizes[o] {
			reqs += s
		}
		r.N += reqs
		r.Orgs = append(r.Orgs, BatchOrg{Org: org.name, Requests: reqs, Batches: len(in.sizes[o]), Window: in.windows[o], End: seconds(end)})
		r.End = max(r.End, seconds(end))
		r.MaxTurnaround = max(r.MaxTurnaround, seconds(turn))
		r.Expired += expired
	}
	r.Binding = in.binding()
	return r
}

// binding names what bounds the run.
func (in batchInput) binding() string {
	admission, processing := 0.0, 0.0
	for o, org := range in.orgs {
		if s := org.model.StarveAbove; s > 0 && in.chunk > s {
			return BindStarvation
		}
		if len(in.sizes[o]) == 0 {
			continue // this org got no batch
		}
		reqs := 0
		for _, s := range in.sizes[o] {
			reqs += s
		}
		admission = math.Max(admission, org.model.admission(in.sizes[o][0]))
		processing = math.Max(processing, float64(reqs)/org.model.ProcessingRate)
	}
	switch {
	case in.capped:
		return BindWindow
	case admission >= processing:
		return BindAdmission
	}
	return BindProcessing
}

// queued is one batch in an org's queue.
type queued struct {
	idx           int
	create, start float64
	size          int
}

type startHeap []queued

func (h startHeap) Len() int { return len(h) }
func (h startHeap) Less(a, b int) bool {
	if h[a].start != h[b].start {
		return h[a].start < h[b].start
	}
	return h[a].idx < h[b].idx
}
func (h startHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *startHeap) Push(x any)   { *h = append(*h, x.(queued)) }
func (h *startHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runQueue simulates one org's queue: batches of the given sizes, created
// in order, at most k in flight, delays × df, processing rate × rf. It
// returns the last end, the longest create-to-end time and how many
// batches expired, in seconds from the first create. The processor is
// work-conserving and serves one started batch at a time, the earliest
// started first (a batch created later but admitted sooner goes first).
func runQueue(b BatchModel, poll Poll, sizes []int, k int, df, rf float64) (end, turn float64, expired int) {
	rate := b.ProcessingRate * rf
	expiry := b.Expiry.Seconds()
	var h startHeap
	next := 0
	create := func(t float64) {
		if next < len(sizes) {
			heap.Push(&h, queued{idx: next, create: t, start: t + b.admission(sizes[next])*df, size: sizes[next]})
			next++
		}
	}
	for range min(k, len(sizes)) {
		create(0)
	}
	free := 0.0 // the processor is free from here on
	for h.Len() > 0 {
		q := heap.Pop(&h).(queued)
		begin := math.Max(free, q.start)
		done := begin + float64(q.size)/rate
		if limit := q.create + expiry; done > limit {
			expired++
			done = limit
			if begin < limit {
				free = limit
			}
		} else {
			free = done
		}
		// The batch path learns of the end at its next poll of the batch;
		// only then are the results fetched and the window's slot reused.
		seen := q.create + poll.seenAfter(done-q.create)
		end = math.Max(end, seen)
		turn = math.Max(turn, seen-q.create)
		create(seen)
	}
	return end, turn, expired
}

// SimulateBatch runs the batch queue model for n requests cut into batches
// of chunk requests with at most window batches in flight per
// organization, over the named organizations (every one when none are
// named), at the model's central values. chunk ≤ 0 and window ≤ 0 take
// the planner's rules. It reproduces the observations the model was
// calibrated on: one 500-request batch ends in about 5 minutes; one
// 8,000-request batch waits 8 hours before it starts.
func (w World) SimulateBatch(n, chunk, window int, orgs ...string) (BatchRun, error) {
	if err := w.Validate(); err != nil {
		return BatchRun{}, err
	}
	if n < 1 {
		return BatchRun{}, fmt.Errorf("plan: N must be >= 1, got %d", n)
	}
	if chunk > MaxBatchRequests {
		return BatchRun{}, fmt.Errorf("plan: a batch holds at most %d requests, got chunk %d", MaxBatchRequests, chunk)
	}
	all := batchOrgs(w)
	use := all
	if len(orgs) > 0 {
		use = nil
		for _, name := range orgs {
			found := false
			for _, o := range all {
				if o.name == name {
					use, found = append(use, o), true
				}
			}
			if !found {
				return BatchRun{}, fmt.Errorf("plan: no organization %q in world %q", name, w.Name)
			}
		}
	}
	if chunk <= 0 {
		chunk = chunkFor(n, use)
	}
	return layout(n, chunk, window, use, w.poll()).simulate(1, 1), nil
}

// batchPlan is the batch route's prediction for n requests.
type batchPlan struct {
	run   BatchRun
	wall  Range
	stuck time.Duration
}

// planBatch predicts the batch route for n requests in world w; chunk and
// window > 0 force them.
func planBatch(w World, n, chunk, window int, stuckFactor float64) batchPlan {
	orgs := batchOrgs(w)
	if chunk <= 0 {
		chunk = chunkFor(n, orgs)
	}
	in := layout(n, chunk, window, orgs, w.poll())
	mid := in.simulate(1, 1)
	low := in.simulate(1/batchSpread, batchSpread)
	high := in.simulate(batchSpread, 1/batchSpread)
	oh := w.BatchOverhead
	p := batchPlan{run: mid, wall: Range{Low: low.End + oh, Mid: mid.End + oh, High: high.End + oh}}
	p.stuck = seconds(stuckFactor * mid.MaxTurnaround.Seconds())
	for _, o := range in.orgs {
		p.stuck = min(p.stuck, o.model.Expiry)
	}
	return p
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
