package batch

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/sim"
)

// seedsAndRows counts, over a run's results, the rows sent with the
// breakpoint and those sent as written, and checks that a request sent
// as written carries no prefix any more.
func seedsAndRows(t *testing.T, col *collector) (withBreakpoint, asWritten int) {
	t.Helper()
	for id, res := range col.results {
		q := res.Request
		switch {
		case q.Sent != nil && q.CachePrefix != 0:
			withBreakpoint++
		case q.Sent == nil && q.CachePrefix == 0 && q.CacheTTL == 0:
			asWritten++
		default:
			t.Fatalf("%s: half-stripped request %+v", id, q)
		}
	}
	return withBreakpoint, asWritten
}

// TestSeedWarmsBeforeChunks: in a world where batches never read what a
// sync primer wrote (prime_hit 0, the low reading users measured) but
// always read what a batch warmed (cache_hit 1), each org first creates a
// one-request seed batch and holds its other chunks of the prefix until
// the seed ended, so every other row reads the prefix. Without the seed
// every chunk would begin on a cache no batch had warmed and read
// nothing.
func TestSeedWarmsBeforeChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 })
		reqs := cachedRequests(60, nil)
		col, r, _ := runPriming(t, w, reqs)
		st := r.Stats()
		orgs := 0
		for _, n := range st.Turnaround {
			if n.Batches > 0 {
				orgs++
			}
		}
		reads, writes := readShare(col)
		if st.Seeds != int64(orgs) || orgs < 2 {
			t.Fatalf("%d seeds over %d orgs, want one per org", st.Seeds, orgs)
		}
		if reads != len(reqs)-orgs || writes != orgs || st.AsWritten != 0 {
			t.Fatalf("%d reads, %d writes, %d sent as written of %d rows; want only the seeds to write", reads, writes, st.AsWritten, len(reqs))
		}
	})
}

// TestSeedThatWarmsNothingSendsAsWritten: where the API caches nothing
// (the prefix too short in practice, caching off) the seed's row neither
// reads nor writes, and the org's chunks go without the breakpoint: the
// request as written, which the result says.
func TestSeedThatWarmsNothingSendsAsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.PromptCache = false }, "batch")
		reqs := cachedRequests(40, nil)
		col, r, _ := runPriming(t, w, reqs)
		st := r.Stats()
		with, plain := seedsAndRows(t, col)
		if st.Seeds != 1 || with != 1 || plain != len(reqs)-1 || st.AsWritten != int64(plain) {
			t.Fatalf("%d seeds, %d rows with the breakpoint, %d as written (stats %d); want the seed alone to carry it", st.Seeds, with, plain, st.AsWritten)
		}
	})
}

// TestSeedWaitIsBounded: a seed batch slower than SeedWait holds its
// org's chunks only that long; they are then sent as written (no row
// writes at 2× into a cache no batch warmed), and the chunks created after
// the seed ended warm keep their breakpoints and read.
func TestSeedWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 }, "batch")
		reqs := cachedRequests(120, nil)
		cfg := w.config()
		cfg.SeedWait = 5 * time.Second // the seed takes a minute (admission)
		cfg.WindowPerOrg = 30
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		st := r.Stats()
		with, plain := seedsAndRows(t, col)
		reads, writes := readShare(col)
		if st.Seeds != 1 || plain == 0 || with < 2 || st.AsWritten != int64(plain) {
			t.Fatalf("%d seeds, %d rows with the breakpoint, %d as written; want some of each", st.Seeds, with, plain)
		}
		if writes != 1 || reads != with-1 {
			t.Fatalf("%d reads, %d writes, %d rows with the breakpoint; want every one but the seed to read", reads, writes, with)
		}
	})
}

// TestPoorHitRateSendsAsWritten: an org whose batches read the warmed
// prefix on only 20 % of their rows (below the 53 % break-even, where
// the 2× writes of the misses cost more than the reads save) stops
// sending the breakpoint once 50 rows show it.
func TestPoorHitRateSendsAsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 0.2, 0.2 }, "batch")
		reqs := cachedRequests(200, nil)
		cfg := w.config()
		cfg.WindowPerOrg = 10 // one chunk at a time: each is harvested before the next
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		with, plain := seedsAndRows(t, col)
		if with < 1+poorAfterRows || with > 1+poorAfterRows+2*cfg.ChunkSize || plain != len(reqs)-with || r.Stats().AsWritten != int64(plain) {
			t.Fatalf("%d rows with the breakpoint, %d as written; want the breakpoint dropped after about %d", with, plain, poorAfterRows)
		}
	})
}

// TestSeedStatus walks one prefix's seed through its states.
func TestSeedStatus(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	c := &chunk{}
	for _, tc := range []struct {
		name string
		s    *seed
		want seedStatus
	}{
		{"never seeded", nil, seedNeeded},
		{"seed running", &seed{chunk: c, waitUntil: t0.Add(time.Minute)}, seedWaiting},
		{"seed running past its wait", &seed{chunk: c, waitUntil: t0}, seedCold},
		{"warm", &seed{warmUntil: t0.Add(time.Second)}, seedWarm},
		{"warm while a re-seed runs", &seed{chunk: c, waitUntil: t0.Add(time.Minute), warmUntil: t0.Add(time.Second)}, seedWarm},
		{"warmth over", &seed{warmUntil: t0}, seedNeeded},
		{"failed, retry later", &seed{retryAt: t0.Add(time.Second)}, seedCold},
		{"failed, retry due", &seed{retryAt: t0}, seedNeeded},
		{"poor", &seed{poor: true, warmUntil: t0.Add(time.Hour)}, seedCold},
	} {
		if got := tc.s.status(t0); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}
