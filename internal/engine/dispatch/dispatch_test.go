package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// world is a simulator and a client wired to it.
type world struct {
	sim    *sim.Server
	client *client.Client
	pool   *keys.Pool
}

func threeKeys(t *testing.T) *keys.Pool {
	t.Helper()
	p, err := simtest.Pool(sim.Default())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loopbackWorld serves the simulator on real loopback TCP.
func loopbackWorld(t *testing.T, mutate func(*sim.Config)) *world {
	t.Helper()
	s, base := simtest.Loopback(t, mutate)
	return &world{sim: s, client: client.New(client.Config{BaseURL: base, MaxConns: 512}), pool: threeKeys(t)}
}

// pipeWorld serves the simulator on an in-memory network, for synctest.
func pipeWorld(t *testing.T, mutate func(*sim.Config)) *world {
	t.Helper()
	cfg := sim.Default()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := pipenet.Listen()
	go s.Serve(ln)
	c := client.New(client.Config{BaseURL: "http://sim", Dial: ln.DialContext, MaxConns: 1024})
	t.Cleanup(func() {
		c.CloseIdle()
		s.Shutdown(context.Background())
	})
	return &world{sim: s, client: c, pool: threeKeys(t)}
}

func (w *world) dispatcher(t *testing.T, cfg dispatch.Config) *dispatch.Dispatcher {
	t.Helper()
	if _, err := dispatch.Discover(t.Context(), w.client, w.pool.Keys(), "claude-sonnet-4-5"); err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Keys = w.client, w.pool.Keys()
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func requests(n int, model string) []*dispatch.Request {
	out := make([]*dispatch.Request, n)
	for i := range out {
		p, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 128,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Judge answer number %d.", i)}}})
		out[i] = &dispatch.Request{ID: fmt.Sprintf("r%d", i), Params: p, Model: model, MaxTokens: 128, EstInput: int64(len(p) / 4)}
	}
	return out
}

// runAll submits reqs and collects every Result.
func runAll(t *testing.T, d *dispatch.Dispatcher, reqs []*dispatch.Request, onResult func(int)) map[string]dispatch.Result {
	t.Helper()
	ctx := t.Context()
	var mu sync.Mutex
	got := map[string]dispatch.Result{}
	go func() {
		for _, r := range reqs {
			if err := d.Submit(ctx, r, func(res dispatch.Result) {
				mu.Lock()
				if _, dup := got[res.Request.ID]; dup {
					t.Errorf("two results for %s", res.Request.ID)
				}
				got[res.Request.ID] = res
				n := len(got)
				mu.Unlock()
				if onResult != nil {
					onResult(n)
				}
			}); err != nil {
				t.Errorf("submit: %v", err)
				return
			}
		}
		d.Close()
	}()
	if err := d.Serve(ctx); err != nil {
		t.Fatalf("serve: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

// checkAnswers asserts every request has one OK result whose text is the
// simulator's answer to exactly that request.
func checkAnswers(t *testing.T, reqs []*dispatch.Request, got map[string]dispatch.Result) map[string]int {
	t.Helper()
	perOrg := map[string]int{}
	for _, r := range reqs {
		res, ok := got[r.ID]
		if !ok {
			t.Fatalf("no result for %s", r.ID)
		}
		if res.Class != api.ClassOK {
			t.Fatalf("%s: class %s status %d err %v body %s", r.ID, res.Class, res.Status, res.Err, res.Body)
		}
		var m api.Message
		if err := json.Unmarshal(res.Body, &m); err != nil || !strings.HasPrefix(m.Content[0].Text, sim.AnswerTag(r.Params)) {
			t.Fatalf("%s: answer does not belong to its request: %s", r.ID, res.Body)
		}
		perOrg[res.Org]++
	}
	return perOrg
}

func TestEndToEndThreeOrgsLoopback(t *testing.T) {
	w := loopbackWorld(t, func(c *sim.Config) { c.TimeScale = 200 })
	d := w.dispatcher(t, dispatch.Config{})
	reqs := requests(3000, "claude-sonnet-4-5")
	got := runAll(t, d, reqs, nil)
	perOrg := checkAnswers(t, reqs, got)
	if len(perOrg) != 3 {
		t.Fatalf("requests went to %v, want all three orgs", perOrg)
	}
	st := w.sim.Stats()
	if st.Bodies.DistinctAnswered != 3000 || st.Bodies.AnsweredMoreThanOnce != 0 {
		t.Fatalf("sim answered %+v, want 3000 distinct, none twice", st.Bodies)
	}
	for name, o := range st.Orgs {
		if pc := o.Pools[api.PoolSonnet4].PeakConcurrency; pc > 100 {
			t.Errorf("org %s peak concurrency %d above the Sonnet cap of 100", name, pc)
		}
	}
}

func TestFaultsAreRetried(t *testing.T) {
	w := loopbackWorld(t, func(c *sim.Config) {
		c.TimeScale = 200
		c.Faults.P500, c.Faults.P529, c.Faults.PReset = 0.05, 0.05, 0.02
	})
	d := w.dispatcher(t, dispatch.Config{Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	reqs := requests(1500, "claude-haiku-4-5")
	got := runAll(t, d, reqs, nil)
	checkAnswers(t, reqs, got)
	st, _ := d.Snapshot()
	if st.RetriesOverloaded == 0 || st.RetriesFailed == 0 {
		t.Fatalf("expected retries of both kinds, got %+v", st)
	}
	// Only a dropped connection can make the simulator answer twice.
	var resets int64
	for _, o := range w.sim.Stats().Orgs {
		resets += o.Pools[api.PoolHaiku45].Resets
	}
	if b := w.sim.Stats().Bodies; b.ExtraAnswers > resets {
		t.Fatalf("%d extra answers but only %d resets", b.ExtraAnswers, resets)
	}
}

// TestKeyRevokedMidRun runs in fake time: a key revoked for good is held
// back at its first refusals, re-probed, and dead once its refusals have
// lasted keys.DefaultHealth.DeadAfter; its requests move to the live keys and none is
// lost.
func TestKeyRevokedMidRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, nil)
		d := w.dispatcher(t, dispatch.Config{})
		reqs := requests(9000, "claude-sonnet-4-5")
		var once sync.Once
		var revokedAt time.Time
		start := time.Now()
		got := runAll(t, d, reqs, func(n int) {
			if n == 300 {
				once.Do(func() { w.sim.SetKeyStatus("batch", sim.KeyRevoked); revokedAt = time.Now() })
			}
		})
		checkAnswers(t, reqs, got)
		t.Logf("%d requests in %v of fake time, revoked at %v", len(reqs), time.Since(start), revokedAt.Sub(start))
		if time.Since(revokedAt) < keys.DefaultHealth.DeadAfter+keys.DefaultHealth.MaxProbeGap {
			t.Fatalf("the run lasted only %v after the revocation: too short to see the key die", time.Since(revokedAt))
		}
		k, _ := w.pool.ByLabel("batch")
		if dead, _ := k.Dead(); !dead {
			t.Fatal("the revoked key should be dead once its refusals lasted keys.DefaultHealth.DeadAfter")
		}
		_, lanes := d.Snapshot()
		for _, l := range lanes {
			if l.Org == "batch" && !l.Dead {
				t.Fatal("the batch org's lane should be dead")
			}
		}
		// Only the requests in flight when it was revoked (at most its cap
		// of 100) and one re-probe per gap (1+2+4+8+15+15+15 s: seven)
		// were refused.
		if denied := w.sim.Stats().Orgs["batch"].Keys["batch"].Denied; denied == 0 || denied > 100+8 {
			t.Fatalf("the revoked key was refused %d times; want 1..108", denied)
		}
	})
}

// TestAuthBlipKillsNoKey runs in fake time: every key is refused (401) for
// five seconds mid-run, then accepted again. No key dies, the run does not
// end with "no live key", every request is answered.
func TestAuthBlipKillsNoKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, nil)
		d := w.dispatcher(t, dispatch.Config{})
		reqs := requests(2000, "claude-sonnet-4-5")
		labels := []string{"high_prio", "batch", "low_prio"}
		var once sync.Once
		got := runAll(t, d, reqs, func(n int) {
			if n == 300 {
				once.Do(func() {
					for _, l := range labels {
						w.sim.SetKeyStatus(l, sim.KeyRevoked)
					}
					time.AfterFunc(5*time.Second, func() {
						for _, l := range labels {
							w.sim.SetKeyStatus(l, sim.KeyActive)
						}
					})
				})
			}
		})
		checkAnswers(t, reqs, got)
		var denied int64
		for _, l := range labels {
			k, _ := w.pool.ByLabel(l)
			if dead, why := k.Dead(); dead {
				t.Errorf("key %s died of a 5 s auth outage: %s", l, why)
			}
			if k.Suspect(api.PoolSonnet4) {
				t.Errorf("key %s still suspect after the outage", l)
			}
			org := k.Org()
			for o, st := range w.sim.Stats().Orgs {
				if o == org || st.Keys[l].Denied > 0 {
					denied += st.Keys[l].Denied
				}
			}
		}
		if denied == 0 {
			t.Fatal("no request was refused: the outage did not happen")
		}
	})
}

