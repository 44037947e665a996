package proxy_test

// Tests for the review of issue 6: each fails without its fix.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/cache"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/simtest"
	"github.com/sluice-dev/sluice/jsonl"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/plan"
	"github.com/sluice-dev/sluice/proxy"
	"github.com/sluice-dev/sluice/route"
	"github.com/sluice-dev/sluice/sim"
)

// within fails the test if ch yields nothing in a long while: a guard
// against a hang, not a timing assertion.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: nothing after 20 s", what)
		panic("unreachable")
	}
}

// waitUntil polls cond until it holds; like within, a guard against a
// hang, not a timing assertion.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// sseEvents splits a stream body into its events (the blank line ends
// each); rest is whatever follows the last blank line.
func sseEvents(b []byte) (events []string, rest string) {
	s := string(b)
	for {
		i := strings.Index(s, "\n\n")
		if i < 0 {
			return events, s
		}
		events = append(events, s[:i+2])
		s = s[i+2:]
	}
}

// TestStreamCutMidEventEndsWithAPIError: an upstream stream cut in the
// middle of an event reaches the caller as whole events and then an
// error event with a request id, which the official SDK raises as its
// own *anthropic.Error.
func TestStreamCutMidEventEndsWithAPIError(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(api.HeaderRequestID, "req_upstream1")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n")
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_de")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio})
	resp, b := e.do("POST", "/v1/messages", message("stream please", "stream", true))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	events, rest := sseEvents(b)
	if rest != "" || len(events) != 3 {
		t.Fatalf("stream %q: want 3 whole events and nothing after", b)
	}
	last := events[2]
	data, ok := strings.CutPrefix(last, "event: error\ndata: ")
	if !ok {
		t.Fatalf("last event %q, want an error event", last)
	}
	var eb api.ErrorBody
	if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &eb); err != nil || eb.Err.Type != api.ErrAPI || !strings.HasPrefix(eb.RequestID, "req_") {
		t.Errorf("error event data %q (%v): want an api_error body with a request id", data, err)
	}

	cl := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(e.url),
		option.WithAPIKey("caller-key"), option.WithMaxRetries(0))
	st := cl.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{Model: sonnet, MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("stream please"))}})
	for st.Next() {
	}
	var apiErr *anthropic.Error
	if err := st.Err(); !errors.As(err, &apiErr) {
		t.Errorf("SDK stream error %v (%T), want *anthropic.Error", err, err)
	}
}

