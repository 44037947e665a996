package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/internal/testkit/proxytest"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

const sonnet = "claude-sonnet-4-5"

// env is a proxy in front of an upstream (the simulator, or a fake), both
// over real loopback HTTP.
type env struct {
	t     *testing.T
	sim   *sim.Server // nil in front of a fake
	pool  *keys.Pool
	d     *dispatch.Dispatcher
	px    *proxy.Proxy
	url   string
	base  string // the upstream's URL
	logs  *logbuf.Buffer
	seen  *responses
	close func()
	// closeIn is close bounded in time (proxytest.Stack.CloseWithin).
	closeIn func(time.Duration) bool
	// httpc is the callers' client: http.DefaultClient, or one that
	// dials the proxy's in-memory listener (options.pipe).
	httpc *http.Client
	// dial connects to the proxy as a caller's raw connection would.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

type options struct {
	world    func(*sim.Config)       // the simulator's world
	upstream http.Handler            // a fake instead of the simulator
	dispatch func(*dispatch.Config)  // dispatcher settings
	proxy    func(*proxy.Config)     // proxy settings
	scale    float64                 // the world's time scale (default 1000)
	keysEnv  func(map[string]string) // change the keys' environment
	orgs     map[string]string       // fake: label → org id (default one org)
	simOf    *env                    // serve in front of this env's simulator (a restart)
	health   *keys.Health            // the keys' refusal rule (default keys.DefaultHealth)
	// pipe serves upstream (which must be set) and the proxy on in-memory
	// listeners, so the test can run in a testing/synctest bubble.
	pipe bool
}

// dieAtOnce is a refusal rule under which the first refusal kills a key:
// for tests of what happens once keys are dead, not of the rule.
var dieAtOnce = &keys.Health{DeadAfter: 0, DeadStrikes: 1}

// newEnv starts a simulator (or o.upstream), a dispatcher and a proxy.
func newEnv(t *testing.T, o options) *env {
	t.Helper()
	if o.scale == 0 {
		o.scale = 1000
	}
	e := &env{t: t, seen: &responses{}, httpc: http.DefaultClient, dial: (&net.Dialer{}).DialContext}
	var base string
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	cfg := sim.Default()
	switch {
	case o.pipe:
		if o.upstream == nil {
			t.Fatal("options.pipe needs options.upstream")
		}
		ln := pipenet.Listen()
		srv := &http.Server{Handler: o.upstream}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close(); ln.Close() })
		base, dial = "http://upstream", ln.DialContext
	case o.simOf != nil:
		e.sim, base = o.simOf.sim, o.simOf.base
		cfg = e.sim.Config()
	case o.upstream != nil:
		ts := httptest.NewServer(o.upstream)
		t.Cleanup(ts.Close)
		base = ts.URL
	default:
		e.sim, base = simtest.Loopback(t, func(c *sim.Config) {
			c.TimeScale = o.scale
			if o.world != nil {
				o.world(c)
			}
		})
		cfg = e.sim.Config()
	}
	e.base = base
	envKeys := simtest.KeyEnv(cfg)
	if o.keysEnv != nil {
		o.keysEnv(envKeys)
	}
	pool, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(envKeys), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	e.pool = pool
	if o.health != nil {
		pool.SetHealth(*o.health)
	}
	c := client.New(client.Config{BaseURL: base, MaxConns: 512, Dial: dial})
	if o.upstream != nil {
		for _, k := range pool.Keys() {
			org := "org-fake"
			if id, ok := o.orgs[k.Label()]; ok {
				org = id
			}
			k.SetOrg(org)
		}
	} else if _, err := dispatch.Discover(t.Context(), c, pool.Keys(), sonnet); err != nil {
		t.Fatal(err)
	}
	var pln net.Listener
	if o.pipe {
		ln := pipenet.Listen()
		pln = ln
		tr := &http.Transport{DialContext: ln.DialContext}
		e.httpc, e.dial = &http.Client{Transport: tr}, ln.DialContext
		t.Cleanup(func() { tr.CloseIdleConnections(); c.CloseIdle() })
	}
	st := proxytest.ServeOn(t, pln, pool, dispatch.Config{Client: c, Keys: pool.Keys(),
		Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}}, o.dispatch, o.proxy)
	e.d, e.px, e.logs, e.url, e.close, e.closeIn = st.Dispatcher, st.Proxy, st.Logs, st.Server.URL, st.Close, st.CloseWithin
	if o.pipe {
		e.url = "http://localhost" // the pipe's dialer takes any address; the proxy answers loopback names
	}
	return e
}

