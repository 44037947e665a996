package gosdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

// The conformance tests are written once, against the small interfaces
// below, and run for every official Go SDK line. Each line's adapter
// (v1_test.go, v2_test.go) calls only that SDK's public API and hands back
// the SDK's own results and errors, reduced to the plain structs here; an
// error is always the SDK's raw error, which the test then unwraps with
// the adapter's APIError (errors.As into that line's *anthropic.Error).

// sdkLine is one major line of the Go SDK.
type sdkLine interface {
	Name() string
	// Version is the anthropic-version header this line sends.
	Version() string
	// Connect returns a client of the line for the simulator at baseURL,
	// using key, with SDK retries set to retries.
	Connect(baseURL, key string, retries int) client
}

// client is a connected SDK client of one line.
type client interface {
	Message(ctx context.Context, r msgReq) (msgOut, error)
	Stream(ctx context.Context, r msgReq) (streamOut, error)
	CountTokens(ctx context.Context, r msgReq) (int64, http.Header, error)
	BatchCreate(ctx context.Context, reqs []batchReq) (batchOut, error)
	BatchGet(ctx context.Context, id string) (batchOut, error)
	BatchList(ctx context.Context) (batchPage, error)
	BatchCancel(ctx context.Context, id string) (batchOut, error)
	BatchDelete(ctx context.Context, id string) (batchOut, error)
	BatchResults(ctx context.Context, id string) ([]resultOut, error)
	// APIError unwraps err into the line's *anthropic.Error; ok is false
	// when err is not (or does not wrap) the SDK's own error type.
	APIError(err error) (e apiErr, ok bool)
}

// lines are the SDK lines under test.
var lines = []sdkLine{v1Line{}, v2Line{}}

// turn is one entry of "messages". Role "system" is sent through the SDK's
// own representation of a system-role message.
type turn struct{ Role, Text string }

type msgReq struct {
	Model     string
	MaxTokens int64
	Turns     []turn
}

type msgOut struct {
	ID, Model, Text, StopReason, ServiceTier string
	InputTokens, OutputTokens                int64
	Header                                   http.Header
	// Missing lists the keys the SDK's types mark api:"required" that the
	// response left out (Message, usage, text blocks).
	Missing []string
}

type streamOut struct {
	Events []string // event types in the order the SDK decoded them (it drops ping)
	Msg    msgOut   // the SDK accumulator's message
	Header http.Header
}

type batchReq struct {
	CustomID string
	Params   msgReq
}

type counts struct{ Processing, Succeeded, Errored, Canceled, Expired int64 }

type batchOut struct {
	ID, Type, Status, ResultsURL  string
	Counts                        counts
	CreatedAt, ExpiresAt, EndedAt time.Time
	CancelInitiatedAt             time.Time
	Header                        http.Header
	Missing                       []string // as msgOut.Missing
}

type batchPage struct {
	Data            []batchOut
	HasMore         bool
	FirstID, LastID string
}

type resultOut struct {
	CustomID, Type         string
	Text, ServiceTier      string
	InputTokens, OutputTok int64
	ErrType                string
	Missing                []string // of the succeeded message, as msgOut.Missing
}

// apiErr is what the test reads off the SDK's *anthropic.Error.
type apiErr struct {
	Status    int
	Type      string // Error.Type()
	Message   string // error.message
	ErrorCode string // error.details.error_code, "" when absent
	RequestID string // Error.RequestID (from the request-id header)
	Raw       string // Error.RawJSON()
	Header    http.Header
}

// missingRequired lists the JSON keys of the SDK response struct v (a
// struct with a JSON metadata field, as every SDK response type has) that
// its type tags api:"required" but that the response did not carry at all
// (JSON null counts as present). prefix is put before each key.
func missingRequired(v any, prefix string) []string {
	rv := reflect.ValueOf(v)
	meta := rv.FieldByName("JSON")
	var out []string
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Type().Field(i)
		if !strings.Contains(string(f.Tag), `api:"required"`) {
			continue
		}
		m := meta.FieldByName(f.Name)
		if !m.IsValid() {
			continue
		}
		raw := m.MethodByName("Raw")
		if raw.IsValid() && raw.Call(nil)[0].String() == "" {
			out = append(out, prefix+strings.Split(f.Tag.Get("json"), ",")[0])
		}
	}
	return out
}