// TestOpenProxyRefusesWebPages: without a token, a request a web page
// could make (an Origin header, Sec-Fetch-Site: cross-site) or one that
// reached the proxy under another name (DNS rebinding) is refused; local
// programs and, with a token, anyone holding it are served.
func TestOpenProxyRefusesWebPages(t *testing.T) {
	f := newFake()
	close(f.hold)
	open := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio})
	const token = "proxy-token-for-the-origin-test"
	guarded := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token }})
	send := func(base, host string, hdr ...string) int {
		t.Helper()
		raw, _ := json.Marshal(message("hello"))
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/messages", bytes.NewReader(raw))
		req.Header.Set("x-api-key", token)
		req.Header.Set("anthropic-version", api.VersionDefault)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 403 && errorOf(t, b).Err.Type != api.ErrPermission {
			t.Errorf("403 body %s, want permission_error", b)
		}
		return resp.StatusCode
	}
	port := open.url[strings.LastIndexByte(open.url, ':'):]
	for _, tc := range []struct {
		name string
		host string
		hdr  []string
		want int
	}{
		{"a local program", "", nil, 200},
		{"localhost by name", "localhost" + port, nil, 200},
		{"a web page's request", "", []string{"Origin", "https://evil.example"}, 403},
		{"a cross-site fetch", "", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"a rebound name", "evil.example" + port, nil, 403},
		{"a same-origin fetch without Origin", "", []string{"Sec-Fetch-Site", "same-origin"}, 200},
	} {
		if got := send(open.url, tc.host, tc.hdr...); got != tc.want {
			t.Errorf("open proxy, %s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := send(guarded.url, "gateway.example", "Origin", "https://app.example"); got != 200 {
		t.Errorf("a proxy with a token refused its token holder's web page: %d", got)
	}
	if resp, _ := open.do("GET", "/healthz", nil, "Origin", "https://evil.example"); resp.StatusCode != 403 {
		t.Errorf("healthz from a web page: %d, want 403", resp.StatusCode)
	}
}

// fastFake answers every Messages call at once.
func fastFake() http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		i := n.Add(1)
		w.Header().Set(api.HeaderRequestID, fmt.Sprintf("req_fast%d", i))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_fast%d","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"fast"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`, i, sonnet)
	})
}

// TestBatchRowsNeverBlockTheDispatcher: with the batch's collector stuck
// on a slow disk, every row of a large batch still ends (its callback on
// the dispatcher's loop never waits) and plain calls are still answered.
func TestBatchRowsNeverBlockTheDispatcher(t *testing.T) {
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = t.TempDir() }})
	stuck := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	proxy.SetStorePutHook(t.Cleanup, func() {
		once.Do(func() { close(entered) })
		<-stuck
	})
	defer close(stuck)
	const n = 1500
	e.createBatch(n, "r")
	within(t, entered, "the collector")
	answered := make(chan int, 1)
	go func() {
		for {
			if st, _ := e.d.Snapshot(); st.OK >= n {
				resp, _ := e.do("POST", "/v1/messages", message("a plain call behind the batch"))
				answered <- resp.StatusCode
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if code := within(t, answered, "every row answered and a plain call after them (the dispatcher's loop is blocked)"); code != 200 {
		t.Errorf("plain call: %d", code)
	}
}

// TestBatchEndsWhenEveryKeyIsDead: once the dispatcher stopped for want
// of a live key, a batch's rows end errored and the batch ends.
func TestBatchEndsWhenEveryKeyIsDead(t *testing.T) {
	e := newEnv(t, options{health: dieAtOnce})
	for _, label := range []string{"high_prio", "batch", "low_prio"} {
		if err := e.sim.SetKeyStatus(label, sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
	}
	e.do("POST", "/v1/messages", message("meets every 401"))
	within(t, e.d.Done(), "the dispatcher stopping")
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{
		{"custom_id": "a", "params": message("a")}, {"custom_id": "b", "params": message("b")},
	}})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	m := e.pollBatch(created.ID)
	if want := (api.RequestCounts{Errored: 2}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	_, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	if !bytes.Contains(res, []byte("no live key")) {
		t.Errorf("results %s: want the rows errored for want of a live key", res)
	}
}

// TestWaitFollowsTheDispatchersRetries: a call whose attempt ended in a
// way the dispatcher sends again — a 400 with x-should-retry: true, a 401
// with x-should-retry: false (the key is dead, the request moves) — waits
// again, so it is answered at --max-wait while every slot stays busy.
func TestWaitFollowsTheDispatchersRetries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		retry  string
		etype  api.ErrorType
	}{
		{"400 with x-should-retry true", 400, "true", api.ErrInvalidRequest},
		{"401 with x-should-retry false", 401, "false", api.ErrAuthentication},
	} {
		t.Run(tc.name, func(t *testing.T) {
			envKeys := simtest.KeyEnv(sim.Default())
			keyA := envKeys[keys.EnvAPIKey]
			sigA, release := make(chan struct{}), make(chan struct{})
			entered := make(chan string, 10)
			var callsA atomic.Int32
			up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if r.Header.Get("x-api-key") == keyA && callsA.Add(1) == 1 {
					entered <- "A"
					<-sigA
					w.Header().Set(api.HeaderShouldRetry, tc.retry)
					w.WriteHeader(tc.status)
					w.Write(api.NewErrorBody(tc.etype, "req_fakeA", "refused").Marshal())
					return
				}
				entered <- "other"
				<-release
				fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`, sonnet)
			})
			e := newEnv(t, options{upstream: up, dispatch: oneSlot,
				keysEnv: func(m map[string]string) { delete(m, keys.EnvLowPrio) },
				orgs:    map[string]string{"high_prio": "org-a", "batch": "org-b"},
				proxy:   func(c *proxy.Config) { c.MaxWait = time.Second }})
			var freeOnce sync.Once
			free := func() { freeOnce.Do(func() { close(release) }) }
			defer free()
			first := make(chan int, 1)
			go func() {
				resp, _ := e.do("POST", "/v1/messages", message("first"))
				first <- resp.StatusCode
			}()
			if who := within(t, entered, "the first call"); who != "A" {
				t.Fatalf("the first call went to %s, want org-a", who)
			}
			var others sync.WaitGroup
			others.Go(func() { e.do("POST", "/v1/messages", message("second")) })
			within(t, entered, "the second call") // org-b's only slot
			if tc.status == 400 {
				// A third call takes org-a's slot as soon as the 400 frees
				// it — so it must be queued before the 400 is answered, or
				// the first call's retry could take the slot instead.
				others.Go(func() { e.do("POST", "/v1/messages", message("third")) })
				waitUntil(t, func() bool { st, _ := e.d.Snapshot(); return st.Submitted >= 3 }, "the third call queued")
			}
			close(sigA)
			if tc.status == 400 {
				within(t, entered, "the third call")
			}
			// Every slot is busy until release: the first call must be
			// answered at its wait limit, not when a slot frees.
			if code := within(t, first, "the first call's answer while every slot is busy"); code != 429 {
				t.Errorf("first call: %d, want the wait limit's 429", code)
			}
			free()
			others.Wait()
		})
	}
}

