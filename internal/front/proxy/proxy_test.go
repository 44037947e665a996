package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

func TestMessagePassesThrough(t *testing.T) {
	e := newEnv(t, options{})
	body := message("What is a sluice?")
	resp, b := e.do("POST", "/v1/messages", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	// The simulator's answer is a pure function of the body: the proxy
	// must hand back exactly what the API answers.
	raw, _ := json.Marshal(body)
	if got, want := textOf(t, b), sim.AnswerTag(raw); !strings.HasPrefix(got, want) {
		t.Errorf("text %q does not start with %q", got, want)
	}
	for _, h := range []string{api.HeaderRequestID, api.HeaderOrganizationID, api.LimitHeaderName(api.LimiterRequests, "limit")} {
		if resp.Header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if id := resp.Header.Get(api.HeaderRequestID); strings.HasPrefix(id, "req_sluice") {
		t.Errorf("request-id %s is the proxy's, not the API's", id)
	}
	var admitted int64
	for _, o := range e.sim.Stats().Orgs {
		for _, p := range o.Pools {
			admitted += p.Admitted
		}
	}
	if admitted != 1 {
		t.Errorf("the simulator admitted %d calls, want 1", admitted)
	}
}

func TestCallerErrorsComeBackUnchanged(t *testing.T) {
	e := newEnv(t, options{})
	cases := []struct {
		name   string
		body   any
		status int
		typ    api.ErrorType
	}{
		{"400 missing max_tokens", map[string]any{"model": sonnet, "messages": []map[string]any{{"role": "user", "content": "hi"}}}, 400, api.ErrInvalidRequest},
		{"400 not JSON", "{not json", 400, api.ErrInvalidRequest},
		{"404 unknown model", message("hi", "model", "claude-nonexistent-9"), 404, api.ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do("POST", "/v1/messages", tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			eb := errorOf(t, b)
			if eb.Err.Type != tc.typ {
				t.Errorf("error type %s, want %s", eb.Err.Type, tc.typ)
			}
			id := resp.Header.Get(api.HeaderRequestID)
			if id == "" || eb.RequestID != id || strings.HasPrefix(id, "req_sluice") {
				t.Errorf("request id: header %q, body %q; want the API's own, equal", id, eb.RequestID)
			}
		})
	}
	t.Run("413 too large", func(t *testing.T) {
		big := bytes.Repeat([]byte("a"), api.MaxMessagesBytes+1)
		resp, b := e.do("POST", "/v1/messages", big)
		if resp.StatusCode != 413 || errorOf(t, b).Err.Type != api.ErrRequestTooLarge {
			t.Errorf("status %d body %.200s, want 413 request_too_large", resp.StatusCode, b)
		}
		if id := resp.Header.Get(api.HeaderRequestID); id == "" || errorOf(t, b).RequestID != id {
			t.Errorf("request id: header %q, body %q", id, errorOf(t, b).RequestID)
		}
	})
}

// TestStreamIsNotBuffered: the upstream sends message_start and then
// waits until the test has read it through the proxy. A proxy that held
// the answer until its end would never deliver it.
func TestStreamIsNotBuffered(t *testing.T) {
	firstRead := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(api.HeaderRequestID, "req_upstream1")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n")
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio})
	raw, _ := json.Marshal(message("stream please", "stream", true))
	req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/messages", bytes.NewReader(raw))
	req.Header.Set("x-api-key", "whatever")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" || resp.Header.Get(api.HeaderRequestID) != "req_upstream1" {
		t.Fatalf("status %d, content-type %q, request-id %q", resp.StatusCode, ct, resp.Header.Get(api.HeaderRequestID))
	}
	rd := bufio.NewReader(resp.Body)
	var events []string
	for {
		line, err := rd.ReadString('\n')
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, strings.TrimSpace(name))
			if len(events) == 1 {
				close(firstRead)
			}
		}
		if err != nil {
			break
		}
	}
	want := []string{"message_start", "content_block_delta", "message_delta", "message_stop"}
	if strings.Join(events, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", events, want)
	}
}

