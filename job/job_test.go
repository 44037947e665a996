package job_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// world serves the simulator on loopback and writes n requests; it returns
// the API's configuration and the files.
func world(t *testing.T, n int) (*sim.Server, dispatch.Config, string, string) {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) { c.Faults, c.TimeScale = sim.Faults{}, 50 })
	pool, err := simtest.Pool(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "requests.jsonl")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"q-%d","params":{"model":"claude-haiku-4-5","max_tokens":32,"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, i)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return s, dispatch.Config{BaseURL: base, Keys: pool.Keys()}, in, filepath.Join(dir, "results.jsonl")
}

// Route batch sends through Message Batches: the simulator sees batches,
// not Messages calls, and every request has its result.
func TestRouteBatch(t *testing.T) {
	s, api, in, out := world(t, 40)
	rep, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api, Route: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Route != "batch" || rep.Succeeded != 40 {
		t.Fatalf("route %q, %d succeeded: want batch, 40", rep.Route, rep.Succeeded)
	}
	st := s.Stats()
	var batched int64
	for _, o := range st.Orgs {
		batched += o.Batches.Requests
	}
	if batched != 40 {
		t.Fatalf("the simulator saw %d batch requests, want 40", batched)
	}
}

// A route the package does not know is refused before anything is read or
// sent.
func TestBadRouteRefused(t *testing.T) {
	_, api, in, out := world(t, 1)
	if _, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api, Route: "fast"}); err == nil ||
		!strings.Contains(err.Error(), "Route") {
		t.Fatalf("Route fast: err %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused run created its results file (%v)", err)
	}
}

// Invalid input stops the run before anything is sent, unless
// SkipInvalid, which records the line as errored.
func TestInvalidInput(t *testing.T) {
	_, api, in, out := world(t, 3)
	f, _ := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"custom_id":"bad","params":{"model":"claude-haiku-4-5"}}` + "\n")
	f.Close()
	_, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api})
	var ie *job.InvalidInputError
	if !errors.As(err, &ie) || ie.Total != 1 || len(ie.Lines) != 1 || ie.Lines[0].Line != 4 || ie.Lines[0].CustomID != "bad" {
		t.Fatalf("an invalid line 4: err %v (%+v), want a job.InvalidInputError naming it", err, ie)
	}
	rep, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api, SkipInvalid: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Invalid != 1 || rep.Succeeded != 3 || rep.Written != 4 {
		t.Fatalf("invalid %d, succeeded %d, written %d: want 1, 3, 4", rep.Invalid, rep.Succeeded, rep.Written)
	}
}

// Route auto plans from one probe of each organization and finishes the
// job on the route it picked (a small job: the sync lanes).
func TestRouteAuto(t *testing.T) {
	s, api, in, out := world(t, 30)
	rep, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api, Route: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 30 || rep.Route != "sync" || rep.PredictedSeconds <= 0 {
		t.Fatalf("auto: route %q (%s), predicted %.1fs, %d succeeded: want the planner's sync route for 30",
			rep.Route, rep.RouteWhy, rep.PredictedSeconds, rep.Succeeded)
	}
	var probes int64
	for _, o := range s.Stats().Orgs {
		for _, l := range o.Pools {
			probes += l.Admitted
		}
	}
	if probes <= 30 {
		t.Fatalf("the simulator admitted %d Messages calls: want the job's 30 and the planner's probes", probes)
	}
}

// An API (or a gateway before it) that echoes the key in its errors: the
// results file and the report never hold the key's value.
func TestEchoedKeyNeverWritten(t *testing.T) {
	const secret = "sk-ant-api03-echoed-by-the-gateway-4242"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("anthropic-organization-id", "org-echo")
		w.Header().Set("content-type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			io.WriteString(w, `{"input_tokens":5}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request for key %s"}}`, r.Header.Get("x-api-key"))
	}))
	defer srv.Close()
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret})})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	os.WriteFile(in, []byte(`{"custom_id":"q","params":{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`+"\n"), 0o644)
	var logs strings.Builder
	rep, err := job.Run(context.Background(), job.Options{Input: in, Output: out,
		Dispatch: dispatch.Config{BaseURL: srv.URL, Keys: pool.Keys()},
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Final != 1 {
		t.Fatalf("final %d, want the one 400", rep.Final)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), "bad request for key") {
		t.Fatalf("the results file lacks the error: %s", b)
	}
	if strings.Contains(string(b), secret[12:]) || strings.Contains(logs.String(), secret[12:]) {
		t.Fatalf("the key's value was written:\nresults: %s\nlog: %s", b, logs.String())
	}
}