// procFDs lists the files this process holds open (Linux).
func procFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var out []string
	for _, d := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestEndedBatchHoldsNoFileAndIsArchived: an ended batch keeps no file
// open (its results are read from disk when asked for); 29 days after its
// creation its results are archived, as the API does.
func TestEndedBatchHoldsNoFileAndIsArchived(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{
		{"custom_id": "a", "params": message("a")}, {"custom_id": "b", "params": message("b")},
	}})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	ended := e.pollBatch(created.ID)
	if ended.RequestCounts.Succeeded != 2 {
		t.Fatalf("counts %+v", ended.RequestCounts)
	}
	resultsFile := filepath.Join(dir, created.ID+".results.jsonl")
	for _, f := range procFDs(t) {
		if strings.HasPrefix(f, dir) && f != filepath.Join(dir, "lock") { // the proxy's own lock is held for its life
			t.Errorf("an ended batch holds %s open", f)
		}
	}
	if resp, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 200 || bytes.Count(res, []byte("\n")) != 2 {
		t.Errorf("results: %d %s", resp.StatusCode, res)
	}

	clk.add(api.ResultsRetention - time.Minute)
	if resp, _ := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 200 {
		t.Errorf("results a minute before the 29 days: %d", resp.StatusCode)
	}
	clk.add(time.Minute)
	resp, b := e.do("GET", "/v1/messages/batches/"+created.ID, nil)
	var m api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.ArchivedAt == nil || !m.ArchivedAt.Equal(created.CreatedAt.Add(api.ResultsRetention)) {
		t.Errorf("retrieve after 29 days: %d %s, want archived_at = created_at + 29 days", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 404 || errorOf(t, b).Err.Type != api.ErrNotFound {
		t.Errorf("results after 29 days: %d %s, want 404", resp.StatusCode, b)
	}
	if _, err := os.Stat(resultsFile); !os.IsNotExist(err) {
		t.Errorf("the archived batch's results file is still there (%v)", err)
	}
	// Archived stays archived across a restart.
	e.close()
	e2 := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
	if resp, _ := e2.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 404 {
		t.Errorf("results after a restart: %d, want 404", resp.StatusCode)
	}
}

// TestNoCacheWriteWhileDraining: an answer that arrives while the proxy
// drains is not written to the cache (which is closed after Wait).
func TestNoCacheWriteWhileDraining(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "c.db"), cache.On)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(pc *proxy.Config) { pc.Cache = c }})
	raw, _ := json.Marshal(message("cache me while draining"))
	got := make(chan int, 1)
	go func() {
		resp, _ := e.do("POST", "/v1/messages", raw)
		got <- resp.StatusCode
	}()
	<-f.entered
	e.px.Drain()
	close(f.hold)
	if code := within(t, got, "the answer"); code != 200 {
		t.Fatalf("status %d", code)
	}
	e.close() // Wait: background work is over
	k, _ := cache.KeyOf(raw, "")
	if _, hit := c.Lookup(k); hit {
		t.Error("an answer that arrived while draining was written to the cache")
	}
}