// TestStreamCutUpstreamEndsWithErrorEvent: a stream the upstream drops
// after it began is not sent again; the caller's stream ends with an
// error event, so an SDK raises instead of returning half a message.
func TestStreamCutUpstreamEndsWithErrorEvent(t *testing.T) {
	n := 0
	var mu sync.Mutex
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n")
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
	s := string(b)
	if !strings.HasPrefix(s, "event: message_start") || !strings.Contains(s, "event: error") || !strings.Contains(s, `"api_error"`) {
		t.Errorf("stream %q: want message_start, then an api_error event", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Errorf("upstream called %d times, want 1 (no retry after the first byte)", n)
	}
}

func TestStreamFromSimulator(t *testing.T) {
	e := newEnv(t, options{})
	resp, b := e.do("POST", "/v1/messages", message("Stream me an answer.", "stream", true, "max_tokens", 200))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content-type %q: %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if len(names) < 4 || names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Errorf("events %v", names)
	}
	st, _ := e.d.Snapshot()
	if st.OK != 1 {
		t.Errorf("dispatcher OK = %d, want 1", st.OK)
	}
}

// TestNo429UnderLoad: callers far beyond the simulator's limits all get
// answers; the dispatcher paces them, and nothing is answered twice.
func TestNo429UnderLoad(t *testing.T) {
	const n = 150
	// Each org's bucket holds one second of its 20 requests per second: the
	// 150 callers are 2.5 times what the three buckets hold. (No reserve:
	// it is a fraction of the per-minute limit, more than such a bucket.)
	e := newEnv(t, options{scale: 10, world: func(c *sim.Config) {
		c.BucketWindow = sim.Duration(time.Second)
		for i := range c.Orgs {
			c.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: 120, ITPM: 1_000_000, OTPM: 1_000_000}
		}
	}, dispatch: func(c *dispatch.Config) { c.Lane.Reserve = -1 }})
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("Question %d, under load.", i)))
			codes[i] = resp.StatusCode
			if resp.StatusCode != 200 {
				t.Errorf("call %d: status %d: %s", i, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	st := e.sim.Stats()
	var admitted int64
	for _, o := range st.Orgs {
		admitted += o.Pools[api.PoolSonnet4].Admitted
	}
	if admitted != n || st.Bodies.ExtraAnswers != 0 {
		t.Errorf("simulator admitted %d calls with %d extra answers, want %d and 0", admitted, st.Bodies.ExtraAnswers, n)
	}
	if _, lanes := e.d.Snapshot(); len(lanes) != 3 {
		t.Errorf("%d lanes served, want all 3 organizations", len(lanes))
	}
}

// TestWaitExpiredIs429AndNeverSent: with the only slot held, a call that
// waits past MaxWait gets a 429 with retry-after, and is never sent later.
func TestWaitExpiredIs429AndNeverSent(t *testing.T) {
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, dispatch: oneSlot,
		proxy: func(c *proxy.Config) { c.MaxWait = 50 * 1e6 }})
	first := make(chan int, 1)
	go func() {
		resp, _ := e.do("POST", "/v1/messages", message("first, holds the slot"))
		first <- resp.StatusCode
	}()
	<-f.entered
	resp, b := e.do("POST", "/v1/messages", message("second, waits"))
	if resp.StatusCode != 429 || errorOf(t, b).Err.Type != api.ErrRateLimit {
		t.Fatalf("status %d body %s, want 429 rate_limit_error", resp.StatusCode, b)
	}
	if ra, err := strconv.ParseFloat(resp.Header.Get(api.HeaderRetryAfter), 64); err != nil || ra <= 0 {
		t.Errorf("retry-after %q, want a positive number of seconds", resp.Header.Get(api.HeaderRetryAfter))
	}
	if id := resp.Header.Get(api.HeaderRequestID); !strings.HasPrefix(id, "req_") || errorOf(t, b).RequestID != id {
		t.Errorf("request id: header %q body %q", id, errorOf(t, b).RequestID)
	}
	close(f.hold)
	if code := <-first; code != 200 {
		t.Errorf("first call: status %d", code)
	}
	// A third call queues behind the second: once it is answered, the
	// second was dropped or sent.
	if resp, b := e.do("POST", "/v1/messages", message("third")); resp.StatusCode != 200 {
		t.Fatalf("third call: %d %s", resp.StatusCode, b)
	}
	for _, body := range f.calls() {
		if strings.Contains(body, "second, waits") {
			t.Error("the call answered with a 429 was sent upstream afterwards")
		}
	}
	if got := len(f.calls()); got != 2 {
		t.Errorf("upstream saw %d calls, want 2", got)
	}
}

