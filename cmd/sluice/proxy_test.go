package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// freeAddr returns a loopback address nothing listens on (for a moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestProxyCommandServesAndDrains runs `sluice proxy` as a user would, in
// front of the simulator: the token from `sluice proxy token`, a message,
// a stream, a batch, health, metrics, then SIGINT. No key value, nor the
// token, may reach its output.
func TestProxyCommandServesAndDrains(t *testing.T) {
	e := newE2E(t)
	addr := freeAddr(t)
	p := e.start("proxy", "--listen", addr, "--state-dir", e.path("state"), "--no-dotenv")
	base := "http://" + addr
	token := e.proxyToken(p, base, e.path("state"))
	post := func(path string, body any) (int, http.Header, []byte) {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(raw))
		req.Header.Set("x-api-key", token)
		req.Header.Set("anthropic-version", api.VersionDefault)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	msg := func(text string, stream bool) map[string]any {
		return map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
			"messages": []map[string]any{{"role": "user", "content": text}}}
	}
	if code, _, b := post("/v1/messages", msg("hello, proxy", false)); code != 200 || !strings.Contains(string(b), `"text":"sim-`) {
		t.Errorf("message: %d %s", code, b)
	}
	if code, h, b := post("/v1/messages", msg("stream, proxy", true)); code != 200 || h.Get("Content-Type") != "text/event-stream" || !strings.Contains(string(b), "event: message_stop") {
		t.Errorf("stream: %d %s %.200s", code, h.Get("Content-Type"), b)
	}
	code, _, b := post("/v1/messages/batches", map[string]any{"requests": []map[string]any{{"custom_id": "one", "params": msg("in a batch", false)}}})
	if code != 200 || !strings.Contains(string(b), `"message_batch"`) {
		t.Errorf("batch create: %d %s", code, b)
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("x-api-key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp, err := http.Get(base + "/metrics"); err != nil || resp.StatusCode != 401 {
		t.Errorf("/metrics without the token: %v %v, want 401", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if !bytes.Contains(metrics, []byte(`sluice_proxy_requests_total{code="200",endpoint="messages"} 2`)) {
		t.Errorf("metrics:\n%s", metrics)
	}

	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGINT\n%s", code, p.stderr.String())
	}
	out := p.stdout.String() + p.stderr.String()
	for _, want := range []string{"serving on http://" + addr, "ANTHROPIC_API_KEY=$(sluice proxy token --state-dir " + e.path("state") + ")", "draining", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, token) {
		t.Error("the proxy printed its token")
	}
	for _, k := range fakeKeys {
		if strings.Contains(out, k) || bytes.Contains(metrics, []byte(k)) {
			t.Errorf("the output or metrics contain the key ending %s", k[len(k)-4:])
		}
	}
	states, _ := os.ReadDir(e.path("state"))
	for _, f := range states {
		raw, _ := os.ReadFile(e.path("state/" + f.Name()))
		for _, k := range fakeKeys {
			if bytes.Contains(raw, []byte(k)) {
				t.Errorf("state file %s contains the key ending %s", f.Name(), k[len(k)-4:])
			}
		}
	}
}

// TestProxyNoAuthBeyondLoopbackIsRefused: --no-auth beyond loopback is
// refused before anything is served.
func TestProxyNoAuthBeyondLoopbackIsRefused(t *testing.T) {
	e := newE2E(t)
	p := e.start("proxy", "--listen", "0.0.0.0:0", "--no-dotenv", "--no-auth", "--state-dir", e.path("state"))
	if code := p.wait(); code == 0 {
		t.Fatalf("sluice proxy --listen 0.0.0.0:0 --no-auth exited 0\n%s", p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "--no-auth") {
		t.Errorf("stderr does not name --no-auth:\n%s", p.stderr.String())
	}
	if n := e.simCalls(); n != 0 {
		t.Errorf("the refused proxy made %d calls", n)
	}
}

// fakeListener is a listener bound, it says, to addr.
type fakeListener struct {
	addr   net.Addr
	closed bool
}

func (l *fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l *fakeListener) Close() error              { l.closed = true; return nil }
func (l *fakeListener) Addr() net.Addr            { return l.addr }

// TestProxyLoopbackIsTheBoundAddress: what decides is the address the
// listener is bound to, not the name asked for — "localhost" that
// resolves beyond loopback is refused with --no-auth, before any key is
// read or any call made.
func TestProxyLoopbackIsTheBoundAddress(t *testing.T) {
	t.Setenv(envProxyToken, "")
	ln := &fakeListener{addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8787}}
	var asked string
	old := proxyListen
	proxyListen = func(_, addr string) (net.Listener, error) { asked = addr; return ln, nil }
	t.Cleanup(func() { proxyListen = old })

	cmd := proxyCmd()
	cmd.SetArgs([]string{"--listen", "localhost:8787", "--no-dotenv", "--keys-file", "/nonexistent/keys", "--no-auth"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "--no-auth") || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Fatalf("err %v, want a refusal naming the bound address and --no-auth", err)
	}
	if asked != "localhost:8787" || !ln.closed {
		t.Errorf("listened on %q, closed %v", asked, ln.closed)
	}
	if !addrIsLoopback(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")}) || addrIsLoopback(&net.TCPAddr{IP: net.IPv4zero}) || addrIsLoopback(&net.TCPAddr{IP: net.IPv6unspecified}) {
		t.Error("addrIsLoopback: 127.0.0.1 must be loopback, 0.0.0.0 and :: not")
	}
}

// proxyToken runs `sluice proxy token --state-dir stateDir` and waits until
// the proxy p serves /healthz to a caller with that token; it returns the
// token.
func (e *e2e) proxyToken(p *proc, base, stateDir string) string {
	e.t.Helper()
	tp := e.runOK("proxy", "token", "--state-dir", stateDir)
	token := strings.TrimSpace(tp.stdout.String())
	if len(token) < 32 {
		e.t.Fatalf("sluice proxy token printed %q", token)
	}
	for {
		if p.exited() {
			e.t.Fatalf("sluice proxy exited: %d\n%s", p.cmd.ProcessState.ExitCode(), p.stderr.String())
		}
		req, _ := http.NewRequest("GET", base+"/healthz", nil)
		req.Header.Set("x-api-key", token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return token
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}
