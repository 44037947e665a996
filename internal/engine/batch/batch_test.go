package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/sim"
)

func TestFit(t *testing.T) {
	reqs := make([]*call.Request, 0, 50)
	for i := range 50 {
		reqs = append(reqs, request(fmt.Sprintf("id-%d", i), 64, strings.Repeat("x", 10+37*i)))
	}
	sizes := make([]int64, len(reqs))
	for i, q := range reqs {
		sizes[i] = itemSize(q)
	}
	for _, tc := range []struct {
		name     string
		maxN     int
		maxBytes int64
	}{
		{"count", 7, 1 << 30},
		{"bytes", 1000, 4000},
		{"both", 5, 3000},
		{"one too large", 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for off := 0; off < len(reqs); {
				n, size := fit(reqs[off:], sizes[off:], tc.maxN, tc.maxBytes)
				if n < 1 || n > tc.maxN {
					t.Fatalf("fit at %d = %d requests, max %d", off, n, tc.maxN)
				}
				ch := &chunk{wire: wirePrefix("run-1"), index: map[string]int{}}
				for i, q := range reqs[off : off+n] {
					ch.ids = append(ch.ids, q.ID)
					ch.index[q.ID] = i
				}
				body := buildBody(reqs[off:off+n], size, ch.wireID)
				if int64(len(body)) != size {
					t.Fatalf("body is %d bytes, fit said %d", len(body), size)
				}
				if n > 1 && size > tc.maxBytes {
					t.Fatalf("%d requests in %d bytes > %d", n, size, tc.maxBytes)
				}
				// The next request would not have fitted.
				if off+n < len(reqs) && n < tc.maxN && size+1+sizes[off+n] <= tc.maxBytes {
					t.Fatalf("fit stopped at %d requests with room left", n)
				}
				var c api.BatchCreate
				if err := json.Unmarshal(body, &c); err != nil || len(c.Requests) != n {
					t.Fatalf("body does not decode to %d requests: %v", n, err)
				}
				for i, br := range c.Requests {
					// On the wire, the chunk's id for the request; mapped back, the caller's.
					q := reqs[off+i]
					if back, ok := ch.rowID(br.CustomID); br.CustomID != ch.wireID(i) || !ok || back != q.ID || string(br.Params) != string(q.Params) {
						t.Fatalf("item %d = %s (back to %q), want %s for %s, params byte for byte", i, br.CustomID, back, ch.wireID(i), q.ID)
					}
				}
				off += n
			}
		})
	}
}

func TestConfigLimits(t *testing.T) {
	c := Config{Client: newClientStub(), OnResult: func(Result) {}, OnReroute: func(*call.Request, string) {},
		ChunkSize: 1_000_000, MaxChunkBytes: 1 << 40}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.ChunkSize != api.MaxBatchRequests || c.MaxChunkBytes != api.MaxBatchBytes {
		t.Errorf("limits = %d requests, %d bytes; want the API's %d, %d", c.ChunkSize, c.MaxChunkBytes, api.MaxBatchRequests, api.MaxBatchBytes)
	}
	c = Config{Client: newClientStub(), OnResult: func(Result) {}, OnReroute: func(*call.Request, string) {}}
	c.defaults()
	if c.ChunkSize != 500 || c.MaxChunkBytes != 250<<20 || c.WindowPerOrg != 2500 {
		t.Errorf("defaults = %d, %d, %d", c.ChunkSize, c.MaxChunkBytes, c.WindowPerOrg)
	}
}