// TestUnreachableUpstreamPastMaxWaitIs500: when the wait limit ends while
// the API gives no answer at all, the caller gets the API's own kind of
// error (500 api_error, as when the retries run out), not a 429.
func TestUnreachableUpstreamPastMaxWaitIs500(t *testing.T) {
	var calls atomic.Int32
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio,
		dispatch: func(c *dispatch.Config) {
			c.Retry = dispatch.RetryPolicy{MaxFailed: 1000, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		},
		proxy: func(c *proxy.Config) { c.MaxWait = 300 * time.Millisecond }})
	resp, b := e.do("POST", "/v1/messages", message("anyone there?"))
	if resp.StatusCode != 500 || errorOf(t, b).Err.Type != api.ErrAPI || !strings.Contains(errorOf(t, b).Err.Message, "no answer from the API") {
		t.Errorf("status %d body %s, want 500 api_error saying the API did not answer", resp.StatusCode, b)
	}
	if calls.Load() < 2 {
		t.Errorf("%d attempts, want the dispatcher's retries before the wait limit", calls.Load())
	}
}

// batchRouting routes every virtual batch to the batch path, polling on
// the simulator's clock.
func batchRouting(jsonl.Summary, int) (route.Routing, error) {
	return route.Routing{Route: route.Batch, Why: "test", Batch: batch.Config{
		PollMin: time.Millisecond, PollMax: 5 * time.Millisecond, StuckAfter: time.Hour,
		CreateGrace: 100 * time.Millisecond, ClockSkew: time.Second,
	}}, nil
}

// simBatches sums the simulator's batch counters.
func simBatches(s *sim.Server) (created, requests int64, messages int64) {
	st := s.Stats()
	for _, o := range st.Orgs {
		created += o.Batches.Created
		requests += o.Batches.Requests
		for _, p := range o.Pools {
			messages += p.Admitted
		}
	}
	return
}

// TestBatchRunsOnTheBatchPath: a virtual batch the planner sends to batch
// runs as Message Batches upstream (none of its rows is a Messages call),
// answers in the API's shapes, and leaves no journal or requests file.
func TestBatchRunsOnTheBatchPath(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	rows := []map[string]any{
		{"custom_id": "one", "params": message("batch one")},
		{"custom_id": "streamed", "params": message("batch two", "stream", true)},
		{"custom_id": "two", "params": message("batch three")},
		{"custom_id": "three", "params": message("batch four")},
	}
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	m := e.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 3, Errored: 1}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	_, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	var order []string
	for line := range bytes.Lines(res) {
		var l api.BatchResultLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		order = append(order, l.CustomID+":"+l.Result.Type)
		if l.Result.Type == api.ResultSucceeded && (l.Result.Message == nil || len(l.Result.Message.Content) == 0 || !strings.HasPrefix(l.Result.Message.Content[0].Text, "sim-")) {
			t.Errorf("%s: message %+v", l.CustomID, l.Result.Message)
		}
	}
	if strings.Join(order, ",") != "one:succeeded,streamed:errored,two:succeeded,three:succeeded" {
		t.Errorf("results %v", order)
	}
	created1, requests, messages := simBatches(e.sim)
	if created1 < 1 || requests != 3 || messages != 0 {
		t.Errorf("upstream: %d batches with %d requests and %d Messages calls; want the 3 rows in batches, no Messages call", created1, requests, messages)
	}
	if st, _ := e.d.Snapshot(); st.Submitted != 0 {
		t.Errorf("%d rows went through the sync dispatcher", st.Submitted)
	}
	for _, suffix := range []string{".batch-journal", ".requests.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, created.ID+suffix)); !os.IsNotExist(err) {
			t.Errorf("%s%s is left after the batch ended (%v)", created.ID, suffix, err)
		}
	}
}

// TestPlannerRoutesVirtualBatches: with route.Planner and prefer=cost, a
// batch big enough for Message Batches goes there, a small one runs sync.
func TestPlannerRoutesVirtualBatches(t *testing.T) {
	var world plan.World
	e := newEnv(t, options{proxy: func(c *proxy.Config) {
		c.StateDir = t.TempDir()
		c.Plan = route.Planner(route.Options{Route: "auto", Prefer: "cost", TimeScale: 1000,
			World: func(plan.Job) (plan.World, error) { return world, nil }})
	}})
	world = plan.FromModel(e.sim.Config().Model(), nil)
	run := func(n int, tag string) api.MessageBatch {
		return e.pollBatch(e.createBatch(n, tag).ID)
	}
	if m := run(3, "small"); m.RequestCounts.Succeeded != 3 {
		t.Fatalf("small batch: %+v", m.RequestCounts)
	}
	if created, _, messages := simBatches(e.sim); created != 0 || messages != 3 {
		t.Errorf("a 3-row batch: %d upstream batches, %d Messages calls; want sync", created, messages)
	}
	if m := run(150, "big"); m.RequestCounts.Succeeded != 150 {
		t.Fatalf("big batch: %+v", m.RequestCounts)
	}
	if created, requests, messages := simBatches(e.sim); created == 0 || requests != 150 || messages != 3 {
		t.Errorf("a 150-row batch, prefer cost: %d upstream batches with %d requests, %d Messages calls in all; want it all in batches", created, requests, messages)
	}
}

