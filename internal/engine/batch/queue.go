package batch

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/sluice-dev/sluice/call"
)

// queue is the requests waiting to be cut into chunks, oldest first, and
// how they are cut. Loop-owned.
type queue struct {
	reqs   []*call.Request
	sizes  []int64 // body bytes of each request (itemSize)
	target int     // requests per chunk: min(ChunkSize, the largest window) less the run's fingerprint
	// byteCap is the most body bytes per chunk: MaxChunkBytes, halved by
	// each 413.
	byteCap int64
	// cutNow: cut a partial chunk now, the feeder has paused (CutWaiting).
	cutNow bool
	seq    int // chunks cut so far
}

func (q *queue) push(req *call.Request) {
	q.reqs = append(q.reqs, req)
	q.sizes = append(q.sizes, itemSize(req))
}

// pushFront puts reqs back at the front, in their order.
func (q *queue) pushFront(reqs []*call.Request) {
	sizes := make([]int64, len(reqs))
	for i, req := range reqs {
		sizes[i] = itemSize(req)
	}
	q.reqs = append(reqs, q.reqs...)
	q.sizes = append(sizes, q.sizes...)
}

// take removes and returns the first n requests.
func (q *queue) take(n int) []*call.Request {
	reqs := q.reqs[:n:n]
	q.reqs, q.sizes = q.reqs[n:], q.sizes[n:]
	return reqs
}

// schedule cuts chunks from the queue onto the orgs with the most free
// window, re-routes the whole queue when no batch can take it (no org
// left, HarvestOnly, a Cancel, too close to Config.Deadline), and returns
// when to look again.
func (r *Runner) schedule(now time.Time) (wake time.Time) {
	for _, o := range r.orgs {
		if !o.dead && o.key() == nil {
			r.orgDead(o, "no live key")
		}
	}
	for len(r.q.reqs) > 0 {
		if why := r.noBatch(now); why != "" {
			for _, req := range r.q.take(len(r.q.reqs)) {
				r.emitReroute(nil, req, why)
			}
			return time.Time{}
		}
		n, body := fit(r.q.reqs, r.q.sizes, r.q.target, r.q.byteCap)
		if n == len(r.q.reqs) && n < r.q.target && r.input == inputOpen && !r.q.cutNow {
			break // wait for a full chunk
		}
		if r.cutSeeds(now, r.chunkPrefixes(len(r.q.reqs)), &wake) {
			continue // the queue moved: fit again
		}
		prefixes := r.chunkPrefixes(n)
		o, w := chooseOrg(r.orgs, n, now, func(o *orgState) (bool, time.Time) { return o.seedHolds(prefixes(), now) })
		wake = earliest(wake, w)
		if o == nil {
			break
		}
		r.cut(n, body, o)
	}
	// Requests still waiting are re-routed when creates stop.
	if len(r.q.reqs) > 0 {
		wake = earliest(wake, r.cutoff())
	}
	return wake
}

// earliest is the earlier of two times, a zero one not counting.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
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

// cut makes a chunk of the first n queued requests on o, in its window,
// its create unresolved: the loop's next turn starts it.
func (r *Runner) cut(n int, body int64, o *orgState) *chunk {
	reqs := r.q.take(n)
	r.q.seq++
	id := fmt.Sprintf("%s-%d", r.runID, r.q.seq)
	c := &chunk{
		id: id, org: o, list: reqs, bytes: body, wire: wirePrefix(id),
		ids: make([]string, n), hashes: make([]string, n), index: make(map[string]int, n),
		reqs: make(map[string]*call.Request, n), handled: map[string]bool{}, waiting: n,
	}
	for i, q := range reqs {
		c.ids[i], c.hashes[i], c.index[q.ID], c.reqs[q.ID] = q.ID, q.ParamsHash, i, q
	}
	o.inflight += n
	o.creating++
	r.chunks = append(r.chunks, c)
	return c
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