// TestNoLiveKeyStopsCleanly runs in fake time: every key refused for good,
// by 401 (the key) or 403 (the model): once the refusals have lasted, Serve
// ends with ErrNoLiveKey and every request is ended Aborted, none final.
func TestNoLiveKeyStopsCleanly(t *testing.T) {
	for _, status := range []string{sim.KeyRevoked, sim.KeyForbidden} {
		t.Run(status, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := pipeWorld(t, nil)
				d := w.dispatcher(t, dispatch.Config{})
				for _, l := range []string{"high_prio", "batch", "low_prio"} {
					w.sim.SetKeyStatus(l, status)
				}
				reqs := requests(50, "claude-sonnet-4-5")
				var mu sync.Mutex
				aborted := 0
				go func() {
					for _, r := range reqs {
						d.Submit(t.Context(), r, func(res dispatch.Result) {
							mu.Lock()
							defer mu.Unlock()
							if !res.Aborted || !errors.Is(res.Err, dispatch.ErrNoLiveKey) {
								t.Errorf("%s: class %q aborted %v err %v, want aborted with ErrNoLiveKey", res.Request.ID, res.Class, res.Aborted, res.Err)
							}
							aborted++
						})
					}
					d.Close()
				}()
				start := time.Now()
				if err := d.Serve(t.Context()); err != dispatch.ErrNoLiveKey {
					t.Fatalf("serve = %v, want ErrNoLiveKey", err)
				}
				if took := time.Since(start); took < keys.DefaultHealth.DeadAfter {
					t.Errorf("gave up after %v, before the refusals lasted %v", took, keys.DefaultHealth.DeadAfter)
				}
				mu.Lock()
				defer mu.Unlock()
				if aborted != len(reqs) {
					t.Fatalf("%d aborted results for %d requests", aborted, len(reqs))
				}
			})
		})
	}
}

