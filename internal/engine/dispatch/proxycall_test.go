package dispatch_test

// What a call the proxy forwards gets from the dispatcher: whole stream
// events only, the idle cut, prompt withdrawal, OnWait, and budget kept for
// work the API did.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/keys"
)

// pipeDispatcher serves h on an in-memory network (for synctest bubbles)
// and returns a serving dispatcher on the given keys (label → org), and
// its client.
func pipeDispatcher(t *testing.T, h http.Handler, cfg dispatch.Config, orgs map[string]string) (*dispatch.Dispatcher, *client.Client, *keys.Pool) {
	t.Helper()
	return pipeDispatcherCtx(t, context.Background(), h, cfg, orgs)
}

// pipeDispatcherCtx is pipeDispatcher with Serve's context derived from
// parent: cancelling parent stops the dispatcher.
func pipeDispatcherCtx(t *testing.T, parent context.Context, h http.Handler, cfg dispatch.Config, orgs map[string]string) (*dispatch.Dispatcher, *client.Client, *keys.Pool) {
	t.Helper()
	ln := pipenet.Listen()
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	env := map[string]string{}
	for i, v := range []string{keys.EnvAPIKey, keys.EnvBatch, keys.EnvLowPrio} {
		if _, ok := orgs[[]string{"high_prio", "batch", "low_prio"}[i]]; ok {
			env[v] = fmt.Sprintf("sk-ant-test-fake-key-%010d", i+1)
		}
	}
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(env), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Keys() {
		org, ok := orgs[k.Label()]
		if !ok {
			org = "org-fake"
		}
		k.SetOrg(org)
	}
	cfg.Client, cfg.Keys = client.New(client.Config{BaseURL: "http://fake", Dial: ln.DialContext, MaxConns: 64}), p.Keys()
	if cfg.Retry.BaseBackoff == 0 {
		cfg.Retry = dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	}
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(parent)
	go d.Serve(ctx)
	t.Cleanup(func() {
		d.Close()
		cancel()
		d.Abort()
		<-d.Done()
		srv.Close()
		cfg.Client.CloseIdle()
		ln.Close()
	})
	return d, cfg.Client, p
}

// TestStreamCutMidEventIsDropped: an event the upstream's end cuts in
// half never reaches the sink, so a relay can end the stream with an
// event of its own that parses.
func TestStreamCutMidEventIsDropped(t *testing.T) {
	f := &fake{steps: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) {
			streamHead(w)
			fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_de")
			w.(http.Flusher).Flush()
			dropConnection(w)
		},
	}}
	d, _ := fakeDispatcher(t, f, dispatch.Config{})
	var s sink
	r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
	if r.Class != api.ClassTransport {
		t.Errorf("class %q (err %v), want transport", r.Class, r.Err)
	}
	if got := s.types(); strings.Join(got, ",") != "message_start" {
		t.Errorf("events %v, want only the whole message_start", got)
	}
	for _, ev := range s.events {
		if !strings.HasSuffix(string(ev), "\n\n") {
			t.Errorf("the sink got an unfinished event %q", ev)
		}
	}
}

// TestStreamIdleCutsStalledStream: a stream that stops sending events
// (the connection stays open) is cut after Config.StreamIdle as a lost
// connection, and its lane slot comes back. Fake time: the default
// minute passes at once.
func TestStreamIdleCutsStalledStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			streamHead(w)
			<-r.Context().Done() // stalls, connection open
		})
		d, _, _ := pipeDispatcher(t, h, dispatch.Config{}, map[string]string{"high_prio": "org-fake"})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		var s sink
		r := d.Stream(ctx, streamRequest("claude-sonnet-4-5"), nil, &s)
		if r.Class != api.ClassTransport || r.Err == nil || !strings.Contains(r.Err.Error(), "no event for") {
			t.Fatalf("Result class %q aborted %v err %v, want transport after the idle limit", r.Class, r.Aborted, r.Err)
		}
		if waited := time.Since(start); waited != dispatch.DefaultStreamIdle {
			t.Errorf("cut after %s of fake time, want %s", waited, dispatch.DefaultStreamIdle)
		}
		if got := s.types(); strings.Join(got, ",") != "message_start" {
			t.Errorf("events %v", got)
		}
		synctest.Wait()
		_, lanes := d.Snapshot()
		for _, l := range lanes {
			if l.State.InFlight != 0 {
				t.Errorf("lane %s/%s still holds %d slots", l.Org, l.Pool, l.State.InFlight)
			}
		}
	})
}

