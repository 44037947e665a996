package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// world is a simulator on an in-memory network, for testing/synctest
// bubbles, and the keys of its orgs.
type world struct {
	sim     *sim.Server
	client  *client.Client
	keys    []*keys.Key
	tap     *tap
	journal string
}

// tap records the batch calls that went through.
type tap struct {
	next http.RoundTripper
	mu   sync.Mutex
	// creates: org key label → body sizes and request counts
	creates   []createCall
	notFound  int
	retrieves int
	// failCreate, when set, decides the fate of a create before it is
	// forwarded: "" forwards it; "drop-after" forwards it then answers
	// with a transport error.
	failCreate func() string
	// maxCreateBytes > 0 answers 413 to a create body larger than it, as a
	// gateway with a small body limit would; the sim never sees it.
	maxCreateBytes int
	// createStatus, when set and non-zero, answers every create with that
	// status (an error body), unforwarded.
	createStatus int
	// firstCreateRetryAfter, when set, answers the first create 429 with
	// this retry-after, unforwarded.
	firstCreateRetryAfter string
	// failRetrieve, when set and true, answers a retrieve of one batch
	// with a 500, unforwarded.
	failRetrieve func() bool
	// resultsStatus, when set and non-zero, answers a results download
	// with that status (an error body), unforwarded: 404 is the results
	// not served yet after the end.
	resultsStatus func() int
	// messagesStatus, when non-zero, answers every POST /v1/messages (a
	// primer) with that status, unforwarded; messages counts them.
	messagesStatus int
	messages       int
	messagesDelay  time.Duration // each primer answers this late
	refuseZero     bool          // a primer with max_tokens 0 gets a 400
}

type createCall struct {
	key    string
	bytes  int
	n      int
	status int // the tap's own answer, 0 when forwarded
	at     time.Time
}

// answer is a response the tap makes up.
func answer(req *http.Request, status int, typ, msg string) *http.Response {
	body := api.NewErrorBody(api.ErrorType(typ), "", "%s", msg).Marshal()
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}
}

func (tp *tap) RoundTrip(req *http.Request) (*http.Response, error) {
	isCreate := req.Method == "POST" && req.URL.Path == "/v1/messages/batches"
	var body []byte
	if isCreate {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var c api.BatchCreate
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("tap: create body is not JSON: %v", err)
		}
		tp.mu.Lock()
		call := createCall{key: req.Header.Get("x-api-key"), bytes: len(body), n: len(c.Requests), at: time.Now()}
		limited := tp.firstCreateRetryAfter != "" && len(tp.creates) == 0
		switch {
		case limited:
			call.status = http.StatusTooManyRequests
		case tp.createStatus != 0:
			call.status = tp.createStatus
		case tp.maxCreateBytes > 0 && len(body) > tp.maxCreateBytes:
			call.status = http.StatusRequestEntityTooLarge
		}
		tp.creates = append(tp.creates, call)
		fail := tp.failCreate
		tp.mu.Unlock()
		if limited {
			resp := answer(req, call.status, "rate_limit_error", "slow down")
			resp.Header.Set("retry-after", tp.firstCreateRetryAfter)
			return resp, nil
		}
		if call.status != 0 {
			return answer(req, call.status, "invalid_request_error", "refused by the test gateway"), nil
		}
		if fail != nil && fail() == "drop-after" {
			resp, err := tp.next.RoundTrip(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return nil, fmt.Errorf("tap: connection dropped after the create was sent")
		}
	}
	if req.Method == "POST" && req.URL.Path == "/v1/messages" {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		tp.mu.Lock()
		tp.messages++
		st, d := tp.messagesStatus, tp.messagesDelay
		if tp.refuseZero && bytes.HasSuffix(b, []byte(`"max_tokens":0}`)) {
			st = 400
		}
		tp.mu.Unlock()
		if d > 0 {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
		if st != 0 {
			return answer(req, st, "rate_limit_error", "refused by the test gateway"), nil
		}
	}
	isRetrieve := req.Method == "GET" && strings.HasPrefix(req.URL.Path, "/v1/messages/batches/") && !strings.HasSuffix(req.URL.Path, "/results")
	tp.mu.Lock()
	failRetrieve, resultsStatus := tp.failRetrieve, tp.resultsStatus
	tp.mu.Unlock()
	if req.Method == "GET" && strings.HasSuffix(req.URL.Path, "/results") && resultsStatus != nil {
		if st := resultsStatus(); st != 0 {
			return answer(req, st, "api_error", "results status set by the test"), nil
		}
	}
	if isRetrieve && failRetrieve != nil && failRetrieve() {
		return answer(req, 500, "api_error", "the test gateway is down"), nil
	}
	resp, err := tp.next.RoundTrip(req)
	if err == nil && req.Method == "GET" && strings.HasPrefix(req.URL.Path, "/v1/messages/batches/") && !strings.HasSuffix(req.URL.Path, "/results") {
		tp.mu.Lock()
		tp.retrieves++
		if resp.StatusCode == 404 {
			tp.notFound++
		}
		tp.mu.Unlock()
	}
	return resp, err
}

func (tp *tap) createCount() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.creates)
}

