package route_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// driveWorld is the simulator on an in-memory network (so the fake clock
// of testing/synctest runs it), its keys with their orgs, and a run's
// requests: what a Fanout drives in these tests, with a real dispatcher as
// the sync side.
type driveWorld struct {
	client  *client.Client
	keys    []*keys.Key
	journal string
	reqs    []*dispatch.Request // line n is reqs[n-1]
	creates []createCall        // the batch creates seen, with their status
	mu      sync.Mutex
	// firstCreateRetryAfter, if set, answers the first batch create with
	// a 429 and this retry-after.
	firstCreateRetryAfter string
}

// roundTrip is an http.RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func bodyOf(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

type createCall struct {
	at     time.Time
	status int
}

func newDriveWorld(t *testing.T, n int, faults sim.Faults) *driveWorld {
	t.Helper()
	cfg := sim.Default()
	cfg.Faults = faults
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := pipenet.Listen()
	go s.Serve(ln)
	w := &driveWorld{journal: filepath.Join(t.TempDir(), "journal")}
	tr := &http.Transport{DialContext: ln.DialContext, MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		s.Shutdown(context.Background())
	})
	env := map[string]string{keys.EnvAPIKey: sim.FakeKeyHighPrio, keys.EnvBatch: sim.FakeKeyBatch, keys.EnvLowPrio: sim.FakeKeyLowPrio}
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(env)})
	if err != nil {
		t.Fatal(err)
	}
	w.client = client.New(client.Config{BaseURL: "http://sim", Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		create := r.Method == "POST" && r.URL.Path == "/v1/messages/batches"
		w.mu.Lock()
		refuse := create && w.firstCreateRetryAfter != "" && len(w.creates) == 0
		w.mu.Unlock()
		if refuse {
			w.mu.Lock()
			w.creates = append(w.creates, createCall{time.Now(), 429})
			w.mu.Unlock()
			h := http.Header{"Retry-After": {w.firstCreateRetryAfter}, "Content-Type": {"application/json"}}
			body := api.NewErrorBody(api.ErrRateLimit, "", "rate limited")
			b, _ := json.Marshal(body)
			return &http.Response{StatusCode: 429, Header: h, Body: bodyOf(b), Request: r}, nil
		}
		resp, err := tr.RoundTrip(r)
		if create && err == nil {
			w.mu.Lock()
			w.creates = append(w.creates, createCall{time.Now(), resp.StatusCode})
			w.mu.Unlock()
		}
		return resp, err
	})})
	w.keys = pool.Keys()
	if _, err := dispatch.Discover(t.Context(), w.client, w.keys, "claude-haiku-4-5"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p, _ := json.Marshal(map[string]any{"model": "claude-haiku-4-5", "max_tokens": 32,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("question %d", i)}}})
		w.reqs = append(w.reqs, &dispatch.Request{ID: fmt.Sprintf("r%05d", i+1), Params: p, Model: "claude-haiku-4-5",
			MaxTokens: 32, ParamsHash: jsonl.ParamsHash(p)})
	}
	return w
}

func byLabel(ks []*keys.Key, label string) []*keys.Key {
	for _, k := range ks {
		if k.Label() == label {
			return []*keys.Key{k}
		}
	}
	return nil
}

// answers counts the answers each custom_id got, and how.
type answers struct {
	mu      sync.Mutex
	n       map[string]int
	sync    int
	batch   int
	aborted int
	// onBatch, if set, hears of each batch answer's custom_id (under mu).
	onBatch func(id string)
}

func newAnswers() *answers { return &answers{n: map[string]int{}} }

func (a *answers) sink(r dispatch.Result, batchID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.onBatch != nil && batchID != "" {
		a.onBatch(r.Request.ID)
	}
	if r.Aborted {
		a.aborted++
		return
	}
	a.n[r.Request.ID]++
	if batchID != "" {
		a.batch++
	} else {
		a.sync++
	}
}

func (a *answers) done(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[id] > 0
}

// onceEach fails the test when an id was answered more than once across
// the answers given, or (all) when one was never answered.
func onceEach(t *testing.T, reqs []*dispatch.Request, all bool, as ...*answers) (answered int) {
	t.Helper()
	for _, q := range reqs {
		n := 0
		for _, a := range as {
			a.mu.Lock()
			n += a.n[q.ID]
			a.mu.Unlock()
		}
		switch {
		case n > 1:
			t.Errorf("%s answered %d times", q.ID, n)
		case n == 0 && all:
			t.Errorf("%s never answered", q.ID)
		}
		if n > 0 {
			answered++
		}
	}
	return answered
}