// TestChunkBytes: chunks are cut by body bytes as well as by count, and a
// request larger than any chunk is re-routed, not sent.
func TestChunkBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		var reqs []*call.Request
		for i := range 40 {
			reqs = append(reqs, request(fmt.Sprintf("b%d", i), 64, strings.Repeat("word ", 100+i)))
		}
		huge := request("huge", 64, strings.Repeat("word ", 2000))
		cfg := w.config()
		cfg.ChunkSize, cfg.MaxChunkBytes, cfg.WindowPerOrg = 25, 5000, 1000
		col, _, err := w.run(t, cfg, append(reqs, huge), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if why := col.reroutes["huge"]; !strings.Contains(why, "larger than a batch") {
			t.Errorf("huge request: reroute %q", why)
		}
		delete(col.reroutes, "huge")
		checkAllOK(t, reqs, col)
		n := 0
		for _, cc := range w.tap.creates {
			if cc.bytes > 5000 || cc.n > 25 {
				t.Errorf("create of %d requests, %d bytes", cc.n, cc.bytes)
			}
			n += cc.n
		}
		if n != len(reqs) || len(w.tap.creates) < 2 {
			t.Errorf("%d creates carried %d requests", len(w.tap.creates), n)
		}
	})
}

// TestWindowAndSpread runs 600 requests over three orgs with a window of
// 60 requests each: the simulator never holds more than 60 requests in
// unended batches of one org, every org is used, every id answered once.
func TestWindowAndSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.ReadAfterWrite = 0 })
		reqs := requests(600)
		cfg := w.config()
		cfg.ChunkSize, cfg.WindowPerOrg = 20, 60

		var mu sync.Mutex
		peak := map[string]int64{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			fake := map[string]string{"high_prio": sim.FakeKeyHighPrio, "batch": sim.FakeKeyBatch, "low_prio": sim.FakeKeyLowPrio}
			for {
				for org, key := range fake {
					rec := w.call(t, "GET", "/v1/messages/batches?limit=1000", key)
					var p api.Page[api.MessageBatch]
					if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
						t.Errorf("list: %s", rec.Body)
						return
					}
					var n int64
					for _, b := range p.Data {
						if b.ProcessingStatus != api.BatchEnded {
							n += int64(total(b.RequestCounts))
						}
					}
					mu.Lock()
					peak[org] = max(peak[org], n)
					mu.Unlock()
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		})
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		for org, p := range peak {
			if p > 60 {
				t.Errorf("org %s held %d requests in unended batches, window 60", org, p)
			}
			if p < 40 {
				t.Errorf("org %s never held more than %d requests: the window is not used", org, p)
			}
		}
		orgs := map[string]int{}
		for _, res := range col.results {
			orgs[res.Org]++
		}
		if len(orgs) != 3 {
			t.Errorf("requests per org: %v, want all three used", orgs)
		}
		st := r.Stats()
		if st.Created != 30 || st.Ended != 30 || st.Results != 600 {
			t.Errorf("stats %+v", st)
		}
		if b := w.sim.Stats().Bodies; b.ExtraAnswers != 0 || b.DistinctAnswered != 600 {
			t.Errorf("bodies %+v", b)
		}
		ops := journalOps(t, w.journal)
		if count(ops, opIntent) != 30 || count(ops, opCreated) != 30 || count(ops, opHarvested) != 30 {
			t.Errorf("journal ops: %d intents, %d created, %d harvested", count(ops, opIntent), count(ops, opCreated), count(ops, opHarvested))
		}
	})
}

