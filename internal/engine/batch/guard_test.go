package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// slowBatches makes a batch crawl: 10 min admission, then one request per
// 20 s.
func slowBatches(c *sim.Config) {
	c.Batch.AdmissionBase, c.Batch.AdmissionPerRequest = sim.Duration(10*time.Minute), 0
	c.Batch.ProcessingRate = 0.05
}

// openIDs returns the ids of the journal's open chunks that are not done.
func openIDs(t *testing.T, path string, done map[string]bool) map[string]bool {
	t.Helper()
	ids := map[string][]string{}
	closed := map[string]bool{}
	for _, rec := range journalRecords(t, path) {
		switch rec.Op {
		case opIntent:
			ids[rec.Chunk] = rec.IDs
		case opHarvested, opAbandoned, opDropped:
			closed[rec.Chunk] = true
		}
	}
	out := map[string]bool{}
	for ch, list := range ids {
		if closed[ch] {
			continue
		}
		for _, id := range list {
			if !done[id] {
				out[id] = true
			}
		}
	}
	return out
}

// TestHoldsAfterCrash: after a crash mid-harvest, a Runner opened on the
// journal holds exactly the open chunks' ids that are not done, HasJournal
// sees the open chunks, and a resumed run finishes them.
func TestHoldsAfterCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		if open, err := HasJournal(w.journal); open || err != nil {
			t.Fatalf("HasJournal before any run = %v, %v", open, err)
		}
		reqs := requests(30)
		cfg := w.config()
		cfg.ChunkSize, cfg.WindowPerOrg = 10, 30
		var hits atomic.Int32
		col1, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "mid-harvest" && hits.Add(1) == 13 })
		if !errors.Is(err, errCrash) {
			t.Fatalf("first run: %v", err)
		}
		done := col1.done()
		if open, err := HasJournal(w.journal); !open || err != nil {
			t.Fatalf("HasJournal after the crash = %v, %v", open, err)
		}
		want := openIDs(t, w.journal, done)
		if len(want) == 0 || len(want)+len(done) != 30 {
			t.Fatalf("%d ids open, %d done: the crash is not mid-run", len(want), len(done))
		}

		cfg2 := cfg
		cfg2.OnResult, cfg2.OnReroute = func(Result) {}, func(*call.Request, string) {}
		cfg2.Done = func(id string) bool { return done[id] }
		r, err := New(cfg2)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range append(reqs, request("stranger", 64, "not in the journal")) {
			if got := r.Holds(q.ID); got != want[q.ID] {
				t.Errorf("Holds(%s) = %v, want %v (done %v)", q.ID, got, want[q.ID], done[q.ID])
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}

		col2, _, err := w.run(t, cfg, reqs, done, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col1, col2)
		if got := w.created(); got != 3 {
			t.Errorf("simulator saw %d creates, want 3", got)
		}
		if open, err := HasJournal(w.journal); open || err != nil {
			t.Errorf("HasJournal after the resumed run = %v, %v", open, err)
		}
	})
}

