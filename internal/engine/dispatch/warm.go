package dispatch

import (
	"time"

	"github.com/sluice-dev/sluice/internal/engine/client"
)

// Warming a shared prompt prefix (docs/caching.md). A prompt-cache entry
// is per organization and model, and becomes visible only once its
// writer's answer begins: requests of one prefix sent together to a cold
// organization would all miss and all pay the write. So each lane lets
// one request of a cold prefix go — the writer, a real request of the
// job — and holds the rest of that prefix until the writer's answer is in;
// then the prefix is warm there until its TTL passes without an answer
// that used the cache. Requests of other prefixes, or none, are not held
// (though one waiting at the head of the queue holds those behind it, for
// at most one answer's time). State is per lane, loop-owned.

// prefixState is one prefix on one lane.
type prefixState struct {
	// writer is the request writing it; nil when cold or warm. It is set
	// only once warm has passed, and every answer that makes the prefix
	// warm clears it, so a writer means the prefix is not warm.
	writer *item
	warm   time.Time // warm until then (past or zero: cold, or being written)
}

// prefixHeld reports whether ls must not send it now: its prefix is being
// written on ls by another request.
func (ls *laneState) prefixHeld(it *item) bool {
	p := it.req.CachePrefix
	if p == 0 {
		return false
	}
	st := ls.prefixes[p]
	return st != nil && st.writer != nil && st.writer != it
}

// prefixSent notes that ls sends it: on a cold prefix it becomes the
// writer.
func (ls *laneState) prefixSent(it *item, now time.Time) {
	p := it.req.CachePrefix
	if p == 0 {
		return
	}
	if ls.prefixes == nil {
		ls.prefixes = map[uint64]*prefixState{}
	}
	st := ls.prefixes[p]
	if st == nil {
		st = &prefixState{}
		ls.prefixes[p] = st
	}
	if st.writer == nil && !now.Before(st.warm) { // cold, or its TTL passed unused
		st.writer = it
	}
}

// prefixDone updates ls's state of it's prefix with the answer o to the
// attempt sent at sent: an answer that read or wrote the cache makes it
// warm for its TTL from the send (the API refreshes an entry when the
// request arrives, not when its answer ends); one that did neither (the
// API did not cache the prefix: shorter in practice than the documented
// minimum) makes it warm for good, so an uncacheable prefix is never held
// again; a writer that got no answer leaves it cold, for the next request
// to write. It reports whether the prefix stopped being written here, so
// the requests parked behind it may go.
func (ls *laneState) prefixDone(it *item, o *client.Outcome, sent time.Time) (released bool) {
	p := it.req.CachePrefix
	st := ls.prefixes[p]
	if p == 0 || st == nil {
		return false
	}
	was := st.writer != nil
	switch {
	case o.Class == client.OK && (o.Usage.CacheReadInputTokens > 0 || o.Usage.CacheCreationInputTokens > 0):
		ttl := it.req.CacheTTL
		if ttl <= 0 {
			ttl = 5 * time.Minute
		}
		// Answers end out of the order they were sent: an older send's
		// answer must not shorten a later refresh.
		if w := sent.Add(ttl); w.After(st.warm) {
			st.warm = w
		}
		st.writer = nil
	case o.Class == client.OK:
		st.warm, st.writer = sent.Add(100*365*24*time.Hour), nil
	case st.writer == it:
		st.writer = nil
	}
	return was && st.writer == nil
}

// unpark puts the requests parked behind prefix p back at the front of
// their queues, in their order.
func (d *Dispatcher) unpark(p uint64) {
	its := d.parked[p]
	delete(d.parked, p)
	for i := len(its) - 1; i >= 0; i-- {
		d.parkedN[its[i].pool]--
		d.queues[its[i].pool].pushFront(its[i])
	}
}

// park sets it aside behind its prefix's writers.
func (d *Dispatcher) park(it *item) {
	d.parked[it.req.CachePrefix] = append(d.parked[it.req.CachePrefix], it)
	d.parkedN[it.pool]++
}