func TestTokenAndCallerCredentials(t *testing.T) {
	f := newFake()
	close(f.hold)
	const token = "proxy-token-for-the-test"
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token }})
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no credential", []string{"x-api-key", ""}, 401},
		{"wrong token", []string{"x-api-key", "sk-ant-wrong"}, 401},
		{"token as x-api-key", []string{"x-api-key", token}, 200},
		{"token as bearer", []string{"x-api-key", "", "Authorization", "Bearer " + token}, 200},
		// The scheme's case does not matter (RFC 7235).
		{"token as bearer, lower case", []string{"x-api-key", "", "Authorization", "bearer " + token}, 200},
		{"token as bearer, upper case", []string{"x-api-key", "", "Authorization", "BEARER " + token}, 200},
		{"token under another scheme", []string{"x-api-key", "", "Authorization", "Basic " + token}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do("POST", "/v1/messages", message("hi"), tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.status == 401 && errorOf(t, b).Err.Type != api.ErrAuthentication {
				t.Errorf("error type %s, want authentication_error", errorOf(t, b).Err.Type)
			}
		})
	}
	real := simtest.KeyEnv(sim.Default())["ANTHROPIC_API_KEY"]
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.headers) != 4 {
		t.Fatalf("upstream saw %d calls, want 4", len(f.headers))
	}
	for _, h := range f.headers {
		if h.Get("x-api-key") != real || h.Get("Authorization") != "" {
			t.Errorf("upstream got x-api-key ending %q and Authorization %q: want the pool's key only", last4(h.Get("x-api-key")), h.Get("Authorization"))
		}
	}
}

func last4(s string) string {
	if len(s) < 4 {
		return s
	}
	return s[len(s)-4:]
}