// driveRun is one run's fan-out and sync side, driven to its end.
type driveRun struct {
	w       *driveWorld
	ans     *answers
	routing route.Routing
	lines   int // > 0: the run may re-plan
	// replan, if set, proposes the routings (Driver.Replan) every few ms.
	replan   func(route.Progress) (route.Routing, bool)
	rerouted func(route.Routing, error)
	ctx      context.Context
	done     func(string) bool // already answered (a resume)
	// feedErr, if set, is side s's feeder error: a non-nil one ends each
	// of its passes at once, before it takes a line.
	feedErr func(s route.Side) error
	// unanswered, if set, is Driver.Unanswered; accepted hears of each
	// request a feeder's pass submitted without an error, givenBack of
	// each the batch path gave back (Config.Reroute).
	unanswered func(id string)
	// bctx, if set, is Driver.BatchContext.
	bctx      context.Context
	accepted  func(s route.Side, id string)
	givenBack func(id string)
}

// readEvery is how long the feeders take to read one line (the fake
// clock's): a pass lasts long enough for re-plans to land in it.
const readEvery = 100 * time.Microsecond

type driveResult struct {
	out      route.Driven
	applied  int
	refused  int
	reclaims int
	sent     map[route.Side]int
}

func routeOf(r string, share float64) route.Routing {
	return route.Routing{Route: r, BatchShare: share, Batch: batch.Config{ChunkSize: 25, PollMin: time.Second, PollMax: 10 * time.Second}}
}

