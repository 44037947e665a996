package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/sim"
)

// TestResumeKeepsChunkAsWritten: a chunk created as written (its seed
// warmed nothing, the API caches nothing here), then a crash. The resumed
// run prepares the requests again with the breakpoint, as the job does;
// attached to the journaled chunk they must be stripped back, or their
// results would claim a breakpoint the batch never got.
func TestResumeKeepsChunkAsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.PromptCache = false }, "batch")
		reqs := cachedRequests(21, nil)
		cfg := w.config()
		cfg.WindowPerOrg = 30
		var hits atomic.Int32
		crash := func(p string) bool { return p == "after-create" && hits.Add(1) == 2 }
		col1, _, err := w.run(t, cfg, reqs, nil, crash)
		if !errors.Is(err, errCrash) {
			t.Fatalf("first run: %v", err)
		}
		col2, r2, err := w.run(t, cfg, cachedRequests(21, nil), col1.done(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col2.results) == 0 {
			t.Fatal("the resumed run collected nothing: the crash came too late to test the resume")
		}
		for id, res := range col2.results {
			if res.Request.Sent != nil && !sim.AnswerContains(string(res.Body), res.Request.Body()) {
				t.Errorf("%s: the result records a breakpoint (Sent) the batch never got", id)
			}
		}
		// The resumed run does not know the org's cache is cold, so it
		// may seed again; every other row goes as written.
		if with, _ := seedsAndRows(t, col2); int64(with) != r2.Stats().Seeds {
			t.Errorf("%d resumed rows with the breakpoint, %d of them seeds; want only the seeds", with, r2.Stats().Seeds)
		}
	})
}

// TestSlowSeedHoldsAtMostHalfTheTTL: a seed batch slower than half the
// TTL (40 min here; batches of 30+ min are common) cannot prove warmth
// that lasts until its chunks begin, so the org's chunks wait at most
// TTL/2 for it and then go as written, not the seed's whole turnaround.
func TestSlowSeedHoldsAtMostHalfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const admission = 40 * time.Minute
		w := newWorld(t, func(c *sim.Config) {
			c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0
			c.Batch.AdmissionBase = sim.Duration(admission)
		}, "batch")
		reqs := cachedRequests(41, nil)
		cfg := w.config()
		cfg.WindowPerOrg = 50
		cfg.SeedWait = 2 * time.Hour // a planner's long turnaround
		start := time.Now()
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		seedsAndRows(t, col)
		// Held TTL/2, then one chunk's admission, and a few minutes of
		// polling; waiting out the seed would add its 10 more minutes.
		if took, most := time.Since(start), time.Hour/2+admission+5*time.Minute; took > most {
			t.Errorf("the job took %v, want at most %v: the chunks waited longer than TTL/2 for the seed", took, most)
		}
	})
}

// TestRefusedCreatesAreNotCutOnePerSeed: where every create is refused
// (the org may not batch this model, a gateway refuses the body) the
// requests are re-routed in the chunks they were cut in. A refused seed
// must not make the next request a seed of its own, one create each, and
// is not counted as a seed batch.
func TestRefusedCreatesAreNotCutOnePerSeed(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprint("cached=", cached), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil, "batch")
				w.tap.createStatus = 400
				reqs := requests(40)
				most := 4 // the chunks of 40
				if cached {
					reqs = cachedRequests(40, nil)
					most++ // and one seed
				}
				col, r, err := w.run(t, w.config(), reqs, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if st := r.Stats(); st.Seeds != 0 {
					t.Errorf("Stats.Seeds %d, but no seed batch was created", st.Seeds)
				}
				if len(col.reroutes) != len(reqs) {
					t.Errorf("%d of %d requests re-routed", len(col.reroutes), len(reqs))
				}
				if n := w.tap.createCount(); n > most {
					t.Errorf("%d create calls for %d requests, want at most %d", n, len(reqs), most)
				}
			})
		})
	}
}

// groupedRequests is k prefixes (rubrics) of per requests each,
// interleaved, prepared as the job prepares them.
func groupedRequests(k, per int) []*call.Request {
	var out []*call.Request
	for i := range per {
		for g := range k {
			rubric := fmt.Sprintf("rubric %d: ", g) + strings.Repeat("criterion ", 3000)
			body := func(breakpoint bool) []byte {
				sys := map[string]any{"type": "text", "text": rubric}
				if breakpoint {
					sys["cache_control"] = map[string]any{"type": "ephemeral", "ttl": "1h"}
				}
				b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64, "system": []any{sys},
					"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Judge answer %d.", i)}}})
				return b
			}
			p := body(false)
			out = append(out, &call.Request{ID: fmt.Sprintf("g%d-%d", g, i), Params: p, Sent: body(true),
				Model: "claude-sonnet-4-5", MaxTokens: 64, ParamsHash: jsonl.ParamsHash(p),
				CachePrefix: uint64(0x1000 + g), CacheTTL: time.Hour})
		}
	}
	return out
}

