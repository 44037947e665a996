package batch

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

// Seeding (docs/caching.md, "Seeding batches"): a chunk is created with a
// shared prefix's breakpoints only when a batch row of that prefix has read
// or written the cache on the chunk's organization within half the TTL.
// Before an organization takes its first chunk of a prefix it creates a
// seed — one batch holding one request of each prefix it needs seeded —
// and holds its chunks of those prefixes until the seed has ended (at most
// seedBase, half the TTL and half the time to the create cutoff). A chunk
// created while its organization is not batch-warm for a prefix goes
// without that prefix's breakpoints (as written), and so does every chunk
// of an organization whose rows with breakpoints read below their model's
// break-even (cost.CacheBreakEven1hOf). Which requests a chunk sent as
// written is journaled with it (record.Plain), so a resumed run attaches
// them as they were sent. Everything here is the loop's.

const (
	// defaultSeedWait is the longest a seed holds its organization's
	// chunks when neither Config.SeedWait nor Config.Turnaround is set.
	defaultSeedWait = 10 * time.Minute
	// maxSeedBackoff caps a failed seed's retry back-off at
	// seedWait × 2^maxSeedBackoff.
	maxSeedBackoff = 6
	// poorAfterRows is how many rows with breakpoints an organization's
	// prefix must have had harvested before its hit rate is judged.
	poorAfterRows = 50
)

// seed is one organization's batch-warmth of one shared prefix.
type seed struct {
	chunk     *chunk    // the seed batch, until its goroutine ends
	waitUntil time.Time // chunks of the prefix are held until then while chunk runs
	// warmUntil: a batch row of the prefix read or wrote the cache here
	// (or a primer read it after one did); chunks created before then
	// keep their breakpoints.
	warmUntil time.Time
	retryAt   time.Time // after a seed that warmed nothing: seed again from then
	failures  int       // seeds in a row that warmed nothing
	// rows and hits count the harvested succeeded rows sent with the
	// breakpoint (the seeds' aside) and those that read it; poor is set
	// once hits fall below the break-even: chunks go as written from
	// then on.
	rows, hits int
	poor       bool
}

type seedStatus int

const (
	seedNeeded  seedStatus = iota // seed before the next chunk of the prefix
	seedWaiting                   // a seed runs: hold the prefix's chunks
	seedWarm                      // create with the breakpoints
	seedCold                      // create as written
)

// status is s's state at now; a nil seed is needed.
func (s *seed) status(now time.Time) seedStatus {
	switch {
	case s == nil:
		return seedNeeded
	case s.poor:
		return seedCold
	case now.Before(s.warmUntil):
		return seedWarm
	case s.chunk != nil && now.Before(s.waitUntil):
		return seedWaiting
	case s.chunk != nil || now.Before(s.retryAt):
		return seedCold
	}
	return seedNeeded
}

// seedOf returns o's seed state for prefix p, made if absent.
func (o *orgState) seedOf(p uint64) *seed {
	s := o.seeds[p]
	if s == nil {
		s = &seed{}
		o.seeds[p] = s
	}
	return s
}

// cacheable reports whether req carries a breakpoint sluice added for a
// shared prefix (the job's, for the batch route).
func cacheable(req *call.Request) bool {
	return req.CachePrefix != 0 && req.CacheTTL > 0 && req.Sent != nil
}

// chunkPrefixes returns a function giving the distinct shared prefixes of
// the next n pending requests, computed on first use (a scan only when an
// organization could take a chunk or a seed).
func (r *Runner) chunkPrefixes(n int) func() []uint64 {
	var ps []uint64
	done := false
	return func() []uint64 {
		if done {
			return ps
		}
		done = true
		for _, q := range r.q.reqs[:min(n, len(r.q.reqs))] {
			if cacheable(q) && !containsPrefix(ps, q.CachePrefix) {
				ps = append(ps, q.CachePrefix)
			}
		}
		return ps
	}
}

func containsPrefix(ps []uint64, p uint64) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// seedBase is how long a seed may hold its organization's chunks, and the
// base of the retry back-off.
func (r *Runner) seedBase() time.Duration {
	switch {
	case r.cfg.SeedWait > 0:
		return r.cfg.SeedWait
	case r.cfg.Turnaround > 0:
		return r.cfg.Turnaround
	}
	return defaultSeedWait
}