// errorCodeOf reads error.details.error_code from a raw error body.
func errorCodeOf(raw string) string {
	var b struct {
		Error struct {
			Details struct {
				ErrorCode string `json:"error_code"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &b) != nil {
		return ""
	}
	return b.Error.Details.ErrorCode
}

func messageOf(raw string) string {
	var b struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal([]byte(raw), &b)
	return b.Error.Message
}

// --- the simulated world, served over real loopback HTTP ---

const (
	sonnet  = "claude-sonnet-4-5-20250929"
	haiku   = "claude-haiku-4-5-20251001"
	orgHigh = "high_prio"
	orgBat  = "batch"
	orgLow  = "low_prio"
)

// recorded is one request as it reached the simulator.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	At           time.Time
}

// recorder wraps the simulator's handler and keeps every request.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recorded
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body, At: time.Now()})
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

// requests returns the recorded requests to path (all when path is "").
func (r *recorder) requests(method, path string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, q := range r.reqs {
		if (method == "" || q.Method == method) && (path == "" || q.Path == path) {
			out = append(out, q)
		}
	}
	return out
}

type world struct {
	srv *sim.Server
	ts  *httptest.Server
	rec *recorder
}

// newWorld serves a fresh simulator built from the three-org preset at
// TimeScale 1000 (answers in milliseconds, batches in well under a second),
// after mutate, with the server options opts.
func newWorld(t *testing.T, mutate func(*sim.Config), opts ...sim.Option) *world {
	t.Helper()
	cfg := sim.Default()
	cfg.TimeScale = 1000
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := sim.New(cfg, opts...)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	rec := &recorder{next: srv.Handler()}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	return &world{srv: srv, ts: ts, rec: rec}
}

// fastLatency makes every answer take about a millisecond of real time
// whatever the TimeScale, for worlds that must run at TimeScale 1 so that
// a per-minute limit of 1 means one request.
func fastLatency(c *sim.Config) {
	for k := range c.Latency {
		c.Latency[k] = sim.LatencyModel{TTFT: sim.Duration(time.Millisecond), TokensPerSec: 1e6}
	}
}

// fakeClock is a settable clock for sim.WithClock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// newFakeClock starts a quarter of a millisecond past a whole second, so
// that instants derived from it are not whole milliseconds.
func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 2, 10, 0, 0, 250_000, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (w *world) connect(l sdkLine, key string, retries int) client {
	return l.Connect(w.ts.URL, key, retries)
}

func (w *world) lane(org string, p api.Pool) sim.LaneStats {
	return w.srv.Stats().Orgs[org].Pools[p]
}

// forEachLine runs f as a parallel subtest per SDK line.
func forEachLine(t *testing.T, f func(t *testing.T, l sdkLine)) {
	for _, l := range lines {
		t.Run(l.Name(), func(t *testing.T) {
			t.Parallel()
			f(t, l)
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func question(text string) msgReq {
	return msgReq{Model: sonnet, MaxTokens: 256, Turns: []turn{{"user", text}}}
}

// rateLimitHeaders are the twelve anthropic-ratelimit-* headers a Messages
// response carries when the lane has RPM, ITPM and OTPM limits.
func rateLimitHeaders() []string {
	var names []string
	for _, l := range api.Limiters {
		for _, f := range []string{"limit", "remaining", "reset"} {
			names = append(names, api.LimitHeaderName(l, f))
		}
	}
	return names
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// simOmits are the keys the SDK types mark required that the simulator's
// Messages responses leave out today (see the package's report): newer
// Message and usage fields it does not model. Any other missing key fails.
var simOmits = []string{
	"container", "diagnostics", "stop_details",
	"usage.inference_geo", "usage.output_tokens_details", "usage.server_tool_use", "usage.speed",
	"content.text.citations",
}

// checkRequiredKeys fails on a required key missing beyond simOmits.
func checkRequiredKeys(t *testing.T, what string, missing, tolerated []string) {
	t.Helper()
	for _, k := range missing {
		if !slices.Contains(tolerated, k) {
			t.Errorf("%s lacks %q, which the SDK types mark required", what, k)
		}
	}
}