// TestStreamIdleResetsOnEvents: events that come more often than the
// idle limit keep a long stream alive.
func TestStreamIdleResetsOnEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			streamHead(w)
			for range 5 {
				time.Sleep(40 * time.Second)
				event(w, "ping", `{"type":"ping"}`)
			}
			streamTail(w)
		})
		d, _, _ := pipeDispatcher(t, h, dispatch.Config{}, map[string]string{"high_prio": "org-fake"})
		var s sink
		r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
		if r.Class != api.ClassOK {
			t.Fatalf("class %q err %v: a stream with an event every 40 s was cut", r.Class, r.Err)
		}
	})
}

// TestWithdrawnRequestLeavesAtOnce: a request withdrawn while it waits
// behind a busy slot — not at the head of its queue — gets its Result at
// once and stops counting toward MaxQueued (so it does not keep Serve
// running after Close either).
func TestWithdrawnRequestLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
		})
		d, _, _ := pipeDispatcher(t, h, dispatch.Config{MaxQueued: 2, Caps: map[api.Family]int{api.FamilySonnet: 1}},
			map[string]string{"high_prio": "org-fake"})
		reqs := requests(4, "claude-sonnet-4-5")
		results := make(chan dispatch.Result, 4)
		cb := func(r dispatch.Result) { results <- r }
		if err := d.SubmitSend(t.Context(), reqs[0], nil, cb); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // reqs[0] holds the only slot
		if err := d.SubmitSend(t.Context(), reqs[1], nil, cb); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(t.Context())
		if err := d.SubmitSend(ctx, reqs[2], nil, cb); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // reqs[1] and reqs[2] wait: the queue is full
		gone := errors.New("the caller left")
		cancel(gone)
		synctest.Wait()
		select {
		case r := <-results:
			if r.Request != reqs[2] || !r.Aborted || !errors.Is(r.Err, gone) {
				t.Errorf("result %s aborted %v err %v, want %s withdrawn", r.Request.ID, r.Aborted, r.Err, reqs[2].ID)
			}
		default:
			t.Fatal("the withdrawn request got no Result while the slot stayed busy")
		}
		// Its place in the queue is free again.
		accepted := make(chan error, 1)
		go func() { accepted <- d.SubmitSend(t.Context(), reqs[3], nil, cb) }()
		synctest.Wait()
		select {
		case err := <-accepted:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("a submission blocked: the withdrawn request still counts toward MaxQueued")
		}
		close(release)
		for range 3 {
			if r := <-results; r.Class != api.ClassOK {
				t.Errorf("%s: class %q err %v", r.Request.ID, r.Class, r.Err)
			}
		}
	})
}

// TestOnWaitFollowsRetries: OnWait fires exactly when the dispatcher
// sends the request again — a 4xx with x-should-retry: true, a dead key —
// and not for the final answer.
func TestOnWaitFollowsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch calls.Add(1) {
			case 1:
				w.Header().Set(api.HeaderShouldRetry, "true")
				w.WriteHeader(400) // retried on the server's word
				w.Write(api.NewErrorBody(api.ErrInvalidRequest, "", "try again").Marshal())
			case 2:
				w.Header().Set(api.HeaderShouldRetry, "false")
				w.WriteHeader(401)
				w.Write(api.NewErrorBody(api.ErrAuthentication, "", "invalid x-api-key").Marshal())
			default:
				w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
			}
		})
		d, _, _ := pipeDispatcher(t, h, dispatch.Config{}, map[string]string{"high_prio": "org-fake", "batch": "org-fake"})
		var waits atomic.Int32
		ch := make(chan dispatch.Result, 1)
		if err := d.SubmitSend(t.Context(), requests(1, "claude-sonnet-4-5")[0], nil, func(r dispatch.Result) { ch <- r },
			dispatch.OnWait(func() { waits.Add(1) })); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.Class != api.ClassOK || calls.Load() != 3 {
			t.Fatalf("class %q after %d calls", r.Class, calls.Load())
		}
		if got := waits.Load(); got != 2 {
			t.Errorf("OnWait called %d times, want 2 (the retried 400 and the dead key)", got)
		}
	})
}