func TestCountTokensAndModels(t *testing.T) {
	e := newEnv(t, options{})
	resp, b := e.do("POST", "/v1/messages/count_tokens", map[string]any{"model": sonnet,
		"messages": []map[string]any{{"role": "user", "content": "count these words please"}}})
	var tc api.TokenCount
	if resp.StatusCode != 200 || json.Unmarshal(b, &tc) != nil || tc.InputTokens <= 0 {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/v1/models?limit=3", nil)
	var page api.Page[api.ModelObject]
	if resp.StatusCode != 200 || json.Unmarshal(b, &page) != nil || len(page.Data) != 3 || !page.HasMore {
		t.Errorf("models: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/v1/models/"+sonnet, nil)
	var m api.ModelObject
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.Type != "model" {
		t.Errorf("model: %d %s", resp.StatusCode, b)
	}
	if st, _ := e.d.Snapshot(); st.Submitted != 0 {
		t.Errorf("count_tokens and models went through the lanes (%d submitted)", st.Submitted)
	}
}

func TestBatchRoundTrip(t *testing.T) {
	e := newEnv(t, options{proxy: func(c *proxy.Config) { c.StateDir = t.TempDir() }})
	rows := []map[string]any{
		{"custom_id": "ok-1", "params": message("batch one")},
		{"custom_id": "bad-model", "params": message("batch two", "model", "claude-nonexistent-9")},
		{"custom_id": "ok-2", "params": message("batch three")},
		{"custom_id": "streamed", "params": message("batch four", "stream", true)},
		{"custom_id": "ok-3", "params": message("batch five")},
	}
	resp, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	if created.Type != "message_batch" || created.ProcessingStatus != api.BatchInProgress || created.RequestCounts.Processing != 5 || created.ResultsURL != nil {
		t.Errorf("created %+v", created)
	}
	ended := e.pollBatch(created.ID)
	want := api.RequestCounts{Succeeded: 3, Errored: 2}
	if ended.RequestCounts != want || ended.EndedAt == nil || ended.ResultsURL == nil || !strings.HasPrefix(*ended.ResultsURL, e.url) {
		t.Errorf("ended %+v, want counts %+v and a results URL on the proxy", ended, want)
	}
	resp, b = e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("results: %d %s", resp.StatusCode, b)
	}
	var got []string
	for line := range bytes.Lines(b) {
		var l struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type    string          `json:"type"`
				Message json.RawMessage `json:"message"`
				Error   *api.ErrorBody  `json:"error"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("result line %q: %v", line, err)
		}
		got = append(got, l.CustomID+":"+l.Result.Type)
		switch l.Result.Type {
		case api.ResultSucceeded:
			if !strings.HasPrefix(textOf(t, l.Result.Message), "sim-") {
				t.Errorf("%s: message %s", l.CustomID, l.Result.Message)
			}
		case api.ResultErrored:
			wantType := map[string]api.ErrorType{"bad-model": api.ErrNotFound, "streamed": api.ErrInvalidRequest}[l.CustomID]
			if l.Result.Error == nil || l.Result.Error.Err.Type != wantType {
				t.Errorf("%s: error %+v, want %s", l.CustomID, l.Result.Error, wantType)
			}
		}
	}
	wantLines := "ok-1:succeeded,bad-model:errored,ok-2:succeeded,streamed:errored,ok-3:succeeded"
	if strings.Join(got, ",") != wantLines {
		t.Errorf("results %v, want %s", got, wantLines)
	}

	resp, b = e.do("GET", "/v1/messages/batches?limit=10", nil)
	var page api.Page[api.MessageBatch]
	if resp.StatusCode != 200 || json.Unmarshal(b, &page) != nil || len(page.Data) != 1 || page.Data[0].ID != created.ID {
		t.Errorf("list: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", "/v1/messages/batches/"+created.ID+"/cancel", nil)
	var again api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &again) != nil || again.ProcessingStatus != api.BatchEnded || again.CancelInitiatedAt != nil {
		t.Errorf("cancel of an ended batch: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("DELETE", "/v1/messages/batches/"+created.ID, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "message_batch_deleted") {
		t.Errorf("delete: %d %s", resp.StatusCode, b)
	}
	if resp, _ := e.do("GET", "/v1/messages/batches/"+created.ID, nil); resp.StatusCode != 404 {
		t.Errorf("retrieve after delete: %d, want 404", resp.StatusCode)
	}
	if resp, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []any{}}); resp.StatusCode != 400 || errorOf(t, b).Err.Type != api.ErrInvalidRequest {
		t.Errorf("empty batch: %d %s", resp.StatusCode, b)
	}
}

func TestBatchCancelWithdrawsUnsentRows(t *testing.T) {
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, dispatch: oneSlot})
	var rows []map[string]any
	for i := range 5 {
		rows = append(rows, map[string]any{"custom_id": fmt.Sprintf("row-%d", i), "params": message(fmt.Sprintf("row %d", i))})
	}
	resp, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &created) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	<-f.entered // row 0 holds the only slot
	resp, b = e.do("POST", "/v1/messages/batches/"+created.ID+"/cancel", nil)
	var canceling api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &canceling) != nil || canceling.ProcessingStatus != api.BatchCanceling || canceling.CancelInitiatedAt == nil {
		t.Fatalf("cancel: %d %s", resp.StatusCode, b)
	}
	close(f.hold)
	ended := e.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 1, Canceled: 4}); ended.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", ended.RequestCounts, want)
	}
	if got := len(f.calls()); got != 1 {
		t.Errorf("upstream saw %d calls, want 1 (the row in flight)", got)
	}
}

// TestBatchesSurviveRestart: a batch stopped half-way by a shutdown is
// finished by a new proxy on the same state dir: its answered rows are
// kept (never sent again), its unsent rows are sent then; the batch reads
// the same from then on.
func TestBatchesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, dispatch: oneSlot, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	rows := []map[string]any{
		{"custom_id": "a", "params": message("row a")}, {"custom_id": "b", "params": message("row b")}, {"custom_id": "c", "params": message("row c")},
	}
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	<-f.entered
	e.px.Drain() // rows b and c are not sent
	close(f.hold)
	for st, _ := e.d.Snapshot(); st.OK != 1; st, _ = e.d.Snapshot() {
		time.Sleep(time.Millisecond) // row a finishes
	}
	e.close()

	f2 := newFake()
	close(f2.hold)
	e2 := newEnv(t, options{upstream: f2, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	m := e2.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 3}); m.RequestCounts != want {
		t.Errorf("after restart: %+v, want %+v", m.RequestCounts, want)
	}
	_, res := e2.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	var order []string
	for line := range bytes.Lines(res) {
		var l api.BatchResultLine
		if err := json.Unmarshal(line, &l); err != nil || l.Result.Type != api.ResultSucceeded {
			t.Errorf("result line %s (%v)", line, err)
		}
		order = append(order, l.CustomID)
	}
	if strings.Join(order, ",") != "a,b,c" {
		t.Errorf("results after restart: %v, want a,b,c", order)
	}
	if got := f.calls(); len(got) != 1 || !strings.Contains(got[0], "row a") {
		t.Errorf("the first upstream saw %d calls, want row a only", len(got))
	}
	got := f2.calls()
	if len(got) != 2 || strings.Contains(strings.Join(got, ""), "row a") {
		t.Errorf("after the restart the upstream saw %d calls (%q), want rows b and c only", len(got), got)
	}
	// Once ended it keeps no file open and no request on disk.
	if _, err := os.Stat(filepath.Join(dir, created.ID+".requests.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the requests of an ended batch are still kept (%v)", err)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	e := newEnv(t, options{})
	const n = 4
	for i := range n {
		if resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("metrics %d", i))); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	e.do("POST", "/v1/messages", message("bad", "model", "claude-nonexistent-9"))
	resp, b := e.do("GET", "/metrics", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sum := func(name string, match ...string) float64 {
		total := 0.0
	lines:
		for line := range strings.Lines(string(b)) {
			if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			for _, m := range match {
				if !strings.Contains(line, m) {
					continue lines
				}
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			total += v
		}
		return total
	}
	for _, c := range []struct {
		name  string
		match []string
		want  float64
	}{
		{"sluice_lane_ok_total", nil, n},
		{"sluice_lane_attempts_total", nil, n + 1},
		{"sluice_proxy_requests_total", []string{`endpoint="messages"`, `code="200"`}, n},
		{"sluice_proxy_requests_total", []string{`endpoint="messages"`, `code="404"`}, 1},
		{"sluice_proxy_queue_wait_seconds_count", nil, n + 1},
		{"sluice_lane_rate_limited_total", nil, 0},
		{"sluice_keys_live", nil, 3},
	} {
		if got := sum(c.name, c.match...); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.match, got, c.want)
		}
	}
	if sum("sluice_lane_cost_usd_total") <= 0 || sum("sluice_lane_output_tokens_total") <= 0 || sum("sluice_lane_limit") <= 0 {
		t.Errorf("cost, tokens or limit missing:\n%s", b)
	}
	resp, b = e.do("GET", "/healthz", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"ok"`) {
		t.Errorf("healthz: %d %s", resp.StatusCode, b)
	}
	e.px.Drain()
	resp, b = e.do("GET", "/healthz", nil)
	if resp.StatusCode != 503 || !strings.Contains(string(b), "draining") {
		t.Errorf("healthz while draining: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("POST", "/v1/messages", message("late")); resp.StatusCode != api.StatusOverloaded {
		t.Errorf("a call while draining: %d %s, want 529", resp.StatusCode, b)
	}
}

func TestCacheAnswersRepeats(t *testing.T) {
	ch, err := cache.Open(filepath.Join(t.TempDir(), "cache.db"), cache.On)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	e := newEnv(t, options{proxy: func(c *proxy.Config) { c.Cache = ch }})
	// max_tokens high enough that the answer ends with end_turn: only
	// finished answers are cached.
	body := message("Cache me if you can.", "max_tokens", 1024)
	r1, b1 := e.do("POST", "/v1/messages", body)
	e.px.Wait() // the cache write runs off the response path
	r2, b2 := e.do("POST", "/v1/messages", body)
	if r1.StatusCode != 200 || r2.StatusCode != 200 || r2.Header.Get("X-Sluice-Cache") != "hit" || r1.Header.Get("X-Sluice-Cache") != "" {
		t.Fatalf("statuses %d, %d; cache headers %q, %q", r1.StatusCode, r2.StatusCode, r1.Header.Get("X-Sluice-Cache"), r2.Header.Get("X-Sluice-Cache"))
	}
	if !bytes.Equal(bytes.TrimSpace(b1), bytes.TrimSpace(b2)) {
		t.Errorf("the hit differs from the answer:\n%s\n%s", b1, b2)
	}
	if st, _ := e.d.Snapshot(); st.Submitted != 1 {
		t.Errorf("%d calls reached the dispatcher, want 1", st.Submitted)
	}
	// A streamed call is never answered from the cache.
	if resp, _ := e.do("POST", "/v1/messages", message("Cache me if you can.", "stream", true)); resp.Header.Get("X-Sluice-Cache") != "" {
		t.Error("a stream was answered from the cache")
	}
}

// TestGracefulShutdownDrainsStreams: a stream in flight when the server
// shuts down is delivered whole; Shutdown returns once it is.
func TestGracefulShutdownDrainsStreams(t *testing.T) {
	release := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio})
	srv := &http.Server{Handler: e.px}
	ts := httptest.NewUnstartedServer(e.px)
	ts.Config = srv
	ts.Start()
	raw, _ := json.Marshal(message("stream", "stream", true))
	req, _ := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/messages", bytes.NewReader(raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, _ := rd.ReadString('\n'); line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	e.px.Drain()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	close(release)
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "event: message_stop") {
		t.Errorf("rest of the stream (%v): %q", err, rest)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestKeysNeverLeak drives every endpoint, errors, a batch and a key that
// dies mid-run, and looks for a key value in every answer, the log and
// the state dir.
func TestKeysNeverLeak(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{proxy: func(c *proxy.Config) { c.StateDir = dir }})
	e.do("POST", "/v1/messages", message("one"))
	e.do("POST", "/v1/messages", message("two", "stream", true))
	e.do("POST", "/v1/messages", message("bad", "model", "claude-nonexistent-9"))
	e.do("POST", "/v1/messages", "{not json")
	e.do("POST", "/v1/messages/count_tokens", map[string]any{"model": sonnet, "messages": []map[string]any{{"role": "user", "content": "x"}}})
	e.do("GET", "/v1/models", nil)
	// The lane with the most headroom is high_prio's: revoking its key
	// makes the next call meet a 401.
	if err := e.sim.SetKeyStatus("high_prio", sim.KeyRevoked); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		e.do("POST", "/v1/messages", message(fmt.Sprintf("after the revoke %d", i)))
	}
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{{"custom_id": "x", "params": message("in a batch")}}})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	e.pollBatch(created.ID)
	e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	e.do("GET", "/v1/messages/batches", nil)
	e.do("GET", "/metrics", nil)
	e.do("GET", "/healthz", nil)
	e.do("GET", "/nowhere", nil)
	e.close()

	if !strings.Contains(e.logs.String(), "key refused") {
		t.Errorf("the revoked key's refusal was not logged; log:\n%s", e.logs.String())
	}
	places := map[string]string{"log": e.logs.String()}
	e.seen.mu.Lock()
	for i, s := range e.seen.all {
		places[fmt.Sprintf("answer %d", i)] = s
	}
	e.seen.mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) == 0 {
		t.Error("no batch files in the state dir")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		places[f] = string(raw)
	}
	for name, text := range places {
		for _, k := range simtest.KeyEnv(sim.Default()) {
			if strings.Contains(text, k) {
				t.Errorf("%s contains the key ending %s", name, last4(k))
			}
		}
	}
}