func (dr *driveRun) run(t *testing.T) driveResult {
	t.Helper()
	w := dr.w
	ctx := dr.ctx
	if ctx == nil {
		ctx = t.Context()
	}
	d, err := dispatch.New(dispatch.Config{Client: w.client, Keys: w.keys, Retry: dispatch.RetryPolicy{BaseBackoff: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	go func() { served <- d.Serve(serveCtx) }()
	syncSink := func(r dispatch.Result) { dr.ans.sink(r, "") }
	done := dr.done
	if done == nil {
		done = func(string) bool { return false }
	}
	fan, err := route.Open(route.Config{Routing: dr.routing, Client: w.client, Keys: w.keys, Journal: w.journal, NoSync: true,
		Lines: dr.lines, Done: done, Sink: dr.ans.sink,
		Reroute: func(req *dispatch.Request, _ string) {
			if dr.givenBack != nil {
				dr.givenBack(req.ID)
			}
			d.Submit(serveCtx, req, syncSink)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var res driveResult
	res.sent = map[route.Side]int{}
	var mu sync.Mutex
	drv := route.Driver{
		Feed: func(ctx context.Context, s route.Side, _ bool, take func(int, string) bool, submit func(context.Context, *dispatch.Request) error) error {
			if dr.feedErr != nil {
				if err := dr.feedErr(s); err != nil {
					return err
				}
			}
			for n, q := range w.reqs {
				time.Sleep(readEvery)
				if done(q.ID) {
					continue
				}
				if !take(n+1, q.ID) {
					continue
				}
				c := *q
				if err := submit(ctx, &c); err != nil {
					return err
				}
				if dr.accepted != nil {
					dr.accepted(s, q.ID)
				}
			}
			return nil
		},
		Unanswered:   dr.unanswered,
		BatchContext: dr.bctx,
		Sync:         func(ctx context.Context, q *dispatch.Request) error { return d.Submit(ctx, q, syncSink) },
		Prepare:      func(s route.Side, _ *dispatch.Request) { mu.Lock(); res.sent[s]++; mu.Unlock() },
		Every:        3 * time.Millisecond,
		Replan:       dr.replan,
		Reclaim: func(toBatch func(*dispatch.Request) bool) []*dispatch.Request {
			back, err := d.Reclaim(ctx, toBatch)
			if err != nil {
				return nil
			}
			mu.Lock()
			res.reclaims += len(back)
			mu.Unlock()
			return back
		},
		Rerouted: func(r route.Routing, err error) {
			mu.Lock()
			if err == nil {
				res.applied++
			} else {
				res.refused++
			}
			mu.Unlock()
			if dr.rerouted != nil {
				dr.rerouted(r, err)
			}
		},
	}
	res.out = fan.Drive(ctx, drv)
	d.Close()
	if ctx.Err() != nil {
		stopServe() // an interrupt: stop admitting, attempts in flight finish
	}
	<-served
	if br := fan.Batch(); br != nil {
		if err := br.Close(); err != nil {
			t.Errorf("closing the batch path: %v", err)
		}
	}
	return res
}

// cycle proposes batch, splits and sync in turn, one a call, for the
// first n calls.
func cycle(n int) func(route.Progress) (route.Routing, bool) {
	rs := []route.Routing{routeOf(route.Batch, 0), routeOf(route.Split, 0.3), routeOf(route.Sync, 0), routeOf(route.Split, 0.8)}
	i := 0
	return func(route.Progress) (route.Routing, bool) {
		if i >= n {
			return route.Routing{}, false
		}
		r := rs[i%len(rs)]
		i++
		return r, true
	}
}

// TestDriveAnswersEachOnce: on every starting route, with no re-plan, Drive
// gives every request one answer, from the side the routing names.
func TestDriveAnswersEachOnce(t *testing.T) {
	for _, r := range []route.Routing{routeOf(route.Sync, 0), routeOf(route.Batch, 0), routeOf(route.Split, 0.5)} {
		t.Run(r.Route, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newDriveWorld(t, 200, sim.Faults{})
				a := newAnswers()
				res := (&driveRun{w: w, ans: a, routing: r}).run(t)
				if res.out.Feed != nil || res.out.Batch != nil {
					t.Fatalf("drive: %+v", res.out)
				}
				onceEach(t, w.reqs, true, a)
				switch r.Route {
				case route.Sync:
					if a.batch != 0 {
						t.Errorf("%d batch answers on the sync route", a.batch)
					}
				case route.Batch:
					if a.sync != 0 {
						t.Errorf("%d sync answers on the batch route", a.sync)
					}
				default:
					if a.sync == 0 || a.batch == 0 {
						t.Errorf("a split answered %d sync, %d batch", a.sync, a.batch)
					}
				}
			})
		})
	}
}

// TestDriveReroutesEveryFewMilliseconds: the routing changes every 3 ms
// (the fake clock's) between sync, batch and splits while both sides
// send; every request is still answered exactly once, and a re-plan to
// batch opens the batch path of a run that began on sync.
func TestDriveReroutesEveryFewMilliseconds(t *testing.T) {
	for _, start := range []string{route.Sync, route.Split} {
		t.Run(start, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newDriveWorld(t, 600, sim.Faults{})
				a := newAnswers()
				res := (&driveRun{w: w, ans: a, routing: routeOf(start, 0.5), lines: len(w.reqs), replan: cycle(12)}).run(t)
				if res.out.Feed != nil || res.out.Batch != nil {
					t.Fatalf("drive: %+v", res.out)
				}
				onceEach(t, w.reqs, true, a)
				if res.applied < 2 {
					t.Errorf("%d re-routes applied: the test proves little", res.applied)
				}
				if a.batch == 0 || a.sync == 0 {
					t.Errorf("answered %d sync, %d batch: both sides should have taken some", a.sync, a.batch)
				}
				t.Logf("re-routes %d applied, %d refused; %d reclaimed; sent %v; answers %d sync, %d batch", res.applied, res.refused, res.reclaims, res.sent, a.sync, a.batch)
			})
		})
	}
}

// TestDriveReclaimUnderFaults: the sync side meets 529s and 500s (its
// queue holds retries and requests never sent) when a re-plan sends
// everything to batch: the unsent requests are taken back and answered by
// the batch path, the retries stay sync, batch creates whose answers are
// lost are reconciled — and no request is answered twice or left behind.
func TestDriveReclaimUnderFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newDriveWorld(t, 800, sim.Faults{P529: 0.3, P500: 0.1, PCreateLost: 0.3})
		a := newAnswers()
		calls := 0
		replan := func(route.Progress) (route.Routing, bool) {
			calls++
			if calls == 2 {
				return routeOf(route.Batch, 0), true
			}
			return route.Routing{}, false
		}
		res := (&driveRun{w: w, ans: a, routing: routeOf(route.Sync, 0), lines: len(w.reqs), replan: replan}).run(t)
		if res.out.Feed != nil || res.out.Batch != nil {
			t.Fatalf("drive: %+v", res.out)
		}
		onceEach(t, w.reqs, true, a)
		if res.applied != 1 || res.reclaims == 0 {
			t.Errorf("%d re-routes applied, %d requests reclaimed; want the re-plan to take some back", res.applied, res.reclaims)
		}
		if a.batch == 0 {
			t.Error("no batch answer after the re-plan to batch")
		}
		t.Logf("reclaimed %d; sent %v; answers %d sync, %d batch", res.reclaims, res.sent, a.sync, a.batch)
	})
}