// TestCrashRecovery stops a run at each crash point, as a dead process
// would, and resumes from the journal: every id gets exactly one result,
// and no chunk is created twice.
func TestCrashRecovery(t *testing.T) {
	for _, tc := range []struct {
		point   string
		nth     int   // crash at the nth time the point is reached
		creates int64 // batches the simulator saw created in all
		adopted int64 // batches the resumed run adopted
	}{
		{"before-create", 2, 3, 0},
		{"after-create", 2, 3, 1},
		{"mid-poll", 4, 3, 0},
		{"mid-harvest", 13, 3, 0},
	} {
		t.Run(tc.point, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil, "batch")
				reqs := requests(30)
				cfg := w.config()
				cfg.ChunkSize, cfg.WindowPerOrg = 10, 30
				var hits atomic.Int32
				crash := func(p string) bool { return p == tc.point && int(hits.Add(1)) == tc.nth }
				col1, _, err := w.run(t, cfg, reqs, nil, crash)
				if !errors.Is(err, errCrash) {
					t.Fatalf("first run: %v, want the crash", err)
				}
				done := col1.done()
				col2, r2, err := w.run(t, cfg, reqs, done, nil)
				if err != nil {
					t.Fatalf("resumed run: %v", err)
				}
				checkAllOK(t, reqs, col1, col2)
				if got := w.created(); got != tc.creates {
					t.Errorf("simulator saw %d creates, want %d", got, tc.creates)
				}
				if got := r2.Stats().Adopted; got != tc.adopted {
					t.Errorf("adopted %d, want %d", got, tc.adopted)
				}
				if b := w.sim.Stats().Bodies; b.ExtraAnswers != 0 {
					t.Errorf("paid twice: %+v", b)
				}
				if tc.point == "mid-harvest" && (len(done) == 0 || len(done)%10 == 0) {
					t.Errorf("crash left %d results: not mid-harvest", len(done))
				}
			})
		})
	}
}

// TestAmbiguousCreate: a create whose answer is lost is found in the list
// and adopted, not created again.
func TestAmbiguousCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		var n atomic.Int32
		w.tap.failCreate = func() string {
			if n.Add(1) == 1 {
				return "drop-after"
			}
			return ""
		}
		reqs := requests(20)
		col, r, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if got := w.created(); got != 2 {
			t.Errorf("simulator saw %d creates, want 2", got)
		}
		if st := r.Stats(); st.Adopted != 1 || st.Created != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestNotFoundAfterCreate: the read-after-write 404s are tolerated.
func TestNotFoundAfterCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.ReadAfterWrite = sim.Duration(20 * time.Second) }, "batch")
		reqs := requests(20)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if w.tap.notFound == 0 {
			t.Error("no 404 was seen: the test does not test anything")
		}
	})
}

// TestExpiry: a starved batch expires; its rows are re-routed.
func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) {
			c.Batch.StarveAbove, c.Batch.StarveFor, c.Batch.Expiry = 5, sim.Duration(3*time.Hour), sim.Duration(time.Hour)
		}, "batch")
		reqs := requests(15) // chunks of 10 (starved) and 5
		cfg := w.config()
		cfg.StuckAfter = -1
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.results) != 5 || len(col.reroutes) != 10 {
			t.Fatalf("%d results, %d re-routed", len(col.results), len(col.reroutes))
		}
		for id, why := range col.reroutes {
			if why != "expired row" {
				t.Errorf("%s: %s", id, why)
			}
		}
		checkAllOK(t, reqs[10:], &collector{results: col.results})
	})
}

// TestStuckEscape: a batch not ended StuckAfter after create (or at the
// user's Deadline) is cancelled; the rows it had processed are harvested,
// the canceled rest re-routed. The crash case stops right after the cancel
// intent: the resumed run re-drives the cancel and still re-routes the
// canceled rows.
func TestStuckEscape(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline bool
		crash    bool
	}{
		{"stuck", false, false},
		{"deadline", true, false},
		{"crash after intent", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, func(c *sim.Config) {
					c.Batch.AdmissionBase, c.Batch.AdmissionPerRequest = sim.Duration(10*time.Minute), 0
					c.Batch.ProcessingRate = 0.05 // one request per 20 s
				}, "batch")
				reqs := requests(20)
				cfg := w.config()
				cfg.ChunkSize, cfg.StuckAfter = 20, 15*time.Minute
				if tc.deadline {
					cfg.StuckAfter, cfg.Deadline = -1, time.Now().Add(15*time.Minute)
				}
				var crash func(string) bool
				if tc.crash {
					crash = func(p string) bool { return p == "after-cancel-intent" }
				}
				col, _, err := w.run(t, cfg, reqs, nil, crash)
				if tc.crash {
					if !errors.Is(err, errCrash) {
						t.Fatalf("first run: %v", err)
					}
					if n := w.sim.Stats().Orgs["batch"].Batches.CancelRequests; n != 0 {
						t.Fatalf("cancelled before the crash: %d", n)
					}
					col, _, err = w.run(t, cfg, reqs, col.done(), nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				ok, rerouted := len(col.results), len(col.reroutes)
				if ok == 0 || rerouted == 0 || ok+rerouted != 20 {
					t.Fatalf("%d harvested, %d re-routed; want a split of 20", ok, rerouted)
				}
				for id, why := range col.reroutes {
					if !strings.Contains(why, "sluice cancelled") {
						t.Errorf("%s: %s", id, why)
					}
				}
				bs := w.sim.Stats().Orgs["batch"].Batches
				if bs.CancelRequests != 1 || bs.Created != 1 {
					t.Errorf("simulator batches %+v", bs)
				}
				ops := journalOps(t, w.journal)
				if count(ops, opCancel) != 1 || count(ops, opHarvested) != 1 {
					t.Errorf("journal ops %v", ops)
				}
			})
		})
	}
}