// TestManyPrefixesShareOneSeed: a job of 80 rubrics on one org. One seed
// batch carries a request of every prefix, so the chunks wait for one
// seed, not 80 in a row (each slowed by a busy sync lane), by which time
// the first seeds' warmth would have run out.
func TestManyPrefixesShareOneSeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 }, "batch")
		w.tap.messagesDelay = 40 * time.Second // a primer would time out
		const k, per = 80, 10
		reqs := groupedRequests(k, per)
		cfg := w.config()
		cfg.ChunkSize, cfg.WindowPerOrg = 400, 2000
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		with, plain := seedsAndRows(t, col)
		if st := r.Stats(); st.Seeds != 1 {
			t.Errorf("%d seed batches for %d prefixes on one org, want 1", st.Seeds, k)
		}
		if plain != 0 || with != len(reqs) {
			t.Errorf("%d rows with the breakpoint, %d as written; every prefix was seeded, want all with it", with, plain)
		}
		reads, writes := readShare(col)
		if writes != k || reads != len(reqs)-k {
			t.Errorf("%d reads, %d writes; want only the seed's %d rows to write", reads, writes, k)
		}
	})
}

// TestSeedsCountedWhenCreated: Stats.Seeds (the report's "seed batches")
// counts seed batches the API created, not seeds cut and then refused by
// a full queue and cut again.
func TestSeedsCountedWhenCreated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) {
			c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0
			for i := range c.Orgs {
				c.Orgs[i].BatchQueueCap = 20
			}
		}, "batch")
		reqs := cachedRequests(60, nil)
		cfg := w.config()
		cfg.WindowPerOrg = 60
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		created := 0
		for _, c := range w.tap.creates {
			if c.n == 1 && c.status == 0 {
				created++
			}
		}
		if st := r.Stats(); st.Seeds != int64(created) || created == 0 {
			t.Errorf("Stats.Seeds %d, one-request batches created %d", st.Seeds, created)
		}
	})
}

// TestSeedsAheadOfTheNextChunk: a job listed rubric by rubric on an org
// whose window is full of earlier chunks. The next rubric's seed is cut
// as soon as its requests wait to be cut, so it runs while the window is
// full instead of after, when that rubric reaches the front. On the
// bubble's exact clock the job takes 13m32s; seeding only the next
// chunk's prefixes took 17m36s (one seed turnaround more per rubric).
func TestSeedsAheadOfTheNextChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 }, "batch")
		const k, per = 8, 20
		interleaved := groupedRequests(k, per)
		reqs := make([]*call.Request, 0, len(interleaved))
		for g := range k {
			for i := range per {
				reqs = append(reqs, interleaved[i*k+g])
			}
		}
		cfg := w.config()
		cfg.ChunkSize, cfg.WindowPerOrg = 10, 20
		start := time.Now()
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if with, plain := seedsAndRows(t, col); plain != 0 {
			t.Errorf("%d rows with the breakpoint, %d as written; want all with it", with, plain)
		}
		if took, most := time.Since(start), 15*time.Minute; took > most {
			t.Errorf("the job took %v, want at most %v: seeds waited for their rubric to reach the front", took, most)
		}
	})
}

// TestAdoptedSeedIsCounted: a seed whose create answer was lost (the
// connection dropped after the API created it) is found again and
// adopted; it is still a seed batch the API created.
func TestAdoptedSeedIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 }, "batch")
		var n atomic.Int32
		w.tap.failCreate = func() string {
			if n.Add(1) == 1 {
				return "drop-after" // the first create is the seed
			}
			return ""
		}
		reqs := cachedRequests(21, nil)
		cfg := w.config()
		cfg.WindowPerOrg = 30
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if w.tap.creates[0].n != 1 {
			t.Fatalf("the first create had %d requests; want the seed's one", w.tap.creates[0].n)
		}
		if st := r.Stats(); st.Seeds != 1 || st.Adopted != 1 {
			t.Errorf("Stats.Seeds %d, Adopted %d; want the adopted seed counted once", st.Seeds, st.Adopted)
		}
	})
}

// TestSeedKeepsToTheWindow: a seed of many prefixes cut while the
// organization has a chunk in flight takes no more requests than its
// window has free.
func TestSeedKeepsToTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 }, "batch")
		// 10 plain requests (a chunk in flight), then 10 prefixes × 2.
		reqs := append(requests(10), groupedRequests(10, 2)...)
		cfg := w.config()
		cfg.ChunkSize, cfg.WindowPerOrg = 10, 15
		var most atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		watch := func(r *Runner) {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					for _, v := range r.Stats().InFlight {
						if int64(v) > most.Load() {
							most.Store(int64(v))
						}
					}
				}
			})
		}
		col, _, err := w.runWith(t, newCollector(t), cfg, reqs, nil, nil, watch)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if m := most.Load(); m > int64(cfg.WindowPerOrg) {
			t.Errorf("the org had %d requests in unended batches, WindowPerOrg %d", m, cfg.WindowPerOrg)
		}
	})
}
