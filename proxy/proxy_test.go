package proxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/proxy"
	"github.com/sluice-dev/sluice/sim"
)

func apiConfig(t *testing.T) dispatch.Config {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) { c.Faults, c.TimeScale, c.Verdicts.Enabled = sim.Faults{}, 50, true })
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: s.Config().Orgs[0].Keys[0].Key})})
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.Config{BaseURL: base, Keys: pool.Keys()}
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

// An upstream that echoes the key in its errors: the caller never sees the
// key's value, in a plain answer or a stream's error event.
func TestEchoedKeyNeverReachesTheCaller(t *testing.T) {
	const secret = "sk-ant-api03-echoed-to-the-caller-5151"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("anthropic-organization-id", "org-echo")
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			io.WriteString(w, `{"input_tokens":5}`)
			return
		}
		if strings.Contains(readAll(r), `"stream":true`) {
			w.Header().Set("content-type", "text/event-stream")
			io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
			io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"key "+r.Header.Get("x-api-key")+"\"}}\n\n")
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"key `+r.Header.Get("x-api-key")+`"}}`)
	}))
	defer up.Close()
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	px, err := proxy.New(ctx, proxy.Config{Dispatch: dispatch.Config{BaseURL: up.URL, Keys: pool.Keys()}, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px)
	defer func() { srv.Close(); px.Shutdown(ctx) }()
	for _, body := range []string{
		`{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"claude-haiku-4-5","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", "anything")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(got), "error") {
			t.Fatalf("%s: the caller got %d %s, want the upstream's error", body, resp.StatusCode, got)
		}
		if strings.Contains(string(got), secret[12:]) {
			t.Fatalf("%s: the caller got the key: %s", body, got)
		}
	}
}

func readAll(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}