// newWorld serves the three-org simulator (mutated) over pipenet and
// discovers the keys named by labels (all three when none).
func newWorld(t *testing.T, mutate func(*sim.Config), labels ...string) *world {
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
	tr := &http.Transport{DialContext: ln.DialContext, MaxIdleConnsPerHost: 64}
	tp := &tap{next: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		s.Shutdown(context.Background())
	})
	env := map[string]string{keys.EnvAPIKey: sim.FakeKeyHighPrio, keys.EnvBatch: sim.FakeKeyBatch, keys.EnvLowPrio: sim.FakeKeyLowPrio}
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(env)})
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(client.Config{BaseURL: "http://sim", Transport: tp})
	var ks []*keys.Key
	for _, k := range pool.Keys() {
		if len(labels) == 0 || contains(labels, k.Label()) {
			ks = append(ks, k)
		}
	}
	if _, err := dispatch.Discover(t.Context(), cl, ks, "claude-haiku-4-5"); err != nil {
		t.Fatal(err)
	}
	return &world{sim: s, client: cl, keys: ks, tap: tp,
		journal: filepath.Join(t.TempDir(), "batch.journal")}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// config is a test configuration: fast polls, the world's client and keys.
func (w *world) config() Config {
	return Config{
		Client: w.client, Keys: w.keys, Journal: w.journal,
		ChunkSize: 10, PollMin: time.Second, PollMax: 10 * time.Second,
	}
}

// sim calls the simulator's handler directly (no network), as key.
func (w *world) call(t *testing.T, method, path, key string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", api.VersionDefault)
	rec := httptest.NewRecorder()
	w.sim.Handler().ServeHTTP(rec, req)
	return rec
}

// callBody is call with a JSON body.
func (w *world) callBody(t *testing.T, method, path, key string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", api.VersionDefault)
	req.Header.Set("content-type", "application/json")
	rec := httptest.NewRecorder()
	w.sim.Handler().ServeHTTP(rec, req)
	return rec
}

// key returns the world's key labelled label.
func (w *world) key(t *testing.T, label string) *keys.Key {
	t.Helper()
	for _, k := range w.keys {
		if k.Label() == label {
			return k
		}
	}
	t.Fatalf("no key %s", label)
	return nil
}

// journalRecords returns the journal's records, in order.
func journalRecords(t *testing.T, path string) []record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// logBuffer collects a run's log lines.
type logBuffer struct{ logbuf.Buffer }

func (l *logBuffer) logger() *slog.Logger { return l.Logger(slog.LevelInfo) }

// created sums Batches.Created over the orgs.
func (w *world) created() int64 {
	var n int64
	for _, o := range w.sim.Stats().Orgs {
		n += o.Batches.Created
	}
	return n
}

// requests returns n valid Haiku requests r0 … r(n-1) with params hashes.
func requests(n int) []*call.Request {
	out := make([]*call.Request, n)
	for i := range out {
		out[i] = request(fmt.Sprintf("r%d", i), 64, fmt.Sprintf("Judge answer number %d.", i))
	}
	return out
}

func request(id string, maxTokens int, text string) *call.Request {
	p, _ := json.Marshal(map[string]any{"model": "claude-haiku-4-5", "max_tokens": maxTokens,
		"messages": []map[string]any{{"role": "user", "content": text}}})
	return &call.Request{ID: id, Params: p, Model: "claude-haiku-4-5", MaxTokens: int64(maxTokens), ParamsHash: jsonl.ParamsHash(p)}
}

// collector is a caller: it records each outcome, counts every result
// durable at once, and fails the test on a second outcome for an id.
type collector struct {
	t        *testing.T
	r        *Runner
	mu       sync.Mutex
	results  map[string]Result
	reroutes map[string]string
	// rerouteAt is when each re-route happened.
	rerouteAt map[string]time.Time
	// noDurable: the collector does not report results durable.
	noDurable bool
	// after, if set, runs after each outcome (outside the lock).
	after func(n int)
}