// cutSeeds cuts, for each organization that can create now and needs a
// seed for some prefix among the requests waiting to be cut, one seed
// chunk holding one request of each prefix it needs seeded (one create
// and one turnaround however many prefixes the job has), and reports
// whether it cut any. Seeding what waits behind the next chunk, not only
// the next chunk's, lets a seed run while the organization's window is
// full of earlier chunks, so a job listed prefix by prefix does not stall
// at each new one. A seed holds at most a chunk's requests and the
// organization's free window; its organization's create is then
// unresolved.
func (r *Runner) cutSeeds(now time.Time, waiting func() []uint64, wake *time.Time) bool {
	cut := false
	for _, o := range r.orgs {
		ok, until := o.canCreate(1, now)
		*wake = earliest(*wake, until)
		if !ok || len(waiting()) == 0 {
			continue
		}
		if !slices.ContainsFunc(waiting(), func(p uint64) bool { return o.seeds[p].status(now) == seedNeeded }) {
			continue
		}
		needs := func(q *call.Request) bool {
			return cacheable(q) && o.seeds[q.CachePrefix].status(now) == seedNeeded
		}
		if r.cutSeed(o, needs, min(o.window-o.inflight, r.q.target), now) != nil {
			cut = true
		}
	}
	return cut
}

// cutSeed cuts the first queued request of each prefix that needs a seed,
// in queue order (the next chunk's first) and at most limit of them within
// the byte cap, into one seed chunk on o, or returns nil when none is
// queued.
func (r *Runner) cutSeed(o *orgState, needs func(*call.Request) bool, limit int, now time.Time) *chunk {
	var picked []*call.Request
	var sizes []int64
	var seeds []uint64
	rest, restSizes := r.q.reqs[:0:0], r.q.sizes[:0:0]
	for j, q := range r.q.reqs {
		if len(seeds) < limit && needs(q) && !containsPrefix(seeds, q.CachePrefix) {
			picked, sizes, seeds = append(picked, q), append(sizes, r.q.sizes[j]), append(seeds, q.CachePrefix)
			continue
		}
		rest, restSizes = append(rest, q), append(restSizes, r.q.sizes[j])
	}
	if len(picked) == 0 {
		return nil
	}
	// The seed's requests to the front, the rest keeping their order; the
	// picked requests beyond the byte cap stay at the front, unseeded.
	r.q.reqs = append(picked, rest...)
	r.q.sizes = append(sizes, restSizes...)
	n, body := fit(r.q.reqs, r.q.sizes, len(picked), r.q.byteCap)
	picked, seeds = picked[:n], seeds[:n]
	c := r.cut(n, body, o)
	c.seedFor = seeds
	wait := now.Add(r.seedBase())
	if co := r.cutoff(); !co.IsZero() && co.After(now) {
		// Never wait through more than half the time creates have left.
		wait = minTime(wait, now.Add(co.Sub(now)/2))
	}
	for _, q := range picked {
		s := o.seedOf(q.CachePrefix)
		s.chunk, s.retryAt = c, time.Time{}
		// Nor longer than the warmth a seed's row proves: a seed that
		// ends later would find its own entry's half-TTL gone.
		s.waitUntil = minTime(wait, now.Add(q.CacheTTL/2))
	}
	r.log.Info("batch: seeding the prompt cache with a batch of one request per shared prefix before the org's other chunks of them",
		"org", o.label, "prefixes", len(seeds), "wait at most", minTime(wait, now.Add(picked[0].CacheTTL/2)).Sub(now).Round(time.Second))
	return c
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// seedHolds reports whether o must not take a chunk carrying prefixes at
// now (a seed of one of them runs, or is still to be cut), and until when
// a running seed holds it.
func (o *orgState) seedHolds(prefixes []uint64, now time.Time) (held bool, until time.Time) {
	for _, p := range prefixes {
		s := o.seeds[p]
		switch s.status(now) {
		case seedNeeded:
			held = true
		case seedWaiting:
			held = true
			until = earliest(until, s.waitUntil)
		}
	}
	return held, until
}

// seedEnded settles a seed chunk as it finishes: warm, or never created
// and requeued (seeded again when the organization can create), or it
// warmed nothing (or was refused and re-routed: a create the API refuses
// would refuse the next seed too) and is retried after a back-off. Other
// chunks return.
func (r *Runner) seedEnded(c *chunk, requeued bool) {
	if c.seedFor == nil {
		return
	}
	now := r.now()
	for _, p := range c.seedFor {
		s := c.org.seeds[p]
		if s == nil || s.chunk != c {
			continue
		}
		s.chunk = nil
		switch {
		case now.Before(s.warmUntil):
			s.failures = 0
		case requeued:
		default:
			s.failures++
			wait := r.seedBase() << min(s.failures-1, maxSeedBackoff)
			s.retryAt = now.Add(wait)
			r.log.Info("batch: a prompt-cache seed batch warmed nothing (or came back after the warmth its row proves); the org's chunks of its prefix are sent as written for now",
				"org", c.org.label, "prefix", strconv.FormatUint(p, 16), "seed again in", wait)
		}
	}
}

// seeds reports whether c seeds prefix p.
func (c *chunk) seeds(p uint64) bool { return containsPrefix(c.seedFor, p) }

// noteCacheRow learns from one succeeded row of c: a row that read or
// wrote its prefix shows the entry alive on c's organization from c's
// intent, for a TTL; rows sent with the breakpoint (the seed's aside)
// are counted against the break-even.
func (r *Runner) noteCacheRow(c *chunk, req *call.Request, u api.Usage) {
	p := req.CachePrefix
	if p == 0 || req.CacheTTL <= 0 || c.intentAt.IsZero() {
		return
	}
	read := u.CacheReadInputTokens > 0
	s := c.org.seedOf(p)
	if read || u.CacheCreationInputTokens > 0 {
		if until := c.intentAt.Add(req.CacheTTL / 2); until.After(s.warmUntil) {
			s.warmUntil = until
		}
	}
	if c.seeds(p) {
		return
	}
	s.rows++
	if read {
		s.hits++
	}
	if even := cost.CacheBreakEven1hOf(req.Model); !s.poor && s.rows >= poorAfterRows && float64(s.hits) < even*float64(s.rows) {
		s.poor = true
		r.log.Warn("batch: this org's batches read the prompt cache below the break-even; its chunks of the prefix are sent as written from now on",
			"org", c.org.label, "prefix", strconv.FormatUint(p, 16), "hits", s.hits, "rows", s.rows,
			"break-even", strconv.FormatFloat(even, 'f', 2, 64))
	}
}

// notePrimerRead extends o's warmth of p when a primer read the entry a
// batch had warmed: it was alive at now and is refreshed. A primer that
// wrote it proves nothing a batch will read.
func (o *orgState) notePrimerRead(p uint64, ttl time.Duration, now time.Time) {
	s := o.seeds[p]
	if s == nil || s.warmUntil.IsZero() {
		return
	}
	if until := now.Add(ttl / 2); until.After(s.warmUntil) {
		s.warmUntil = until
	}
}

// sendAsWritten takes the added breakpoints off c's requests whose prefix
// is not batch-warm on c's organization now (the seed keeps its own), so
// no row writes at 2× into a cache the API may not let it read. The
// request's Sent is cleared: the result says it went as written.
func (r *Runner) sendAsWritten(c *chunk, now time.Time) {
	n := 0
	for i, q := range c.list {
		if !cacheable(q) || c.seeds(q.CachePrefix) || c.org.seeds[q.CachePrefix].status(now) == seedWarm {
			continue
		}
		q.Sent, q.CachePrefix, q.CacheTTL = nil, 0, 0
		c.plain = append(c.plain, i)
		n++
	}
	if n == 0 {
		return
	}
	sizes := make([]int64, len(c.list))
	for i, q := range c.list {
		sizes[i] = itemSize(q)
	}
	_, c.bytes = fit(c.list, sizes, len(c.list), math.MaxInt64)
	r.stats.AsWritten += int64(n)
}

// asJournaled makes req, attached to a recovered chunk, what the chunk's
// batch got: without its added breakpoint when the intent says it was
// sent as written, so the result and the report do not claim one.
func (r *Runner) asJournaled(c *chunk, req *call.Request) {
	i, ok := c.index[req.ID]
	if !ok || req.Sent == nil || !slices.Contains(c.plain, i) {
		return
	}
	req.Sent, req.CachePrefix, req.CacheTTL = nil, 0, 0
	r.stats.AsWritten++
}
