package dispatch_test

import (
	"bytes"
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
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

// sink records what a stream delivered.
type sink struct {
	mu      sync.Mutex
	begins  int
	status  int
	header  http.Header
	events  [][]byte
	failAt  int // Event number (1-based) that fails; 0: none
	onEvent func(n int)
}

func (s *sink) Begin(status int, h http.Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	s.status, s.header = status, h
	return nil
}

func (s *sink) Event(ev []byte) error {
	s.mu.Lock()
	s.events = append(s.events, bytes.Clone(ev))
	n := len(s.events)
	f := s.onEvent
	s.mu.Unlock()
	if f != nil {
		f(n)
	}
	if n == s.failAt {
		return errors.New("reader left")
	}
	return nil
}

// types returns the event names in order.
func (s *sink) types() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.events {
		for line := range strings.Lines(string(ev)) {
			if name, ok := strings.CutPrefix(line, "event: "); ok {
				out = append(out, strings.TrimSpace(name))
			}
		}
	}
	return out
}

func streamRequest(model string) *dispatch.Request {
	p, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 200, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "Stream a long answer, please."}}})
	return &dispatch.Request{ID: "s", Params: p, Model: model, MaxTokens: 200, EstInput: 10}
}

func serve(t *testing.T, d *dispatch.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go d.Serve(ctx)
	t.Cleanup(func() {
		cancel()
		d.Close()
		<-d.Done()
	})
}

func TestStreamPassesEventsThrough(t *testing.T) {
	w := loopbackWorld(t, nil)
	d := w.dispatcher(t, dispatch.Config{})
	serve(t, d)
	var s sink
	r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
	if r.Class != api.ClassOK || r.Aborted {
		t.Fatalf("Result class %q aborted %v err %v, want ok", r.Class, r.Aborted, r.Err)
	}
	got := s.types()
	if len(got) < 5 || got[0] != "message_start" || got[len(got)-1] != "message_stop" {
		t.Fatalf("events %v, want message_start … message_stop", got)
	}
	if s.begins != 1 || s.status != 200 || s.header.Get(api.HeaderRequestID) == "" {
		t.Errorf("Begin called %d times, status %d, request-id %q", s.begins, s.status, s.header.Get(api.HeaderRequestID))
	}
	// Usage comes from message_start (input) and message_delta (output):
	// the simulator answers one output token per word.
	var text strings.Builder
	for _, ev := range s.events {
		_, data, ok := strings.Cut(string(ev), "data: ")
		if !ok || !strings.Contains(data, `"text_delta"`) {
			continue
		}
		var m struct {
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &m); err != nil {
			t.Fatal(err)
		}
		text.WriteString(m.Delta.Text)
	}
	if words := int64(len(strings.Fields(text.String()))); r.Usage.OutputTokens != words || r.Usage.InputTokens == 0 {
		t.Errorf("usage %+v, want output_tokens %d and input_tokens > 0", r.Usage, words)
	}
	if r.StopReason == "" {
		t.Error("no stop_reason read from message_delta")
	}
	if st, _ := d.Snapshot(); st.OK != 1 {
		t.Errorf("stats OK = %d, want 1", st.OK)
	}
}

// fake is an upstream whose answers the test scripts, one per attempt.
type fake struct {
	calls atomic.Int32
	steps []func(w http.ResponseWriter, r *http.Request)
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.calls.Add(1))
	w.Header().Set(api.HeaderRequestID, fmt.Sprintf("req_fake%d", n))
	w.Header().Set(api.HeaderOrganizationID, "org-fake")
	if n > len(f.steps) {
		n = len(f.steps)
	}
	f.steps[n-1](w, r)
}

// fakeDispatcher serves f and returns a dispatcher on one key of org-fake,
// and its client.
func fakeDispatcher(t *testing.T, f http.Handler, cfg dispatch.Config) (*dispatch.Dispatcher, *client.Client) {
	t.Helper()
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: "sk-ant-test-fake-key-0000000001"}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Keys() {
		k.SetOrg("org-fake")
	}
	cfg.Client, cfg.Keys = client.New(client.Config{BaseURL: ts.URL}), p.Keys()
	cfg.Retry = dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, d)
	return d, cfg.Client
}

func overloaded(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(529)
	w.Write(api.NewErrorBody(api.ErrOverloaded, "", "Overloaded").Marshal())
}

func event(w http.ResponseWriter, name, data string) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
	w.(http.Flusher).Flush()
}