// TestDriveInterruptAroundReplan: the run is interrupted at a re-plan (in
// the same instant it is applied) and just after one (1 ms later), while
// the routing keeps changing; the run ends, no request is answered twice,
// and a resume on the same journal — its batches held, the rest sent again
// — answers every request exactly once across both runs.
func TestDriveInterruptAroundReplan(t *testing.T) {
	for _, after := range []time.Duration{0, time.Millisecond} {
		for _, nth := range []int{1, 3} {
			t.Run(fmt.Sprintf("after=%v/replan=%d", after, nth), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					w := newDriveWorld(t, 500, sim.Faults{P529: 0.1})
					a1 := newAnswers()
					ctx, interrupt := context.WithCancel(t.Context())
					defer interrupt()
					seen := 0
					rerouted := func(_ route.Routing, err error) {
						if err != nil {
							return
						}
						if seen++; seen == nth {
							if after == 0 {
								interrupt()
							} else {
								time.AfterFunc(after, interrupt)
							}
						}
					}
					r1 := (&driveRun{w: w, ans: a1, routing: routeOf(route.Split, 0.5), lines: len(w.reqs), replan: cycle(12), rerouted: rerouted, ctx: ctx}).run(t)
					if seen < nth {
						t.Fatalf("only %d re-plans applied before the end", seen)
					}
					got1 := onceEach(t, w.reqs, false, a1)
					if got1 == len(w.reqs) {
						t.Log("the first run answered everything before the interrupt")
					}
					// The resume: what the first answered is done; open
					// batches hold their requests.
					a2 := newAnswers()
					r2 := (&driveRun{w: w, ans: a2, routing: routeOf(route.Sync, 0), lines: len(w.reqs), done: a1.done}).run(t)
					if r2.out.Feed != nil || r2.out.Batch != nil {
						t.Fatalf("resume: %+v", r2.out)
					}
					onceEach(t, w.reqs, true, a1, a2)
					t.Logf("first run: %d answered (%d sync, %d batch, %d aborted), %v; resume: %d sync, %d batch", got1, a1.sync, a1.batch, a1.aborted, r1.out, a2.sync, a2.batch)
				})
			})
		}
	}
}

// TestBatchPathCapsRetryAfter: a batch create refused with a retry-after
// of a day waits only Config.MaxRetryAfter (the run's --max-retry-after)
// before the next create.
func TestBatchPathCapsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newDriveWorld(t, 50, sim.Faults{})
		w.firstCreateRetryAfter = "86400"
		a := newAnswers()
		const capped = 90 * time.Second
		w.keys = byLabel(w.keys, "batch") // one org: the next create waits for it
		d, err := dispatch.New(dispatch.Config{Client: w.client, Keys: w.keys})
		if err != nil {
			t.Fatal(err)
		}
		fan, err := route.Open(route.Config{Routing: routeOf(route.Batch, 0), Client: w.client, Keys: w.keys, Journal: w.journal, NoSync: true,
			MaxRetryAfter: capped, Sink: a.sink, Reroute: func(*dispatch.Request, string) { t.Error("re-routed to sync") }})
		if err != nil {
			t.Fatal(err)
		}
		out := fan.Drive(t.Context(), route.Driver{
			Feed: func(ctx context.Context, _ route.Side, _ bool, take func(int, string) bool, submit func(context.Context, *dispatch.Request) error) error {
				for n, q := range w.reqs {
					if take(n+1, q.ID) {
						if err := submit(ctx, q); err != nil {
							return err
						}
					}
				}
				return nil
			},
			Sync: func(ctx context.Context, q *dispatch.Request) error {
				return d.Submit(ctx, q, func(dispatch.Result) {})
			},
		})
		fan.Batch().Close()
		if out.Feed != nil || out.Batch != nil {
			t.Fatalf("drive: %+v", out)
		}
		onceEach(t, w.reqs, true, a)
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.creates) < 2 || w.creates[0].status != 429 {
			t.Fatalf("creates %+v; want a 429, then the create", w.creates)
		}
		if gap := w.creates[1].at.Sub(w.creates[0].at); gap < capped || gap > capped+time.Second {
			t.Errorf("created again %v after the 429; want the cap, %v", gap, capped)
		}
	})
}

