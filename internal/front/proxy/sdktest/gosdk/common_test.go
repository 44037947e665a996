package gosdk_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/testkit/proxytest"
	"github.com/sluice-dev/sluice/sim"
)

// The tests are written once against the small interface below and run
// for each SDK line; each adapter (v1_test.go, v2_test.go) calls only its
// SDK's public API and hands back the SDK's own errors.

const model = "claude-sonnet-4-5"

// callerKey is a key that is not the proxy's token: the proxy refuses it
// (and never forwards it).
const callerKey = "sk-ant-callers-own-key-never-forwarded"

type line interface {
	Name() string
	Connect(baseURL, key string) sdk
}

type sdk interface {
	Message(ctx context.Context, model string, maxTokens int64, text string) (msg, error)
	Stream(ctx context.Context, maxTokens int64, text string) (events []string, m msg, err error)
	CountTokens(ctx context.Context, text string) (int64, error)
	BatchCreate(ctx context.Context, ids, texts []string) (batch, error)
	BatchGet(ctx context.Context, id string) (batch, error)
	BatchList(ctx context.Context) ([]string, error)
	BatchResults(ctx context.Context, id string) ([]row, error)
	// APIError unwraps err into the line's *anthropic.Error.
	APIError(err error) (apiErr, bool)
}

type msg struct {
	Text, StopReason, RequestID string
	OutputTokens                int64
}

type batch struct {
	ID, Status string
	Succeeded  int64
	Errored    int64
	Processing int64
}

type row struct{ CustomID, Type, Text string }

type apiErr struct {
	Status    int
	Type      string
	RequestID string
	Header    http.Header
}

var lines = []line{v1Line{}, v2Line{}}

func forEachLine(t *testing.T, f func(t *testing.T, l line)) {
	for _, l := range lines {
		t.Run(l.Name(), func(t *testing.T) {
			t.Parallel()
			f(t, l)
		})
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestMessage(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{})
		m, err := l.Connect(e.URL, e.Token).Message(ctxOf(t), model, 64, "Hello through the proxy.")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.Text, "sim-") || m.OutputTokens == 0 || !strings.HasPrefix(m.RequestID, "req_") {
			t.Errorf("message %+v", m)
		}
	})
}

func TestStream(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{})
		events, m, err := l.Connect(e.URL, e.Token).Stream(ctxOf(t), 300, "Stream through the proxy.")
		if err != nil {
			t.Fatal(err)
		}
		if len(events) < 4 || events[0] != "message_start" || events[len(events)-1] != "message_stop" || !slices.Contains(events, "content_block_delta") {
			t.Errorf("events %v", events)
		}
		// The simulator answers one token per word; the SDK's accumulator
		// must have taken message_delta's count.
		if !strings.HasPrefix(m.Text, "sim-") || m.OutputTokens != int64(len(strings.Fields(m.Text))) {
			t.Errorf("accumulated message %+v", m)
		}
	})
}

func TestBatchRoundTrip(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{Proxy: func(c *proxy.Config) { c.StateDir = t.TempDir() }})
		c := l.Connect(e.URL, e.Token)
		ctx := ctxOf(t)
		ids := []string{"row-a", "row-b", "row-c"}
		b, err := c.BatchCreate(ctx, ids, []string{"first question", "second question", "third question"})
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != api.BatchInProgress || b.Processing != 3 || !strings.HasPrefix(b.ID, "msgbatch_") {
			t.Errorf("created %+v", b)
		}
		for b.Status != api.BatchEnded {
			if ctx.Err() != nil {
				t.Fatalf("batch did not end: %+v", b)
			}
			time.Sleep(5 * time.Millisecond)
			if b, err = c.BatchGet(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		if b.Succeeded != 3 || b.Errored != 0 || b.Processing != 0 {
			t.Errorf("ended %+v", b)
		}
		listed, err := c.BatchList(ctx)
		if err != nil || !slices.Contains(listed, b.ID) {
			t.Errorf("list %v (%v) lacks %s", listed, err, b.ID)
		}
		rows, err := c.BatchResults(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.CustomID)
			if r.Type != api.ResultSucceeded || !strings.HasPrefix(r.Text, "sim-") {
				t.Errorf("row %+v", r)
			}
		}
		if !slices.Equal(got, ids) {
			t.Errorf("result ids %v, want %v", got, ids)
		}
	})
}

func TestErrorsAreTheSDKsOwn(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{})
		c := l.Connect(e.URL, e.Token)
		for _, tc := range []struct {
			name      string
			model     string
			maxTokens int64
			status    int
			typ       api.ErrorType
		}{
			{"400 negative max_tokens", model, -1, 400, api.ErrInvalidRequest},
			{"404 unknown model", "claude-nonexistent-9", 64, 404, api.ErrNotFound},
		} {
			_, err := c.Message(ctxOf(t), tc.model, tc.maxTokens, "hello")
			ae, ok := c.APIError(err)
			if !ok || ae.Status != tc.status || ae.Type != string(tc.typ) || !strings.HasPrefix(ae.RequestID, "req_") || strings.HasPrefix(ae.RequestID, "req_sluice") {
				t.Errorf("%s: %+v (ok %v, err %v): want the API's own %d %s and request id", tc.name, ae, ok, err, tc.status, tc.typ)
			}
		}
	})
}

func TestWrongTokenIsAuthenticationError(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{Proxy: func(c *proxy.Config) { c.Token = "the-proxy-token" }})
		_, err := l.Connect(e.URL, callerKey).Message(ctxOf(t), model, 64, "let me in")
		ae, ok := l.Connect(e.URL, callerKey).APIError(err)
		if !ok || ae.Status != 401 || ae.Type != string(api.ErrAuthentication) {
			t.Errorf("wrong token: %+v (ok %v, err %v), want 401 authentication_error", ae, ok, err)
		}
		if _, err := l.Connect(e.URL, "the-proxy-token").Message(ctxOf(t), model, 64, "let me in"); err != nil {
			t.Errorf("with the token: %v", err)
		}
	})
}

// TestWaitExpiredIsRateLimitError: with the only slot held by a slow
// answer, a call that waits past --max-wait surfaces as the SDK's 429, with
// retry-after for the SDK's own retry.
func TestWaitExpiredIsRateLimitError(t *testing.T) {
	forEachLine(t, func(t *testing.T, l line) {
		e := proxytest.Start(t, proxytest.Options{
			World: func(c *sim.Config) {
				c.TimeScale = 1
				for k := range c.Latency {
					c.Latency[k] = sim.LatencyModel{TTFT: sim.Duration(2 * time.Second), TokensPerSec: 1e6}
				}
			},
			Dispatch: func(c *dispatch.Config) { c.Keys = c.Keys[:1]; c.Caps = map[api.Family]int{api.FamilySonnet: 1} },
			Proxy:    func(c *proxy.Config) { c.MaxWait = 20 * time.Millisecond },
		})
		c := l.Connect(e.URL, e.Token)
		done := make(chan error, 1)
		go func() { _, err := c.Message(ctxOf(t), model, 16, "slow, holds the slot"); done <- err }()
		for e.InFlight() == 0 {
			time.Sleep(time.Millisecond)
		}
		_, err := c.Message(ctxOf(t), model, 16, "waits too long")
		ae, ok := c.APIError(err)
		if !ok || ae.Status != 429 || ae.Type != string(api.ErrRateLimit) || ae.Header.Get("retry-after") == "" {
			t.Errorf("%+v (ok %v, err %v), want 429 rate_limit_error with retry-after", ae, ok, err)
		}
		if err := <-done; err != nil {
			t.Errorf("the slow call: %v", err)
		}
	})
}