// responses keeps every answer the tests read, for the key-leak check.
type responses struct {
	mu  sync.Mutex
	all []string
}

func (r *responses) add(h http.Header, body []byte) {
	var b strings.Builder
	for name, vs := range h {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(vs, ", "))
	}
	b.Write(body)
	r.mu.Lock()
	r.all = append(r.all, b.String())
	r.mu.Unlock()
}

// do sends one request to the proxy with the caller's key "caller-key"
// (any key is accepted on loopback) and returns the answer, read whole.
func (e *env) do(method, path string, body any, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("x-api-key", "caller-key-not-a-real-one")
	req.Header.Set("anthropic-version", api.VersionDefault)
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := e.httpc.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	e.seen.add(resp.Header, b)
	return resp, b
}

func message(text string, extra ...any) map[string]any {
	m := map[string]any{"model": sonnet, "max_tokens": 64,
		"messages": []map[string]any{{"role": "user", "content": text}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// errorOf decodes an API error body.
func errorOf(t *testing.T, b []byte) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" {
		t.Fatalf("not an API error body (%v): %s", err, b)
	}
	return e
}

// textOf returns a message's text.
func textOf(t *testing.T, b []byte) string {
	t.Helper()
	var m api.Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a message (%v): %s", err, b)
	}
	var s strings.Builder
	for _, c := range m.Content {
		s.WriteString(c.Text)
	}
	return s.String()
}

// fakeUpstream answers Messages calls with a fixed message, holding each
// call until hold (when set) is closed, and records what it saw.
type fakeUpstream struct {
	mu      sync.Mutex
	bodies  []string
	headers []http.Header
	entered chan struct{} // gets a value as each call arrives (buffered)
	hold    chan struct{}
}

func newFake() *fakeUpstream {
	return &fakeUpstream{entered: make(chan struct{}, 100), hold: make(chan struct{})}
}

func (f *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, string(b))
	f.headers = append(f.headers, r.Header.Clone())
	n := len(f.bodies)
	f.mu.Unlock()
	f.entered <- struct{}{}
	<-f.hold
	w.Header().Set(api.HeaderRequestID, fmt.Sprintf("req_fake%04d", n))
	w.Header().Set(api.HeaderOrganizationID, "org-fake")
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"msg_fake%d","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"fake answer %d"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":3}}`, n, sonnet, n)
}

func (f *fakeUpstream) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...)
}

// oneSlot makes every lane's cap 1: a second call must wait.
func oneSlot(c *dispatch.Config) {
	c.Caps = map[api.Family]int{api.FamilySonnet: 1, api.FamilyHaiku: 1, api.FamilyOpus: 1, api.FamilyUnknown: 1}
}

// onlyHighPrio keeps only the first key, so a fake upstream has one lane.
func onlyHighPrio(m map[string]string) {
	delete(m, keys.EnvBatch)
	delete(m, keys.EnvLowPrio)
}

// pollBatch retrieves a batch until it has ended (failing the test if it
// has not after 20 s).
func (e *env) pollBatch(id string) api.MessageBatch {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a guard against a hang, as within
	for {
		resp, b := e.do("GET", "/v1/messages/batches/"+id, nil)
		if resp.StatusCode != 200 {
			e.t.Fatalf("retrieve %s: %d %s", id, resp.StatusCode, b)
		}
		var m api.MessageBatch
		if err := json.Unmarshal(b, &m); err != nil {
			e.t.Fatal(err)
		}
		if m.ProcessingStatus == api.BatchEnded {
			return m
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("batch %s did not end after 20 s", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeWithin shuts the proxy down (e.close) and fails the test when that
// takes longer than d: a guard against a hang (a virtual batch whose rows
// never all end keeps the shutdown waiting), not a synchronisation.
func (e *env) closeWithin(d time.Duration) {
	e.t.Helper()
	if !e.closeIn(d) {
		e.t.Fatalf("the proxy did not shut down within %v: a virtual batch's rows never all ended", d)
	}
}

// createBatch creates a virtual batch of n rows, custom_ids tag0 …
// tag(n-1), each a distinct message, and returns it.
func (e *env) createBatch(n int, tag string) api.MessageBatch {
	e.t.Helper()
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"custom_id": fmt.Sprintf("%s%d", tag, i), "params": message(fmt.Sprintf("%s row %d", tag, i))}
	}
	resp, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	if err := json.Unmarshal(b, &created); resp.StatusCode != 200 || err != nil {
		e.t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	return created
}