// TestResumeParked: a resumed chunk's batch ends before its requests are
// submitted again; its rows wait (parked) and are delivered as the
// requests arrive. A request whose params changed since the journal gets
// a new batch, not the old row.
func TestResumeParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := requests(10)
		cfg := w.config()
		col1, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "mid-poll" })
		if !errors.Is(err, errCrash) || len(col1.results) != 0 {
			t.Fatalf("first run: %v, %d results", err, len(col1.results))
		}
		changed := request("r3", 64, "a different question")
		reqs2 := append(append(append([]*call.Request{}, reqs[:3]...), changed), reqs[4:]...)

		col := newCollector(t)
		cfg.OnResult, cfg.OnReroute = col.onResult, col.onReroute
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		col.r = r
		errc := make(chan error, 1)
		go func() { errc <- r.Run(t.Context()) }()
		time.Sleep(30 * time.Minute) // the batch ends and is harvested
		if n := r.parkedRows(); n != 10 {
			t.Fatalf("%d rows parked, want 10", n)
		}
		for _, q := range reqs2 {
			if err := r.Submit(t.Context(), q); err != nil {
				t.Fatal(err)
			}
		}
		r.CloseInput()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		r.Close()
		checkAllOK(t, reqs2, col)
		if got := w.created(); got != 2 {
			t.Errorf("simulator saw %d creates, want 2 (the changed request's own)", got)
		}
		if col.results["r3"].BatchID == col.results["r0"].BatchID {
			t.Error("the changed request got the old row")
		}
		ops := journalOps(t, w.journal)
		if count(ops, opHarvested) != 2 {
			t.Errorf("journal ops %v", ops)
		}
	})
}

// TestStopInputKeepsParkedChunks: a resumed chunk's batch ended and its
// rows wait (parked) for requests the run never submits, because the run
// was cut short (Ctrl-C, a write error). StopInput must leave the chunk
// open in the journal, so the third run still harvests it — closing it (as
// CloseInput does for a finished input) made the next run batch, and pay
// for, those requests again (found by sluice-bench chaos).
func TestStopInputKeepsParkedChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := requests(10)
		cfg := w.config()
		if _, _, err := w.run(t, cfg, reqs, nil, func(p string) bool { return p == "mid-poll" }); !errors.Is(err, errCrash) {
			t.Fatalf("first run: %v", err)
		}
		c2 := cfg
		col2 := newCollector(t)
		c2.OnResult, c2.OnReroute = col2.onResult, col2.onReroute
		r, err := New(c2)
		if err != nil {
			t.Fatal(err)
		}
		col2.r = r
		errc := make(chan error, 1)
		go func() { errc <- r.Run(t.Context()) }()
		time.Sleep(30 * time.Minute) // the batch ends; its rows are parked
		r.StopInput()                // cut short: nothing was submitted
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		r.Close()
		if ops := journalOps(t, w.journal); count(ops, opHarvested)+count(ops, opDropped) != 0 {
			t.Fatalf("the cut-short run closed the resumed chunk: journal ops %v", ops)
		}
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if got := w.created(); got != 1 {
			t.Errorf("simulator saw %d creates, want 1: the third run paid again", got)
		}
	})
}