func newCollector(t *testing.T) *collector {
	return &collector{t: t, results: map[string]Result{}, reroutes: map[string]string{}, rerouteAt: map[string]time.Time{}}
}

// outcomes counts the outcomes so far.
func (c *collector) outcomes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.results) + len(c.reroutes)
}

func (c *collector) onResult(res Result) {
	id := res.Request.ID
	c.mu.Lock()
	_, dup := c.results[id]
	_, dup2 := c.reroutes[id]
	if dup || dup2 {
		c.t.Errorf("two outcomes for %s", id)
	}
	c.results[id] = res
	n := len(c.results) + len(c.reroutes)
	c.mu.Unlock()
	if !c.noDurable {
		c.r.Durable([]string{id})
	}
	if c.after != nil {
		c.after(n)
	}
}

func (c *collector) onReroute(req *call.Request, why string) {
	c.mu.Lock()
	_, dup := c.results[req.ID]
	_, dup2 := c.reroutes[req.ID]
	if dup || dup2 {
		c.t.Errorf("two outcomes for %s", req.ID)
	}
	c.reroutes[req.ID] = why
	c.rerouteAt[req.ID] = time.Now()
	n := len(c.results) + len(c.reroutes)
	c.mu.Unlock()
	if c.after != nil {
		c.after(n)
	}
}

// done returns the ids with a result (as a results file would hold them).
func (c *collector) done() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := map[string]bool{}
	for id := range c.results {
		d[id] = true
	}
	return d
}

// run runs one Runner over reqs (skipping done ids) and returns its
// collector and Run's error.
func (w *world) run(t *testing.T, cfg Config, reqs []*call.Request, done map[string]bool, crashAt func(string) bool) (*collector, *Runner, error) {
	t.Helper()
	return w.runWith(t, newCollector(t), cfg, reqs, done, crashAt, nil)
}

// runWith is run with a given collector; setup, if set, runs after New.
func (w *world) runWith(t *testing.T, col *collector, cfg Config, reqs []*call.Request, done map[string]bool,
	crashAt func(string) bool, setup func(*Runner)) (*collector, *Runner, error) {
	t.Helper()
	cfg.OnResult, cfg.OnReroute = col.onResult, col.onReroute
	if done != nil {
		cfg.Done = func(id string) bool { return done[id] }
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	col.r = r
	r.crash.at = crashAt
	if setup != nil {
		setup(r)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(t.Context()) }()
	for _, q := range reqs {
		if done[q.ID] {
			continue
		}
		if err := r.Submit(t.Context(), q); err != nil {
			break // stopped (a simulated crash)
		}
	}
	r.CloseInput()
	err = <-errc
	if cerr := r.Close(); cerr != nil && err == nil {
		t.Errorf("close: %v", cerr)
	}
	return col, r, err
}

// checkAllOK fails unless every request has exactly one ok result across
// the collectors, answering its own request.
func checkAllOK(t *testing.T, reqs []*call.Request, cols ...*collector) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range cols {
		for id, res := range c.results {
			seen[id]++
			if res.Class != api.ClassOK {
				t.Errorf("%s: class %q (%v)", id, res.Class, res.Err)
				continue
			}
			var m api.Message
			if err := json.Unmarshal(res.Body, &m); err != nil || len(m.Content) == 0 {
				t.Errorf("%s: body %s", id, res.Body)
				continue
			}
			if !strings.HasPrefix(m.Content[0].Text, sim.AnswerTag(res.Request.Body())) {
				t.Errorf("%s: answer %q is not its request's", id, m.Content[0].Text)
			}
			if res.BatchID == "" || res.Org == "" {
				t.Errorf("%s: batch %q org %q", id, res.BatchID, res.Org)
			}
		}
		for id, why := range c.reroutes {
			t.Errorf("%s re-routed: %s", id, why)
		}
	}
	for _, q := range reqs {
		if seen[q.ID] != 1 {
			t.Errorf("%s: %d results", q.ID, seen[q.ID])
		}
	}
}

// journalOps returns the ops of the journal, in order.
func journalOps(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		ops = append(ops, r.Op)
	}
	return ops
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func newClientStub() *client.Client { return client.New(client.Config{BaseURL: "http://unused"}) }