func TestFinalErrorsAreNotRetried(t *testing.T) {
	w := loopbackWorld(t, func(c *sim.Config) { c.TimeScale = 200 })
	d := w.dispatcher(t, dispatch.Config{})
	bad := &dispatch.Request{ID: "bad", Model: "claude-nope", Params: []byte(`{"model":"claude-nope","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`)}
	got := runAll(t, d, []*dispatch.Request{bad}, nil)
	r := got["bad"]
	if r.Class != api.ClassFinal || r.Status != 404 || r.Attempts != 1 {
		t.Fatalf("unknown model: %+v", r)
	}
}

// TestPacesUnderTightLimits runs in fake time: three orgs at 120 RPM each
// (2/s), 900 requests. The buckets start full (3 × 120 less the reserve),
// then the job runs at the refill rate. Throughput must sit at the binding
// limit with almost no 429s.
func TestPacesUnderTightLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, func(c *sim.Config) {
			for i := range c.Orgs {
				c.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: 120, ITPM: 1e9, OTPM: 1e9}
			}
		})
		d := w.dispatcher(t, dispatch.Config{Lane: lane.Config{Reserve: -1}})
		reqs := requests(900, "claude-sonnet-4-5")
		start := time.Now()
		got := runAll(t, d, reqs, nil)
		took := time.Since(start)
		checkAnswers(t, reqs, got)
		var limited, admitted int64
		for _, o := range w.sim.Stats().Orgs {
			limited += o.Pools[api.PoolSonnet4].RateLimited
			admitted += o.Pools[api.PoolSonnet4].Admitted
		}
		// 360 fit the full buckets; the other 540 need 540/6 = 90 s.
		ideal := 90 * time.Second
		t.Logf("900 requests in %v of fake time (ideal ≈ %v), %d 429s of %d", took, ideal, limited, admitted+limited)
		if float64(limited) > 0.01*float64(admitted) {
			t.Errorf("%d 429s for %d admitted: more than 1%%", limited, admitted)
		}
		if took > ideal*13/10 {
			t.Errorf("took %v, more than 1.3× the ideal %v", took, ideal)
		}
	})
}

