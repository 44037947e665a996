package proxy_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/proxy"
)

// another starts a second proxy over e's dispatcher and keys on dir, as
// a second process would, with cfg changed by opt.
func (e *env) another(dir string, opt func(*proxy.Config)) (*proxy.Proxy, error) {
	cfg := proxy.Config{Dispatcher: e.d, Client: client.New(client.Config{BaseURL: e.base}), Pool: e.pool, StateDir: dir}
	if opt != nil {
		opt(&cfg)
	}
	return proxy.New(cfg)
}

// TestOneProxyPerStateDir: while one proxy serves on a state dir, a second
// is refused at once, with the holder named; while the holder drains, a
// second waits for it (bounded) and starts once it is closed; past the
// wait it is refused too.
func TestOneProxyPerStateDir(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	waited := false
	_, err := e.another(dir, func(c *proxy.Config) {
		c.LockWait = 10 * time.Second // a serving holder is never waited for
		c.OnLockWait = func(string) { waited = true }
	})
	if !errors.Is(err, proxy.ErrStateInUse) || !strings.Contains(err.Error(), "serving") || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("a second proxy on a served state dir: %v, want ErrStateInUse naming the serving holder", err)
	}
	if waited {
		t.Error("a second proxy waited for a holder that serves")
	}

	e.px.Drain()
	if _, err := e.another(dir, nil); !errors.Is(err, proxy.ErrStateInUse) || !strings.Contains(err.Error(), "still draining") {
		t.Fatalf("no wait for a draining holder: %v, want ErrStateInUse saying it still drains", err)
	}
	var holder string
	px, err := e.another(dir, func(c *proxy.Config) {
		c.LockWait = 10 * time.Second
		// The predecessor finishes its drain once the successor waits.
		c.OnLockWait = func(h string) { holder = h; e.close() }
	})
	if err != nil {
		t.Fatalf("a restart during the drain: %v", err)
	}
	defer px.Close()
	if !strings.Contains(holder, "draining since") {
		t.Errorf("the successor was told %q, want the holder's draining line", holder)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "lock"))
	if !strings.Contains(string(raw), "serving since") {
		t.Errorf("the lock file says %q once the successor holds it", raw)
	}
}

// TestStateTokenIsPrivateAndKept: the token is made once, 0600, and read
// back the same; a token file others can read, or an empty one, is
// refused with a message that says what to do.
func TestStateTokenIsPrivateAndKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tok, err := proxy.StateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "token"))
	if err != nil || fi.Mode().Perm() != 0o600 || len(tok) < 32 {
		t.Fatalf("token file %v (%v), token of %d characters: want 0600 and a long token", fi.Mode(), err, len(tok))
	}
	again, err := proxy.StateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("read again: %v, same token %v", err, again == tok)
	}
	if other, _ := proxy.StateToken(t.TempDir()); other == tok {
		t.Fatal("two state dirs got the same token")
	}
	os.Chmod(filepath.Join(dir, "token"), 0o644)
	if _, err := proxy.StateToken(dir); err == nil || !strings.Contains(err.Error(), "other users") || strings.Contains(err.Error(), tok) {
		t.Fatalf("a token file others can read: %v, want a refusal that does not show the token", err)
	}
	os.WriteFile(filepath.Join(dir, "token"), nil, 0o600)
	os.Chmod(filepath.Join(dir, "token"), 0o600)
	if _, err := proxy.StateToken(dir); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Fatalf("an empty token file: %v", err)
	}
	if _, err := proxy.StateToken(""); err == nil {
		t.Fatal("a token without a state dir")
	}
}

// TestMetricsAndHealthNeedTheToken: with a token, /metrics and /healthz
// answer 401 without it, unless MetricsPublic; any other path too.
func TestMetricsAndHealthNeedTheToken(t *testing.T) {
	const token = "proxy-token-for-the-metrics-test"
	guarded := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token }})
	public := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token; c.MetricsPublic = true }})
	for _, path := range []string{"/metrics", "/healthz", "/nowhere"} {
		if resp, b := guarded.do("GET", path, nil, "x-api-key", "not-the-token"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d %s, want 401", path, resp.StatusCode, b)
		}
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		if resp, b := guarded.do("GET", path, nil, "x-api-key", token); resp.StatusCode != 200 {
			t.Errorf("%s with the token: %d %s", path, resp.StatusCode, b)
		}
		if resp, b := public.do("GET", path, nil, "x-api-key", ""); resp.StatusCode != 200 {
			t.Errorf("%s with --metrics-public, no token: %d %s", path, resp.StatusCode, b)
		}
	}
	if resp, _ := public.do("POST", "/v1/messages", message("hi"), "x-api-key", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("--metrics-public opened /v1/messages: %d", resp.StatusCode)
	}
}
