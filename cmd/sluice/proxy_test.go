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
// front of the simulator: a message, a stream, a batch, health, metrics,
// then SIGINT. No key value may reach its output.
func TestProxyCommandServesAndDrains(t *testing.T) {
	e := newE2E(t)
	addr := freeAddr(t)
	p := e.start("proxy", "--listen", addr, "--state-dir", e.path("state"), "--no-dotenv")
	base := "http://" + addr
	for {
		if p.exited() {
			t.Fatalf("sluice proxy exited: %d\n%s", p.cmd.ProcessState.ExitCode(), p.stderr.String())
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	post := func(path string, body any) (int, http.Header, []byte) {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(raw))
		req.Header.Set("x-api-key", "the-callers-own-key")
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
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte(`sluice_proxy_requests_total{code="200",endpoint="messages"} 2`)) {
		t.Errorf("metrics:\n%s", metrics)
	}

	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(); code != 0 {
		t.Errorf("exit status %d after SIGINT\n%s", code, p.stderr.String())
	}
	out := p.stdout.String() + p.stderr.String()
	for _, want := range []string{"serving on http://" + addr, "draining", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
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

// TestProxyBeyondLoopbackNeedsToken: listening beyond loopback without
// SLUICE_PROXY_TOKEN is refused before anything is served.
func TestProxyBeyondLoopbackNeedsToken(t *testing.T) {
	e := newE2E(t)
	p := e.start("proxy", "--listen", "0.0.0.0:0", "--no-dotenv")
	if code := p.wait(); code == 0 {
		t.Fatalf("sluice proxy --listen 0.0.0.0:0 without a token exited 0\n%s", p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), envProxyToken) {
		t.Errorf("stderr does not name %s:\n%s", envProxyToken, p.stderr.String())
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
// resolves beyond loopback is refused without a token, before any key is
// read or any call made.
func TestProxyLoopbackIsTheBoundAddress(t *testing.T) {
	t.Setenv(envProxyToken, "")
	ln := &fakeListener{addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8787}}
	var asked string
	old := proxyListen
	proxyListen = func(_, addr string) (net.Listener, error) { asked = addr; return ln, nil }
	t.Cleanup(func() { proxyListen = old })

	cmd := proxyCmd()
	cmd.SetArgs([]string{"--listen", "localhost:8787", "--no-dotenv", "--keys-file", "/nonexistent/keys"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), envProxyToken) || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Fatalf("err %v, want a refusal naming the bound address and %s", err, envProxyToken)
	}
	if asked != "localhost:8787" || !ln.closed {
		t.Errorf("listened on %q, closed %v", asked, ln.closed)
	}
	if !addrIsLoopback(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")}) || addrIsLoopback(&net.TCPAddr{IP: net.IPv4zero}) || addrIsLoopback(&net.TCPAddr{IP: net.IPv6unspecified}) {
		t.Error("addrIsLoopback: 127.0.0.1 must be loopback, 0.0.0.0 and :: not")
	}
}