// TestDriveRefusesStoppedSide: one side's feeder stops at once (an error)
// while the other carries on, and a re-plan then proposes a routing that
// sends requests to the stopped side: Reroute refuses it
// (ErrSideStopped), the routing in force stays, and every request it gives
// the live side is answered once — none is left untaken, or taken back
// from the sync queue for a feeder that will never send it.
func TestDriveRefusesStoppedSide(t *testing.T) {
	for _, tc := range []struct {
		name           string
		start, propose route.Routing
		stopped        route.Side
	}{
		{"batch stopped, re-plan to batch", routeOf(route.Split, 0.5), routeOf(route.Batch, 0), route.SideBatch},
		{"sync stopped, re-plan to a split", routeOf(route.Batch, 0), routeOf(route.Split, 0.5), route.SideSync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newDriveWorld(t, 400, sim.Faults{})
				a := newAnswers()
				feederFailed := errors.New("the feeder failed")
				calls := 0
				replan := func(route.Progress) (route.Routing, bool) {
					if calls++; calls == 2 {
						return tc.propose, true
					}
					return route.Routing{}, false
				}
				var errs []error
				res := (&driveRun{w: w, ans: a, routing: tc.start, lines: len(w.reqs), replan: replan,
					rerouted: func(_ route.Routing, err error) { errs = append(errs, err) },
					feedErr: func(s route.Side) error {
						if s == tc.stopped {
							return feederFailed
						}
						return nil
					}}).run(t)
				if !errors.Is(res.out.Feed, feederFailed) {
					t.Errorf("Driven.Feed %v, want the stopped feeder's error", res.out.Feed)
				}
				if len(errs) != 1 || !errors.Is(errs[0], route.ErrSideStopped) {
					t.Errorf("the re-plan was answered %v; want it refused with ErrSideStopped", errs)
				}
				// The live side's requests, as the routing in force names
				// them: each answered once, by that side.
				var live []*dispatch.Request
				for _, q := range w.reqs {
					if tc.start.ToBatch(q.ID) == (tc.stopped == route.SideSync) {
						live = append(live, q)
					}
				}
				onceEach(t, live, true, a)
				if got := a.sync + a.batch; got != len(live) {
					t.Errorf("%d answers (%d sync, %d batch), want the live side's %d", got, a.sync, a.batch, len(live))
				}
				t.Logf("answers %d sync, %d batch; reclaimed %d", a.sync, a.batch, res.reclaims)
			})
		})
	}
}

// TestDriveSweepsUnanswered: a run on the batch route is interrupted once
// its first batch answers are in, while other batches run upstream; Drive
// hands Driver.Unanswered exactly the requests the batch path accepted and
// neither answered nor gave back — each once — and nothing else.
func TestDriveSweepsUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newDriveWorld(t, 400, sim.Faults{})
		ctx, interrupt := context.WithCancel(t.Context())
		defer interrupt()
		var mu sync.Mutex
		accepted, ended, swept := map[string]bool{}, map[string]bool{}, map[string]int{}
		a := newAnswers()
		a.onBatch = func(id string) {
			mu.Lock()
			ended[id] = true
			mu.Unlock()
			interrupt() // the first answers are in: stop the run
		}
		dr := &driveRun{w: w, ans: a, routing: routeOf(route.Batch, 0), ctx: ctx,
			accepted: func(s route.Side, id string) {
				if s == route.SideBatch {
					mu.Lock()
					accepted[id] = true
					mu.Unlock()
				}
			},
			givenBack: func(id string) {
				mu.Lock()
				ended[id] = true
				mu.Unlock()
			},
			unanswered: func(id string) {
				mu.Lock()
				swept[id]++
				mu.Unlock()
			}}
		dr.run(t)
		mu.Lock()
		defer mu.Unlock()
		want := 0
		for id := range accepted {
			if ended[id] {
				if swept[id] > 0 {
					t.Errorf("%s swept as unanswered, but the batch path answered it or gave it back", id)
				}
				continue
			}
			want++
			if swept[id] != 1 {
				t.Errorf("%s accepted and never answered, swept %d times; want once", id, swept[id])
			}
		}
		for id := range swept {
			if !accepted[id] {
				t.Errorf("%s swept, but the batch path never accepted it", id)
			}
		}
		if want == 0 || len(ended) == 0 {
			t.Errorf("%d accepted, %d answered or given back, %d left: the test proves little", len(accepted), len(ended), want)
		}
		t.Logf("accepted %d, answered or given back %d, swept %d", len(accepted), len(ended), len(swept))
	})
}

