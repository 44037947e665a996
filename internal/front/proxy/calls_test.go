package proxy_test

// Calls through the proxy when something goes wrong: an upstream stream cut
// mid-event, a web page's request to an open proxy, retries the caller
// waits through, an answer while draining, an upstream never reached.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
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
