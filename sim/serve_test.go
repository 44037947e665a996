package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
)

// serveOnPipe serves s on an in-memory listener and returns a client that
// dials it. Inside a synctest bubble the whole exchange runs in fake time.
func serveOnPipe(t *testing.T, s *Server) *http.Client {
	t.Helper()
	ln := pipenet.Listen()
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return &http.Client{Transport: &http.Transport{DialContext: ln.DialContext}}
}

func post(c *http.Client, body string) (*http.Response, error) {
	req, _ := http.NewRequest("POST", "http://sim/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", FakeKeyHighPrio)
	req.Header.Set("anthropic-version", api.VersionDefault)
	return c.Do(req)
}

func TestServeOnAnyListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		c := serveOnPipe(t, s)
		start := time.Now()
		resp, err := post(c, `{"model":"claude-opus-4-8","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"text":"sim-`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		// Opus latency is seconds of (fake) time; the test takes none.
		if time.Since(start) < time.Second {
			t.Fatalf("answer came after %v of fake time, want the latency model's seconds", time.Since(start))
		}
	})
}

func TestFaultConnectionReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) { c.Faults.PReset = 1 })
		c := serveOnPipe(t, s)
		resp, err := post(c, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("want a transport error, got HTTP %d", resp.StatusCode)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want a dropped connection, got %v", err)
		}
		st := s.Stats()
		ls := st.Orgs["high_prio"].Pools[api.PoolSonnet4]
		if ls.Resets != 1 || ls.Admitted != 1 || ls.InFlight != 0 || st.Bodies.DistinctAnswered != 0 {
			t.Fatalf("a reset call is admitted and billed but not answered: %+v %+v", ls, st.Bodies)
		}
	})
}