// TestDriveStopsFeedingWhenBatchPathFails: on a split, the batch path
// stops for good (its Run returns an error — here its context ends with
// a cause, as a journal failure ends it) while the input is still being
// read: both feeders stop at once, the sync side sends none of the lines
// read after, and Driven.Batch says why.
func TestDriveStopsFeedingWhenBatchPathFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newDriveWorld(t, 400, sim.Faults{})
		a := newAnswers()
		failed := errors.New("the batch path failed")
		bctx, fail := context.WithCancelCause(t.Context())
		defer fail(nil)
		const failAt = 10 * time.Millisecond // the input takes 40 ms to read
		time.AfterFunc(failAt, func() { fail(failed) })
		r := routeOf(route.Split, 0.5)
		res := (&driveRun{w: w, ans: a, routing: r, bctx: bctx}).run(t)
		if !errors.Is(res.out.Batch, failed) {
			t.Errorf("Driven.Batch %v, want the batch path's error", res.out.Batch)
		}
		// The sync lines read by 1 ms after the failure: the most the
		// sync side may have sent.
		most, all := 0, 0
		for n, q := range w.reqs {
			if r.ToBatch(q.ID) {
				continue
			}
			all++
			if time.Duration(n+1)*readEvery <= failAt+time.Millisecond {
				most++
			}
		}
		if got := res.sent[route.SideSync]; got > most {
			t.Errorf("the sync side sent %d of its %d requests; want at most the %d read by 1 ms after the batch path failed", got, all, most)
		}
		onceEach(t, w.reqs, false, a)
		t.Logf("sent %v of %d sync requests; answers %d sync, %d batch; %+v", res.sent, all, a.sync, a.batch, res.out)
	})
}

// TestDriveGivesBackHandoffOfStoppedFeeder: a re-plan to batch takes
// requests back from the sync queue for the batch feeder while that
// feeder is in a pass it then ends with an error: they were never sent,
// so they go back to sync (Config.Reroute), and every request is still
// answered once.
func TestDriveGivesBackHandoffOfStoppedFeeder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newDriveWorld(t, 400, sim.Faults{})
		a := newAnswers()
		var mu sync.Mutex
		batchPasses, stage, givenBack := 0, 0, 0
		feederFailed := errors.New("the batch feeder failed")
		feedErr := func(s route.Side) error {
			if s != route.SideBatch {
				return nil
			}
			mu.Lock()
			batchPasses++
			n := batchPasses
			mu.Unlock()
			if n < 2 {
				return nil
			}
			time.Sleep(20 * time.Millisecond) // the re-plan to batch lands in this pass
			return feederFailed
		}
		replan := func(p route.Progress) (route.Routing, bool) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case stage == 0 && p.Taken >= len(w.reqs)*9/10:
				stage = 1 // the same split again: the batch feeder passes once more
				return routeOf(route.Split, 0.5), true
			case stage == 1 && batchPasses == 2:
				stage = 2
				return routeOf(route.Batch, 0), true
			}
			return route.Routing{}, false
		}
		var errs []error
		res := (&driveRun{w: w, ans: a, routing: routeOf(route.Split, 0.5), lines: len(w.reqs), replan: replan, feedErr: feedErr,
			rerouted:  func(_ route.Routing, err error) { errs = append(errs, err) },
			givenBack: func(string) { mu.Lock(); givenBack++; mu.Unlock() }}).run(t)
		if stage != 2 || len(errs) != 2 || errs[0] != nil || errs[1] != nil {
			t.Fatalf("re-plans answered %v at stage %d; want both applied", errs, stage)
		}
		if res.reclaims == 0 {
			t.Fatal("the re-plan to batch took nothing back from the sync queue: the test proves little")
		}
		if !errors.Is(res.out.Feed, feederFailed) {
			t.Errorf("Driven.Feed %v, want the batch feeder's error", res.out.Feed)
		}
		onceEach(t, w.reqs, true, a)
		t.Logf("reclaimed %d, given back %d; answers %d sync, %d batch", res.reclaims, givenBack, a.sync, a.batch)
	})
}
