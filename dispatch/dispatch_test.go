package dispatch_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

func serveSim(t *testing.T) (sim.Config, string) {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) { c.Faults, c.TimeScale = sim.Faults{}, 20 })
	return s.Config(), base
}

func TestNewNeedsKeys(t *testing.T) {
	if _, err := dispatch.New(context.Background(), dispatch.Config{}); err == nil {
		t.Fatal("New with no keys: no error")
	}
}

// A key the API refuses leaves no live key: New says so, and never with
// the key's value.
func TestNewRefusedKey(t *testing.T) {
	_, base := serveSim(t)
	const secret = "sk-ant-fake-not-a-sim-key-9876"
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret})})
	if err != nil {
		t.Fatal(err)
	}
	pool.SetHealth(keys.Health{ProbeAfter: 1})
	_, err = dispatch.New(context.Background(), dispatch.Config{BaseURL: base, Keys: pool.Keys()})
	if err == nil {
		t.Fatal("New with a refused key: no error")
	}
	if strings.Contains(err.Error(), secret[8:]) {
		t.Fatalf("the error carries the key: %v", err)
	}
}

// Config's caps and organizations reach the lanes: two keys of two
// organizations each get a lane, and the stats count them apart.
func TestSubmitSpreadsOverOrganizations(t *testing.T) {
	cfg, base := serveSim(t)
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key, keys.EnvBatch: cfg.Orgs[1].Keys[0].Key})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := dispatch.New(ctx, dispatch.Config{BaseURL: base, Keys: pool.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	go d.Serve(ctx)
	const n = 400
	done := make(chan dispatch.Result, n)
	for i := range n {
		req := &dispatch.Request{ID: "q", Model: "claude-haiku-4-5", MaxTokens: 16,
			Params: []byte(`{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi ` + string(rune('a'+i%26)) + `"}]}`)}
		if err := d.Submit(ctx, req, func(r dispatch.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if r := <-done; r.Class != "ok" {
			t.Fatalf("result %+v", r)
		}
	}
	d.Close()
	<-d.Done()
	st := d.Stats()
	if st.OK != n {
		t.Fatalf("stats OK %d, want %d", st.OK, n)
	}
	orgs := map[string]int64{}
	for _, l := range st.Lanes {
		orgs[l.Org] += l.OK
	}
	if len(orgs) != 2 {
		t.Fatalf("answers by org %v: want both organizations used", orgs)
	}
}

// New fails when its context has ended, and when nothing answers at the
// base URL — not with a dispatcher whose keys were never probed.
func TestNewFailsWithoutAnAPI(t *testing.T) {
	cfg, base := serveSim(t)
	load := func() []*keys.Key {
		pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key})})
		if err != nil {
			t.Fatal(err)
		}
		return pool.Keys()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dispatch.New(ctx, dispatch.Config{BaseURL: base, Keys: load()}); err == nil {
		t.Error("a cancelled context: no error")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	if _, err := dispatch.New(context.Background(), dispatch.Config{BaseURL: closed, Keys: load()}); err == nil {
		t.Error("nothing listening at the base URL: no error")
	}
}

// An error body that echoes the key (a gateway may) reaches the caller
// without the key's value.
func TestResultBodyHidesEchoedKey(t *testing.T) {
	const secret = "sk-ant-api03-echoed-in-a-body-7777"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("anthropic-organization-id", "org-echo")
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			io.WriteString(w, `{"input_tokens":5}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"key `+r.Header.Get("x-api-key")+`"}}`)
	}))
	defer srv.Close()
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := dispatch.New(ctx, dispatch.Config{BaseURL: srv.URL, Keys: pool.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	go d.Serve(ctx)
	res := d.Do(ctx, &dispatch.Request{ID: "q", Model: "claude-haiku-4-5", MaxTokens: 8,
		Params: []byte(`{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)})
	d.Close()
	<-d.Done()
	if res.Status != 400 || !strings.Contains(string(res.Body), "invalid_request_error") {
		t.Fatalf("result %d %s", res.Status, res.Body)
	}
	if strings.Contains(string(res.Body), secret[12:]) {
		t.Fatalf("the body holds the key: %s", res.Body)
	}
	if res.Err != nil && strings.Contains(res.Err.Error(), secret[12:]) {
		t.Fatalf("the error holds the key: %v", res.Err)
	}
}