// settles records what the lanes' budgets were settled with.
type settles struct {
	mu     sync.Mutex
	actual []budget.Demand
}

type recordingBudget struct {
	*budget.Local
	s *settles
}

func (b recordingBudget) Settle(now time.Time, taken budget.Grant, actual budget.Demand) {
	b.s.mu.Lock()
	b.s.actual = append(b.s.actual, actual)
	b.s.mu.Unlock()
	b.Local.Settle(now, taken, actual)
}

func (s *settles) reached() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []bool
	for _, a := range s.actual {
		out = append(out, a != budget.Demand{})
	}
	return out
}

// TestWorkTheAPIDidIsNotRefunded: a stream whose reader leaves after it
// began, and a call whose caller leaves after it was sent, are charged to
// the lane's budget: the API did (and billed) the work.
func TestWorkTheAPIDidIsNotRefunded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered := make(chan struct{}, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
				streamHead(w)
				streamTail(w)
				return
			}
			io.ReadAll(r.Body) // the server notices a closed connection only then
			entered <- struct{}{}
			<-r.Context().Done()
		})
		var s settles
		cfg := dispatch.Config{NewBudget: func(string, api.Pool) budget.Budget { return recordingBudget{budget.NewLocal(), &s} }}
		d, c, _ := pipeDispatcher(t, h, cfg, map[string]string{"high_prio": "org-fake"})

		// A stream whose reader leaves at the first event.
		r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &sink{failAt: 1})
		if !r.Aborted {
			t.Fatalf("stream: aborted %v err %v, want withdrawn by its reader", r.Aborted, r.Err)
		}
		// A plain call whose caller leaves once the API has it.
		req := requests(1, "claude-sonnet-4-5")[0]
		ctx, cancel := context.WithCancel(t.Context())
		send := func(actx context.Context, k *keys.Key) client.Outcome {
			actx, stop := context.WithCancel(actx)
			defer stop()
			defer context.AfterFunc(ctx, stop)()
			o, _ := c.Send(actx, k, "POST", "/v1/messages", req.Params, nil, false)
			if o.Class == client.Canceled {
				o.Err = errors.New("the caller left")
			}
			return o
		}
		ch := make(chan dispatch.Result, 1)
		if err := d.SubmitSend(ctx, req, send, func(r dispatch.Result) { ch <- r }); err != nil {
			t.Fatal(err)
		}
		<-entered
		cancel()
		if r := <-ch; !r.Aborted {
			t.Fatalf("plain call: aborted %v err %v, want withdrawn", r.Aborted, r.Err)
		}
		synctest.Wait()
		if got := s.reached(); len(got) != 2 || !got[0] || !got[1] {
			t.Errorf("settled as reached: %v, want [true true] (both attempts reached the API)", got)
		}
	})
}

// TestWithdrawnInFlightDoesNotWaitForARetry: a request withdrawn while its
// attempt is in flight, whose attempt then gets a 429 with a long
// retry-after, ends at once instead of sitting in backoff (where it would
// count toward MaxQueued and keep Serve running after Close).
func TestWithdrawnInFlightDoesNotWaitForARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("retry-after", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))
		})
		d, _, _ := pipeDispatcher(t, h, dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 1}},
			map[string]string{"high_prio": "org-fake"})
		req := requests(1, "claude-sonnet-4-5")[0]
		results := make(chan dispatch.Result, 1)
		ctx, cancel := context.WithCancelCause(t.Context())
		if err := d.SubmitSend(ctx, req, nil, func(r dispatch.Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // in flight
		gone := errors.New("the caller left")
		cancel(gone)
		synctest.Wait()
		close(release) // the attempt answers 429, retry-after 60 s
		synctest.Wait()
		select {
		case r := <-results:
			if !r.Aborted || !errors.Is(r.Err, gone) {
				t.Fatalf("result: aborted %v err %v", r.Aborted, r.Err)
			}
		default:
			t.Fatal("the withdrawn request waits for its retry")
		}
	})
}