// TestHeldBack: a journaled batch whose org only has a key with a
// provisional org is held back (Holds true, no callback, not created
// elsewhere) and harvested by a later run with the real key; an intent
// the journal never saw created is re-chunked on the orgs at hand.
func TestHeldBack(t *testing.T) {
	for _, tc := range []struct {
		point string
		held  bool
	}{
		{"mid-poll", true},       // created: held back
		{"before-create", false}, // intent only: re-chunked
	} {
		t.Run(tc.point, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil, "batch", "low_prio")
				kb, kl := w.key(t, "batch"), w.key(t, "low_prio")
				reqs := requests(10)
				cfg := w.config()
				cfg.Keys = []*keys.Key{kb}
				_, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == tc.point })
				if !errors.Is(err, errCrash) {
					t.Fatalf("first run: %v", err)
				}

				real := kb.Org()
				kb.SetOrg(ProvisionalOrgPrefix + "batch")
				var logs logBuffer
				cfg.Keys, cfg.Logger = []*keys.Key{kb, kl}, logs.logger()
				more := []*call.Request{request("n0", 64, "new zero"), request("n1", 64, "new one")}
				all := append(append([]*call.Request{}, reqs...), more...)
				col2, r2, err := w.runWith(t, newCollector(t), cfg, all, nil, nil, func(r *Runner) {
					for _, q := range reqs {
						if got := r.Holds(q.ID); got != tc.held {
							t.Errorf("Holds(%s) = %v, want %v", q.ID, got, tc.held)
						}
					}
					if r.Holds("n0") {
						t.Error("Holds(n0) for a new request")
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				orgs := w.sim.Stats().Orgs
				if tc.held {
					checkAllOK(t, more, col2)
					if n := len(col2.results) + len(col2.reroutes); n != 2 {
						t.Errorf("%d outcomes, want the 2 new requests' only", n)
					}
					if st := r2.Stats(); st.Held != 10 || st.Submitted != 2 {
						t.Errorf("stats %+v", st)
					}
					if orgs["batch"].Batches.Created != 1 || orgs["low_prio"].Batches.Created != 1 {
						t.Errorf("created: batch %d, low_prio %d", orgs["batch"].Batches.Created, orgs["low_prio"].Batches.Created)
					}
					if !strings.Contains(logs.String(), "held back") {
						t.Errorf("no warning logged:\n%s", logs.String())
					}
					if open, _ := HasJournal(w.journal); !open {
						t.Error("the held chunk was closed in the journal")
					}

					// The real key is back: the batch is harvested, not
					// created again.
					kb.SetOrg(real)
					col3, _, err := w.run(t, cfg, all, col2.done(), nil)
					if err != nil {
						t.Fatal(err)
					}
					checkAllOK(t, all, col2, col3)
					if got := w.created(); got != 2 {
						t.Errorf("simulator saw %d creates, want 2", got)
					}
				} else {
					checkAllOK(t, all, col2)
					if orgs["batch"].Batches.Created != 0 || orgs["low_prio"].Batches.Created != 2 {
						t.Errorf("created: batch %d, low_prio %d", orgs["batch"].Batches.Created, orgs["low_prio"].Batches.Created)
					}
					if open, _ := HasJournal(w.journal); open {
						t.Error("journal left open")
					}
				}
				if b := w.sim.Stats().Bodies; b.ExtraAnswers != 0 {
					t.Errorf("paid twice: %+v", b)
				}
			})
		})
	}
}

// TestAdoptedNotCancelled: a batch adopted through the list is never
// cancelled by the stuck or deadline escape: it is given up, its requests
// re-routed.
func TestAdoptedNotCancelled(t *testing.T) {
	for _, deadline := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, slowBatches, "batch")
				reqs := requests(20)
				cfg := w.config()
				cfg.ChunkSize, cfg.StuckAfter = 20, 15*time.Minute
				if deadline {
					cfg.StuckAfter, cfg.Deadline = -1, time.Now().Add(15*time.Minute)
				}
				_, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "after-create" })
				if !errors.Is(err, errCrash) {
					t.Fatalf("first run: %v", err)
				}
				col, r, err := w.run(t, cfg, reqs, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if st := r.Stats(); st.Adopted != 1 || st.Cancelled != 0 || st.GivenUp != 1 {
					t.Errorf("stats %+v", st)
				}
				if len(col.reroutes) != 20 {
					t.Fatalf("%d re-routed, %d results", len(col.reroutes), len(col.results))
				}
				for id, why := range col.reroutes {
					if !strings.Contains(why, "adopted") {
						t.Errorf("%s: %s", id, why)
					}
				}
				if bs := w.sim.Stats().Orgs["batch"].Batches; bs.CancelRequests != 0 || bs.Created != 1 {
					t.Errorf("simulator batches %+v", bs)
				}
				ops := journalOps(t, w.journal)
				if count(ops, opCancel) != 0 || count(ops, opAbandoned) != 1 {
					t.Errorf("journal ops %v", ops)
				}
			})
		})
	}
}