// TestRowClasses: an invalid request is a final errored result; a batch
// cancelled by someone else gives transport results, not re-routes.
func TestRowClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.AdmissionBase = sim.Duration(5 * time.Minute) }, "batch")
		reqs := requests(9)
		reqs = append(reqs, request("bad", 0, "max_tokens 0 is invalid in a batch"))
		cfg := w.config()
		col := newCollector(t)
		cfg.OnResult, cfg.OnReroute = col.onResult, col.onReroute
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		col.r = r
		errc := make(chan error, 1)
		go func() { errc <- r.Run(t.Context()) }()
		for _, q := range reqs {
			r.Submit(t.Context(), q)
		}
		// A second chunk, cancelled from the console once it exists.
		other := []*call.Request{request("x1", 64, "one"), request("x2", 64, "two")}
		for _, q := range other {
			r.Submit(t.Context(), q)
		}
		r.CloseInput()
		for w.tap.createCount() < 2 {
			time.Sleep(time.Second)
		}
		time.Sleep(3 * time.Second) // past the read-after-write window
		ids := listIDs(t, w)
		if len(ids) != 2 {
			t.Fatalf("batches %v", ids)
		}
		if rec := w.call(t, "POST", "/v1/messages/batches/"+ids[0]+"/cancel", sim.FakeKeyBatch); rec.Code != 200 {
			t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		r.Close()
		bad := col.results["bad"]
		if bad.Class != api.ClassFinal || !strings.Contains(string(bad.Body), "invalid_request_error") {
			t.Errorf("bad: class %q body %s", bad.Class, bad.Body)
		}
		for _, id := range []string{"x1", "x2"} {
			if res := col.results[id]; res.Class != api.ClassTransport || !strings.Contains(string(res.Body), "outside sluice") {
				t.Errorf("%s: class %q body %s", id, res.Class, res.Body)
			}
		}
		delete(col.results, "bad")
		delete(col.results, "x1")
		delete(col.results, "x2")
		checkAllOK(t, reqs[:9], col)
	})
}

// listIDs returns the batch org's batch ids, newest first.
func listIDs(t *testing.T, w *world) []string {
	t.Helper()
	rec := w.call(t, "GET", "/v1/messages/batches", sim.FakeKeyBatch)
	var p api.Page[api.MessageBatch]
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("list: %s", rec.Body)
	}
	var ids []string
	for _, b := range p.Data {
		ids = append(ids, b.ID)
	}
	return ids
}

// TestDeadKey: an org whose key is revoked loses its batch path; its
// chunks go to the other orgs; with none left, requests are re-routed.
func TestDeadKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch", "low_prio")
		if err := w.sim.SetKeyStatus("batch", sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
		reqs := requests(30)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if st := w.sim.Stats().Orgs; st["batch"].Batches.Created != 0 || st["low_prio"].Batches.Created != 3 {
			t.Errorf("created: batch %d, low_prio %d", st["batch"].Batches.Created, st["low_prio"].Batches.Created)
		}
		if err := w.sim.SetKeyStatus("low_prio", sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
		w.journal += ".2"
		more := []*call.Request{request("m1", 64, "m1"), request("m2", 64, "m2")}
		col, _, err = w.run(t, w.config(), more, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.reroutes) != 2 || len(col.results) != 0 {
			t.Errorf("no live org: %d results, %d re-routed", len(col.results), len(col.reroutes))
		}
	})
}

