package proxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/proxy"
	"github.com/sluice-dev/sluice/sim"
)

func apiConfig(t *testing.T) dispatch.Config {
	t.Helper()
	cfg := sim.Default()
	cfg.Faults = sim.Faults{}
	cfg.TimeScale = 50
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key})})
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.Config{BaseURL: "http://" + ln.Addr().String(), Keys: pool.Keys()}
}

// A caller without the token is refused; one StateDir has one proxy, and
// Shutdown lets the next one have it.
func TestTokenAndStateDir(t *testing.T) {
	ctx := context.Background()
	api, dir := apiConfig(t), t.TempDir()
	px, err := proxy.New(ctx, proxy.Config{Dispatch: api, Token: "a-token-of-sixteen-chars", StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", "not-the-token")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: status %d, want 401", resp.StatusCode)
	}
	if _, err := proxy.New(ctx, proxy.Config{Dispatch: api, NoAuth: true, StateDir: dir}); !errors.Is(err, proxy.ErrStateInUse) {
		t.Fatalf("a second proxy on the same StateDir: err %v, want ErrStateInUse", err)
	}
	srv.Close()
	if err := px.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := proxy.New(ctx, proxy.Config{Dispatch: api, NoAuth: true, StateDir: dir})
	if err != nil {
		t.Fatalf("after Shutdown, the StateDir is still held: %v", err)
	}
	if err := again.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// A proxy without a token must say so: NoAuth. A short token is refused.
func TestTokenRequired(t *testing.T) {
	api := apiConfig(t)
	for _, cfg := range []proxy.Config{{Dispatch: api}, {Dispatch: api, Token: "short"}, {Dispatch: api, Token: "a-token-of-sixteen-chars", NoAuth: true}} {
		if px, err := proxy.New(context.Background(), cfg); err == nil {
			px.Shutdown(context.Background())
			t.Errorf("token %q, NoAuth %v: no error", cfg.Token, cfg.NoAuth)
		}
	}
}