func streamHead(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	event(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`)
}

func streamTail(w http.ResponseWriter) {
	event(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello there"}}`)
	event(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`)
	event(w, "message_stop", `{"type":"message_stop"}`)
}

// dropConnection ends the response without finishing it.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestStreamRetriedOnlyBeforeFirstByte(t *testing.T) {
	cases := []struct {
		name     string
		steps    []func(w http.ResponseWriter, r *http.Request)
		class    string
		attempts int
		events   []string
	}{
		{"529 then a whole stream", []func(http.ResponseWriter, *http.Request){
			overloaded,
			func(w http.ResponseWriter, _ *http.Request) { streamHead(w); streamTail(w) },
		}, api.ClassOK, 2, []string{"message_start", "content_block_delta", "message_delta", "message_stop"}},
		{"cut after the first event is not sent again", []func(http.ResponseWriter, *http.Request){
			overloaded,
			func(w http.ResponseWriter, _ *http.Request) { streamHead(w); dropConnection(w) },
			func(w http.ResponseWriter, _ *http.Request) { streamHead(w); streamTail(w) },
		}, api.ClassTransport, 2, []string{"message_start"}},
		{"error event mid-stream is passed on, not retried", []func(http.ResponseWriter, *http.Request){
			func(w http.ResponseWriter, _ *http.Request) {
				streamHead(w)
				event(w, "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			},
			func(w http.ResponseWriter, _ *http.Request) { streamHead(w); streamTail(w) },
		}, api.ClassTransport, 1, []string{"message_start", "error"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{steps: tc.steps}
			d, _ := fakeDispatcher(t, f, dispatch.Config{})
			var s sink
			r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
			if r.Class != tc.class || r.Attempts != tc.attempts {
				t.Errorf("Result class %q attempts %d (err %v), want %q after %d", r.Class, r.Attempts, r.Err, tc.class, tc.attempts)
			}
			if got := int(f.calls.Load()); got != tc.attempts {
				t.Errorf("upstream saw %d calls, want %d", got, tc.attempts)
			}
			if s.begins != 1 {
				t.Errorf("Begin called %d times, want 1", s.begins)
			}
			if got := s.types(); strings.Join(got, ",") != strings.Join(tc.events, ",") {
				t.Errorf("events %v, want %v", got, tc.events)
			}
		})
	}
}

func TestStreamErrorBeforeStreamIsAnOrdinaryAnswer(t *testing.T) {
	f := &fake{steps: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		w.Write(api.NewErrorBody(api.ErrInvalidRequest, "", "max_tokens: Field required").Marshal())
	}}}
	d, _ := fakeDispatcher(t, f, dispatch.Config{})
	var s sink
	r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
	if r.Class != api.ClassFinal || r.Status != 400 || !bytes.Contains(r.Body, []byte("max_tokens")) {
		t.Errorf("Result class %q status %d body %s, want final 400 with the API's body", r.Class, r.Status, r.Body)
	}
	if s.begins != 0 || len(s.events) != 0 {
		t.Errorf("the sink saw %d begins and %d events of a non-stream answer", s.begins, len(s.events))
	}
}

func TestStreamReaderLeavingWithdraws(t *testing.T) {
	f := &fake{steps: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) { streamHead(w); streamTail(w) },
	}}
	d, _ := fakeDispatcher(t, f, dispatch.Config{})
	s := sink{failAt: 1}
	r := d.Stream(t.Context(), streamRequest("claude-sonnet-4-5"), nil, &s)
	if !r.Aborted || r.Err == nil {
		t.Errorf("Result aborted %v err %v, want a withdrawn request", r.Aborted, r.Err)
	}
	if got := f.calls.Load(); got != 1 {
		t.Errorf("upstream saw %d calls, want 1", got)
	}
}

// TestSubmitSendWithdrawsWaiting: a request whose context ends while it
// waits for a slot is never sent.
func TestSubmitSendWithdrawsWaiting(t *testing.T) {
	release := make(chan struct{})
	f := &fake{steps: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
	}}}
	d, c := fakeDispatcher(t, f, dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 1}})
	reqs := requests(2, "claude-sonnet-4-5")

	first := make(chan dispatch.Result, 1)
	started := make(chan struct{})
	var once sync.Once
	send := func(ctx context.Context, k *keys.Key) client.Outcome {
		once.Do(func() { close(started) })
		o, _ := c.Send(ctx, k, "POST", "/v1/messages", reqs[0].Params, nil, false)
		return o
	}
	if err := d.SubmitSend(t.Context(), reqs[0], send, func(r dispatch.Result) { first <- r }); err != nil {
		t.Fatal(err)
	}
	<-started // the only slot is taken

	var secondSent atomic.Bool
	ctx, cancel := context.WithCancelCause(t.Context())
	second := make(chan dispatch.Result, 1)
	if err := d.SubmitSend(ctx, reqs[1], func(context.Context, *keys.Key) client.Outcome {
		secondSent.Store(true)
		return client.Outcome{Class: client.OK, Status: 200}
	}, func(r dispatch.Result) { second <- r }); err != nil {
		t.Fatal(err)
	}
	gone := errors.New("caller gave up")
	cancel(gone)
	close(release)

	if r := <-first; r.Class != api.ClassOK {
		t.Errorf("first: class %q err %v, want ok", r.Class, r.Err)
	}
	r := <-second
	if !r.Aborted || !errors.Is(r.Err, gone) {
		t.Errorf("second: aborted %v err %v, want aborted with the context's cause", r.Aborted, r.Err)
	}
	if secondSent.Load() {
		t.Error("the withdrawn request was sent")
	}
}

func TestSenderCanceledWithdraws(t *testing.T) {
	f := &fake{steps: []func(http.ResponseWriter, *http.Request){overloaded}}
	d, _ := fakeDispatcher(t, f, dispatch.Config{})
	var calls atomic.Int32
	why := errors.New("not any more")
	ch := make(chan dispatch.Result, 1)
	err := d.SubmitSend(t.Context(), requests(1, "claude-sonnet-4-5")[0], func(context.Context, *keys.Key) client.Outcome {
		calls.Add(1)
		return client.Outcome{Class: client.Canceled, Err: why}
	}, func(r dispatch.Result) { ch <- r })
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if !r.Aborted || !errors.Is(r.Err, why) || calls.Load() != 1 {
		t.Errorf("aborted %v err %v after %d sends, want aborted with the Sender's error after 1", r.Aborted, r.Err, calls.Load())
	}
}