// TestRestartAdoptsUpstreamBatches: a proxy stopped while its virtual
// batch's Message Batch runs upstream resumes it after a restart: the
// batch's journal adopts the upstream batch, which is harvested, never
// created or paid twice, and no row is sent sync.
func TestRestartAdoptsUpstreamBatches(t *testing.T) {
	dir := t.TempDir()
	slow := func(c *sim.Config) {
		c.Batch.AdmissionBase = sim.Duration(20 * time.Minute) // 1.2 s real at time scale 1000
	}
	e := newEnv(t, options{world: slow, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	created := e.createBatch(8, "r")
	waitUntil(t, func() bool { c, _, _ := simBatches(e.sim); return c > 0 }, "the upstream batch")
	e.close() // a shutdown while the upstream batch runs

	e2 := newEnv(t, options{simOf: e, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	m := e2.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 8}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	createdN, requests, messages := simBatches(e.sim)
	if createdN != 1 || requests != 8 || messages != 0 {
		t.Errorf("upstream: %d batches with %d requests, %d Messages calls; want the one batch adopted, nothing sent again", createdN, requests, messages)
	}
	if x := e.sim.Stats().Bodies.ExtraAnswers; x != 0 {
		t.Errorf("%d requests were answered twice", x)
	}
}

// TestCancelStopsUpstreamBatches: cancelling a virtual batch whose rows
// run in a Message Batch upstream cancels that batch too, so the rows not
// yet processed are neither processed nor billed: they end canceled, as
// on the API. A proxy that stopped after it recorded the cancel but
// before the upstream cancel cancels the batch when it restarts.
func TestCancelStopsUpstreamBatches(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			dir := t.TempDir()
			slow := func(c *sim.Config) {
				c.Batch.AdmissionBase = sim.Duration(100 * time.Minute) // 6 s real at time scale 1000
			}
			opts := options{world: slow, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }}
			e := newEnv(t, opts)
			created := e.createBatch(8, "r")
			waitUntil(t, func() bool { c, _, _ := simBatches(e.sim); return c > 0 }, "the upstream batch")
			served := e
			if restart {
				// Stopped after the cancel was saved, before it reached
				// upstream: the batch's file says canceling. (Once the
				// journal has the create: a batch whose create was cut
				// short is adopted through the list, and an adopted
				// batch is never cancelled.)
				waitUntil(t, func() bool {
					j, _ := os.ReadFile(filepath.Join(dir, created.ID+".batch-journal"))
					return bytes.Contains(j, []byte(`"op":"created"`))
				}, "the create in the journal")
				e.close()
				path := filepath.Join(dir, created.ID+".json")
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var meta map[string]any
				if err := json.Unmarshal(raw, &meta); err != nil {
					t.Fatal(err)
				}
				meta["cancel_initiated_at"] = time.Now().UTC()
				raw, _ = json.Marshal(meta)
				if err := os.WriteFile(path, raw, 0o600); err != nil {
					t.Fatal(err)
				}
				opts.simOf = e
				served = newEnv(t, opts)
			} else if resp, b := e.do("POST", "/v1/messages/batches/"+created.ID+"/cancel", nil); resp.StatusCode != 200 {
				t.Fatalf("cancel: %d %s", resp.StatusCode, b)
			}
			m := served.pollBatch(created.ID)
			if want := (api.RequestCounts{Canceled: 8}); m.RequestCounts != want {
				t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
			}
			var cancels, succeeded int64
			for _, o := range e.sim.Stats().Orgs {
				cancels += o.Batches.CancelRequests
				succeeded += o.Batches.Succeeded
			}
			if cancels != 1 || succeeded != 0 {
				t.Errorf("upstream: %d cancel requests, %d rows processed; want the batch cancelled before any row ran", cancels, succeeded)
			}
			if _, _, messages := simBatches(e.sim); messages != 0 {
				t.Errorf("%d rows were sent as Messages calls after the cancel", messages)
			}
		})
	}
}