// TestAuthBlipKeepsTheOrg: the only org's key is refused for five seconds
// (an auth outage), then accepted again. The key is re-probed, not killed:
// every request is answered from a batch on that org, none re-routed.
func TestAuthBlipKeepsTheOrg(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		if err := w.sim.SetKeyStatus("batch", sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(5*time.Second, func() { w.sim.SetKeyStatus("batch", sim.KeyActive) })
		reqs := requests(30)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if len(col.reroutes) != 0 {
			t.Errorf("%d requests re-routed after a 5 s auth outage", len(col.reroutes))
		}
		if dead, why := w.key(t, "batch").Dead(); dead {
			t.Errorf("the key died of a 5 s outage: %s", why)
		}
		if denied := w.sim.Stats().Orgs["batch"].Keys["batch"].Denied; denied == 0 || denied > 6 {
			t.Errorf("the key was refused %d times in a 5 s outage; want 1..6 (re-probed at 1, 2, 4 s gaps)", denied)
		}
	})
}

// TestJournalRepair: a torn last line is cut; a bad line before the last
// is refused.
func TestJournalRepair(t *testing.T) {
	dir := t.TempDir()
	good := `{"op":"run","v":1,"at":"2026-01-01T00:00:00Z"}` + "\n"
	path := dir + "/torn"
	os.WriteFile(path, []byte(good+`{"op":"intent","chu`), 0o600)
	j, _, chunks, err := openJournal(path, true)
	if err != nil || len(chunks) != 0 {
		t.Fatalf("torn: %v, %d chunks", err, len(chunks))
	}
	j.close()
	if b, _ := os.ReadFile(path); string(b) != good {
		t.Errorf("after repair: %q", b)
	}
	path = dir + "/bad"
	os.WriteFile(path, []byte(good+"not json\n"+good), 0o600)
	if _, _, _, err := openJournal(path, true); !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("corrupt middle line: %v", err)
	}
	path = dir + "/hash"
	in := record{Op: opIntent, Chunk: "c1", N: 1, IDs: []string{"a"}, Params: []string{"p"}, Hash: "wrong"}
	b, _ := json.Marshal(in)
	os.WriteFile(path, append(b, '\n'), 0o600)
	if _, _, _, err := openJournal(path, true); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Errorf("bad hash: %v", err)
	}
}

// TestLongLines: a results line far longer than bufio.Scanner's 64 KB
// default is read whole.
func TestLongLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Output = sim.OutputModel{Min: 30000, Max: 30000} }, "batch")
		reqs := []*call.Request{request("long1", 40000, "write a lot"), request("long2", 40000, "write more")}
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if n := len(col.results["long1"].Body); n < 128<<10 {
			t.Errorf("message of %d bytes: the test needs lines over 64 KB", n)
		}
	})
}

// TestErroredRowsRerouted: rows errored for another reason than an invalid
// request are re-routed to sync, never recorded as final.
func TestErroredRowsRerouted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Batch.ErrorRate = 0.5 }, "batch")
		reqs := requests(40)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		errored := w.sim.Stats().Orgs["batch"].Batches.Errored
		if errored == 0 || int64(len(col.reroutes)) != errored || len(col.results)+len(col.reroutes) != 40 {
			t.Fatalf("%d errored rows, %d re-routed, %d results", errored, len(col.reroutes), len(col.results))
		}
		for id, why := range col.reroutes {
			if why != "errored row (api_error)" {
				t.Errorf("%s: %s", id, why)
			}
		}
		for id, res := range col.results {
			if res.Class != api.ClassOK {
				t.Errorf("%s: class %s", id, res.Class)
			}
		}
	})
}