// TestAdoptPrefersAfterIntent: a colleague's batch with the same request
// count, created a minute before the intent (inside the clock-skew
// window), is not adopted when ours is listed after the intent.
func TestAdoptPrefersAfterIntent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		var body strings.Builder
		body.WriteString(bodyOpen)
		for i, q := range requests(10) {
			if i > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"custom_id":"colleague-%d","params":%s}`, i, q.Params)
		}
		body.WriteString(bodyClose)
		rec := w.callBody(t, "POST", "/v1/messages/batches", sim.FakeKeyBatch, []byte(body.String()))
		if rec.Code != 200 {
			t.Fatalf("colleague's create: %d %s", rec.Code, rec.Body)
		}
		var cb api.MessageBatch
		if err := json.Unmarshal(rec.Body.Bytes(), &cb); err != nil || cb.ID == "" {
			t.Fatalf("colleague's create: %s", rec.Body)
		}
		colleague := cb.ID
		time.Sleep(time.Minute)

		reqs := requests(10)
		cfg := w.config()
		_, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "after-create" })
		if !errors.Is(err, errCrash) {
			t.Fatalf("first run: %v", err)
		}
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if st := r.Stats(); st.Adopted != 1 || st.Created != 0 {
			t.Errorf("stats %+v", st)
		}
		for id, res := range col.results {
			if res.BatchID == colleague {
				t.Fatalf("%s answered from the colleague's batch", id)
			}
		}
	})
}

// TestDeadlineMin: a batch's deadline is the earlier of Config.Deadline
// and its expiry + ExpiryGrace; the cancel happens at it, not a poll
// later.
func TestDeadlineMin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		deadline   time.Duration // Config.Deadline from the start
		expiry     time.Duration // the simulator's batch lifetime
		failPolls  bool          // retrieves fail: the batch's end is never seen
		wantCancel func(intent, expires time.Time) time.Time
	}{
		{"deadline before expiry", 15 * time.Minute, 24 * time.Hour, false,
			func(intent, _ time.Time) time.Time { return intent.Add(15 * time.Minute) }},
		{"expiry before deadline", 5 * time.Hour, time.Hour, true,
			func(_, expires time.Time) time.Time { return expires.Add(DefaultExpiryGrace) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, func(c *sim.Config) {
					slowBatches(c)
					c.Batch.Expiry = sim.Duration(tc.expiry)
				}, "batch")
				if tc.failPolls {
					w.tap.failRetrieve = func() bool { return true }
				}
				start := time.Now()
				reqs := requests(20)
				cfg := w.config()
				cfg.ChunkSize, cfg.StuckAfter, cfg.Deadline = 20, -1, start.Add(tc.deadline)
				cfg.PollMax = time.Minute // a poll lands on the deadline only by design
				col, _, err := w.run(t, cfg, reqs, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if n := len(col.results) + len(col.reroutes); n != 20 {
					t.Fatalf("%d outcomes", n)
				}
				var intent, expires, cancel time.Time
				for _, rec := range journalRecords(t, w.journal) {
					switch rec.Op {
					case opIntent:
						intent = rec.At
					case opCreated:
						expires = *rec.ExpiresAt
					case opCancel:
						cancel = rec.At
					}
				}
				want := tc.wantCancel(intent, expires)
				if cancel.Before(want) || cancel.After(want.Add(100*time.Millisecond)) {
					t.Errorf("cancelled at +%v, want +%v", cancel.Sub(start), want.Sub(start))
				}
				if el := time.Since(start); el > tc.deadline && tc.deadline > 2*time.Hour {
					t.Errorf("run took %v: it waited for the user's deadline", el)
				}
			})
		})
	}
}

// TestTurnaroundCutoff: no batch is created when it could not end by the
// deadline; requests waiting for a window are re-routed at the cutoff
// itself.
func TestTurnaroundCutoff(t *testing.T) {
	t.Run("no time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld(t, nil, "batch")
			reqs := requests(20)
			cfg := w.config()
			cfg.Deadline, cfg.Turnaround = time.Now().Add(time.Hour), 2*time.Hour
			col, _, err := w.run(t, cfg, reqs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(col.reroutes) != 20 || w.tap.createCount() != 0 {
				t.Fatalf("%d re-routed, %d creates", len(col.reroutes), w.tap.createCount())
			}
			for id, why := range col.reroutes {
				if !strings.Contains(why, "turnaround") {
					t.Errorf("%s: %s", id, why)
				}
			}
		})
	})
	t.Run("wake at the cutoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld(t, func(c *sim.Config) {
				slowBatches(c)
				c.Batch.ProcessingRate = 0.001
			}, "batch")
			start := time.Now()
			reqs := requests(30)
			cfg := w.config()
			cfg.ChunkSize, cfg.WindowPerOrg, cfg.StuckAfter = 10, 10, -1
			cfg.Deadline, cfg.Turnaround = start.Add(30*time.Minute), 10*time.Minute
			col, _, err := w.run(t, cfg, reqs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(col.results) + len(col.reroutes); n != 30 || w.tap.createCount() != 1 {
				t.Fatalf("%d outcomes, %d creates", n, w.tap.createCount())
			}
			for _, q := range reqs[10:] {
				at := col.rerouteAt[q.ID].Sub(start)
				if at != 20*time.Minute || !strings.Contains(col.reroutes[q.ID], "turnaround") {
					t.Errorf("%s re-routed at +%v: %s", q.ID, at, col.reroutes[q.ID])
				}
			}
		})
	})
}

// TestDurableNonBlocking: Durable returns, and results keep flowing, while
// the journal is stuck writing; the harvested records follow once it is
// not.
func TestDurableNonBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := requests(20)
		gate := make(chan struct{})
		var blocked atomic.Bool
		col := newCollector(t)
		var err error
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _, err = w.runWith(t, col, w.config(), reqs, nil, nil, func(r *Runner) {
				r.j.hook = func(rec record) {
					if rec.Op == opHarvested {
						blocked.Store(true)
						<-gate // a disk that does not answer
					}
				}
			})
		})
		time.Sleep(time.Hour)
		if !blocked.Load() {
			t.Fatal("the journal was never blocked: the test tests nothing")
		}
		if n := col.outcomes(); n != 20 {
			t.Errorf("%d outcomes while the journal was blocked, want 20", n)
		}
		ret := make(chan struct{})
		go func() {
			col.r.Durable([]string{"r0", "r1"}) // again: ignored, and never blocks
			close(ret)
		}()
		synctest.Wait()
		select {
		case <-ret:
		default:
			t.Error("Durable blocked on the journal")
		}
		close(gate)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if ops := journalOps(t, w.journal); count(ops, opHarvested) != 2 {
			t.Errorf("journal ops %v", ops)
		}
	})
}

// TestCreate413: a create refused as too large is split until it passes;
// a single request refused is re-routed.
func TestCreate413(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.tap.maxCreateBytes = 400
		reqs := requests(20)
		huge := request("huge", 64, strings.Repeat("word ", 100))
		col, _, err := w.run(t, w.config(), append(reqs, huge), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if why := col.reroutes["huge"]; !strings.Contains(why, "413") {
			t.Errorf("huge: re-route %q", why)
		}
		delete(col.reroutes, "huge")
		checkAllOK(t, reqs, col)
		refused, sent := 0, 0
		for _, cc := range w.tap.creates {
			if cc.status == 413 {
				refused++
			} else {
				sent += cc.n
				if cc.bytes > 400 {
					t.Errorf("a create of %d bytes was forwarded", cc.bytes)
				}
			}
		}
		if refused < 2 || sent != 20 {
			t.Errorf("%d refused, %d requests sent", refused, sent)
		}
		if open, err := HasJournal(w.journal); open || err != nil {
			t.Errorf("journal: open %v, %v", open, err)
		}
	})
}

// TestCreate4xx: a create refused with another 4xx re-routes its requests
// and warns once.
func TestCreate4xx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.tap.createStatus = 422
		var logs logBuffer
		cfg := w.config()
		cfg.Logger = logs.logger()
		reqs := requests(30)
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.reroutes) != 30 || w.tap.createCount() != 3 {
			t.Fatalf("%d re-routed, %d creates", len(col.reroutes), w.tap.createCount())
		}
		for id, why := range col.reroutes {
			if !strings.Contains(why, "HTTP 422") {
				t.Errorf("%s: %s", id, why)
			}
		}
		if n := strings.Count(logs.String(), "create was refused"); n != 1 {
			t.Errorf("warned %d times:\n%s", n, logs.String())
		}
	})
}

// TestSubmitCancelled: a Submit given up by its context is not counted.
func TestSubmitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		cfg := w.config()
		cfg.OnResult, cfg.OnReroute = func(Result) {}, func(*call.Request, string) {}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		reqs := requests(2*r.in.max + 1)
		for _, q := range reqs[:r.in.max] { // Run is not running: nothing is cut
			if err := r.Submit(t.Context(), q); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := r.Submit(ctx, reqs[r.in.max]); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Submit on a full queue: %v", err)
		}
		if st := r.Stats(); st.Submitted != int64(r.in.max) {
			t.Errorf("Submitted = %d, want %d", st.Submitted, r.in.max)
		}
	})
}

// TestWindows: the default window is 5 chunks; WindowByOrg sets an org's
// window by its label.
func TestWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil)
		cfg := w.config()
		cfg.OnResult, cfg.OnReroute = func(Result) {}, func(*call.Request, string) {}
		cfg.WindowPerOrg = 0
		cfg.WindowByOrg = map[string]int{"batch": 30, "low_prio": -1, "nobody": 7}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := map[string]int{}
		for _, o := range r.orgs {
			got[o.label] = o.window
		}
		want := map[string]int{"batch": 30, "high_prio": 50, "low_prio": 50}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("windows %v, want %v", got, want)
		}
		if r.q.target != 10 {
			t.Errorf("target %d", r.q.target)
		}
	})
}

// TestProvisionalOnly: with no key whose org is known, New still opens and
// every request is re-routed.
func TestProvisionalOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.keys[0].SetOrg(ProvisionalOrgPrefix + "batch")
		reqs := requests(5)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.reroutes) != 5 || w.tap.createCount() != 0 {
			t.Errorf("%d re-routed, %d creates", len(col.reroutes), w.tap.createCount())
		}
	})
}

// TestCancel: Cancel cancels every batch running at once (not at its next
// scheduled poll), gives back the requests not yet in a batch with its
// reason and the cancelled batches' rows as "sluice cancelled" re-routes,
// and creates nothing more; a batch adopted through the list is never
// cancelled.
func TestCancel(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld(t, slowBatches, "batch")
			cfg := w.config()
			cfg.WindowPerOrg = 20 // two chunks of 10 run, the third waits
			cfg.PollMin, cfg.PollMax = 5*time.Minute, 5*time.Minute
			reqs := requests(30)
			var cancelsAtOnce atomic.Int64
			cancelsAtOnce.Store(-1)
			col, r, err := w.runWith(t, newCollector(t), cfg, reqs, nil, nil, func(r *Runner) {
				go func() {
					for w.created() < 2 {
						time.Sleep(time.Second)
					}
					time.Sleep(30 * time.Second) // past the read-after-write window
					r.Cancel("the caller cancelled")
					time.Sleep(time.Second)
					cancelsAtOnce.Store(w.sim.Stats().Orgs["batch"].Batches.CancelRequests)
				}()
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(col.results) != 0 || len(col.reroutes) != 30 {
				t.Fatalf("%d results, %d re-routed; want all 30 given back", len(col.results), len(col.reroutes))
			}
			byWhy := map[string]int{}
			for _, why := range col.reroutes {
				byWhy[why]++
			}
			if byWhy["the caller cancelled"] != 10 || byWhy["canceled row (sluice cancelled the batch)"] != 20 {
				t.Errorf("re-route reasons %v", byWhy)
			}
			bs := w.sim.Stats().Orgs["batch"].Batches
			if bs.Created != 2 || bs.CancelRequests != 2 {
				t.Errorf("simulator batches %+v; want 2 created, both cancelled", bs)
			}
			if st := r.Stats(); st.Cancelled != 2 {
				t.Errorf("stats %+v", st)
			}
			if ops := journalOps(t, w.journal); count(ops, opCancel) != 2 {
				t.Errorf("journal ops %v", ops)
			}
			// Polls are 5 minutes apart: the cancels must not wait for one.
			if n := cancelsAtOnce.Load(); n != 2 {
				t.Errorf("%d cancel requests a second after Cancel, want 2", n)
			}
		})
	})
	t.Run("after the intent is written", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld(t, slowBatches, "batch")
			cfg := w.config()
			var runner *Runner
			cancelAt := func(p string) bool {
				if p == "before-create" {
					runner.Cancel("the caller cancelled")
				}
				return false
			}
			col, _, err := w.runWith(t, newCollector(t), cfg, requests(10), nil, cancelAt, func(r *Runner) { runner = r })
			if err != nil {
				t.Fatal(err)
			}
			if n := w.created(); n != 0 || len(col.reroutes) != 10 {
				t.Errorf("%d batches created, %d requests re-routed; want none created, all 10 given back", n, len(col.reroutes))
			}
			if ops := journalOps(t, w.journal); count(ops, opIntent) != 1 || count(ops, opAbandoned) != 1 {
				t.Errorf("journal ops %v: want the intent closed as abandoned", ops)
			}
		})
	})
	t.Run("adopted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w := newWorld(t, slowBatches, "batch")
			reqs := requests(20)
			cfg := w.config()
			cfg.ChunkSize, cfg.StuckAfter = 20, 15*time.Minute
			if _, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "after-create" }); !errors.Is(err, errCrash) {
				t.Fatalf("first run: %v", err)
			}
			_, r, err := w.runWith(t, newCollector(t), cfg, reqs, nil, nil, func(r *Runner) { r.Cancel("the caller cancelled") })
			if err != nil {
				t.Fatal(err)
			}
			if st := r.Stats(); st.Adopted != 1 || st.Cancelled != 0 {
				t.Errorf("stats %+v", st)
			}
			if bs := w.sim.Stats().Orgs["batch"].Batches; bs.CancelRequests != 0 {
				t.Errorf("simulator batches %+v: an adopted batch was cancelled", bs)
			}
		})
	})
}