// TestShouldRetryTrueIsBounded: x-should-retry: true on a 400 is retried,
// but no more than the failure budget.
func TestShouldRetryTrueIsBounded(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("anthropic-organization-id", "org-1")
		if r.URL.Path == "/v1/messages/count_tokens" {
			w.Write([]byte(`{"input_tokens":1}`))
			return
		}
		calls.Add(1)
		w.Header().Set("x-should-retry", "true")
		w.WriteHeader(400)
		w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"try again"}}`))
	}))
	t.Cleanup(srv.Close)
	w := &world{client: client.New(client.Config{BaseURL: srv.URL}), pool: threeKeys(t)}
	d := w.dispatcher(t, dispatch.Config{Retry: dispatch.RetryPolicy{MaxFailed: 4, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	got := runAll(t, d, requests(1, "claude-sonnet-4-5"), nil)
	if r := got["r0"]; r.Class != api.ClassTransport || r.Attempts != 4 || calls.Load() != 4 {
		t.Fatalf("result %+v after %d calls; want 4 attempts then a transport error", r, calls.Load())
	}
}

// TestAbortEndsServe: Close then Abort with attempts in flight ends every
// request Aborted and Serve returns promptly (before a slow answer could).
func TestAbortEndsServe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, func(c *sim.Config) { c.Faults.PSlow, c.Faults.SlowFactor = 1, 1000 })
		d := w.dispatcher(t, dispatch.Config{})
		var mu sync.Mutex
		results := 0
		for _, r := range requests(20, "claude-sonnet-4-5") {
			go d.Submit(t.Context(), r, func(res dispatch.Result) {
				mu.Lock()
				results++
				mu.Unlock()
				if !res.Aborted {
					t.Errorf("%s finished %+v; want aborted", res.Request.ID, res)
				}
			})
		}
		served := make(chan error, 1)
		go func() { served <- d.Serve(t.Context()) }()
		synctest.Wait() // every goroutine waits: the attempts are in flight (slow answers)
		inFlight := 0
		for _, o := range w.sim.Stats().Orgs {
			for _, l := range o.Pools {
				inFlight += l.InFlight
			}
		}
		if inFlight == 0 {
			t.Fatal("no attempt is in flight at the simulator: the test tests nothing")
		}
		d.Close()
		d.Abort()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after Abort")
		}
		mu.Lock()
		defer mu.Unlock()
		if results != 20 {
			t.Fatalf("%d results for 20 requests", results)
		}
	})
}