func TestErrorOf(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want api.ErrorType
	}{
		{`{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`, api.ErrInvalidRequest},
		{`{"type":"invalid_request_error","message":"m"}`, api.ErrInvalidRequest},
		{`{"type":"error","error":{"type":"api_error","message":"m"}}`, api.ErrAPI},
		{`null`, ""},
		{``, ""},
	} {
		if got, _ := errorOf(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("errorOf(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestResultsNotFoundRightAfterEnd: the API may answer a results download
// with 404 for a moment after the batch ended. A few are retried and the
// batch harvested; a 404 that lasts gives the batch up (re-routed) after
// exactly maxResultsNotFound retries, spaced by the doubling delay; and the
// 404s do not spend the budget of other download failures.
func TestResultsNotFoundRightAfterEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  func(k int32) int // the k-th download's status, 0 served
		harvest bool
	}{
		{"transient", func(k int32) int { return map[bool]int{true: 404}[k <= 3] }, true},
		{"lasting", func(int32) int { return 404 }, false},
		{"404s then 5xx", func(k int32) int {
			switch {
			case k <= maxResultsNotFound:
				return 404
			case k <= maxResultsNotFound+maxHarvestTries-1:
				return 500
			}
			return 0
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil, "batch")
				var n atomic.Int32
				var first, last time.Time
				w.tap.resultsStatus = func() int {
					k := n.Add(1)
					st := tc.status(k)
					if st == 404 {
						if first.IsZero() {
							first = time.Now()
						}
						last = time.Now()
					}
					return st
				}
				reqs := requests(10)
				cfg := w.config()
				col, r, err := w.run(t, cfg, reqs, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if tc.harvest {
					checkAllOK(t, reqs, col)
					return
				}
				if len(col.results) != 0 || len(col.reroutes) != len(reqs) || r.Stats().GivenUp != 1 {
					t.Errorf("%d results, %d re-routed, stats %+v: want all re-routed, the batch given up", len(col.results), len(col.reroutes), r.Stats())
				}
				if got := n.Load(); got != maxResultsNotFound+1 {
					t.Errorf("%d downloads answered 404, want %d", got, maxResultsNotFound+1)
				}
				// The retries wait PollMin, doubling, at most PollMax.
				var want time.Duration
				for i, d := 0, cfg.PollMin; i < maxResultsNotFound; i, d = i+1, min(2*d, cfg.PollMax) {
					want += d
				}
				if got := last.Sub(first); got < want || got > want+time.Second {
					t.Errorf("the 404s spanned %v, want %v (the doubling delay)", got, want)
				}
			})
		})
	}
}

// TestWireIDs: a chunk's wire ids are its own — another chunk's, a
// caller's id, a wrong length or an index past the chunk map to nothing —
// and a chunk journaled before wire ids keeps the caller's ids.
func TestWireIDs(t *testing.T) {
	mk := func(id string, wire bool, ids ...string) *chunk {
		c := &chunk{id: id, ids: ids, index: map[string]int{}}
		if wire {
			c.wire = wirePrefix(id)
		}
		for i, x := range ids {
			c.index[x] = i
		}
		return c
	}
	a, b := mk("run-a-1", true, "q1", "q2"), mk("run-b-1", true, "q1", "q2")
	if a.wireID(1) == b.wireID(1) {
		t.Fatal("two chunks share a wire id")
	}
	if len(a.wireID(0)) != wireIDLen {
		t.Fatalf("wire id %q is not %d long", a.wireID(0), wireIDLen)
	}
	for _, bad := range []string{b.wireID(0), "q1", a.wire + "000002", a.wire + "-00001", a.wire + "00001", ""} {
		if id, ok := a.rowID(bad); ok {
			t.Errorf("rowID(%q) = %q: another's id taken as the chunk's", bad, id)
		}
	}
	if id, ok := a.rowID(a.wireID(1)); !ok || id != "q2" {
		t.Errorf("rowID(own) = %q, %v", id, ok)
	}
	old := mk("run-old-1", false, "q1")
	if old.wireID(0) != "q1" {
		t.Errorf("a chunk without a prefix sends %q, want the caller's id", old.wireID(0))
	}
	if id, ok := old.rowID("q1"); !ok || id != "q1" {
		t.Errorf("old rowID = %q, %v", id, ok)
	}
}