// TestNoLiveKey: once every key is dead the dispatcher stops; calls get a
// 500 that says not to retry, and /healthz says why.
func TestNoLiveKey(t *testing.T) {
	e := newEnv(t, options{health: dieAtOnce})
	for _, label := range []string{"high_prio", "batch", "low_prio"} {
		if err := e.sim.SetKeyStatus(label, sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 { // the first meets the 401s, the second a stopped dispatcher
		resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("anyone there %d?", i)))
		if resp.StatusCode != 500 || resp.Header.Get(api.HeaderShouldRetry) != "false" || !strings.Contains(errorOf(t, b).Err.Message, "no live key") {
			t.Errorf("call %d: %d %s %s", i, resp.StatusCode, resp.Header.Get(api.HeaderShouldRetry), b)
		}
	}
	resp, b := e.do("GET", "/healthz", nil)
	if resp.StatusCode != 503 || !strings.Contains(string(b), "no_live_key") {
		t.Errorf("healthz: %d %s", resp.StatusCode, b)
	}
}

// TestUnpricedAnswersAreCounted: answers of a model the model table has no
// price for add nothing to the cost counter — their cost is unknown — and
// are counted apart, so a dashboard can tell.
func TestUnpricedAnswersAreCounted(t *testing.T) {
	e := newEnv(t, options{world: func(c *sim.Config) { c.Pools = map[string]api.Pool{"claude-next-1": "next"} }})
	for i := range 3 {
		if resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("unpriced %d", i), "model", "claude-next-1")); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	_, b := e.do("GET", "/metrics", nil)
	var unpriced, usd float64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.Contains(f[0], `pool="claude-next-1"`) {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(f[0], "sluice_lane_unpriced_answers_total{"):
			unpriced += v
		case strings.HasPrefix(f[0], "sluice_lane_cost_usd_total{"):
			usd += v
		}
	}
	if unpriced != 3 || usd != 0 {
		t.Errorf("unpriced %v, cost %v:\n%s", unpriced, usd, b)
	}
}
