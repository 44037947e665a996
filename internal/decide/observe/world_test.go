package observe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

func testKeys(t *testing.T) []*keys.Key {
	t.Helper()
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: "sk-ant-test-aaaaaaaaaaaaaaaa-0001", keys.EnvBatch: "sk-ant-test-bbbbbbbbbbbbbbbb-0002"})})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range pool.Keys() {
		k.SetOrg(fmt.Sprintf("org-%d", i))
	}
	return pool.Keys()
}

// TestFailedProbeIsNotRepeated: behind a gateway that strips the
// rate-limit headers, the probes read nothing; the failure is recorded,
// so the next plan sends none (and says why), and the world is the
// caps-bounded one.
func TestFailedProbeIsNotRepeated(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"max_tokens","usage":{"input_tokens":8,"output_tokens":1}}`)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "observations.json")
	o := WorldOptions{Path: path, Keys: testKeys(t), Client: client.New(client.Config{BaseURL: srv.URL}), Model: "claude-sonnet-4-5", MaxTokens: 256}
	w, prov, err := ForKeys(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || !strings.Contains(prov.String(), "2 probe(s) answered of 2 sent") || strings.Count(prov.String(), "got no rate-limit headers") != 2 {
		t.Fatalf("first plan: %d calls\n%s", calls.Load(), prov)
	}
	if len(w.Orgs) != 2 || len(w.Orgs[0].Limits) != 0 {
		t.Errorf("orgs %+v, want two without limits", w.Orgs)
	}
	_, prov, err = ForKeys(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || strings.Count(prov.String(), "not probed again") != 2 {
		t.Errorf("second plan: %d calls (want no more than the first 2)\n%s", calls.Load(), prov)
	}
}

// TestProbeIsBounded: an API that never answers the probe holds the plan
// back for the probe timeout, not the client's; and every organization is
// probed at once (both probes are at the server together), so the wait
// is one timeout, not one per organization.
func TestProbeIsBounded(t *testing.T) {
	var inFlight, most atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		io.Copy(io.Discard, r.Body) // read whole, so the server sees the client hang up
		<-r.Context().Done()        // never answers; the probe's deadline ends it
	}))
	defer srv.Close()
	o := WorldOptions{Off: true, Keys: testKeys(t), Client: client.New(client.Config{BaseURL: srv.URL}),
		Model: "claude-sonnet-4-5", ProbeTimeout: 300 * time.Millisecond}
	_, prov, err := ForKeys(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if most.Load() != 2 {
		t.Errorf("at most %d probe(s) at the server at once, want both organizations' together", most.Load())
	}
	if !strings.Contains(prov.String(), "0 probe(s) answered of 2 sent") {
		t.Errorf("provenance:\n%s", prov)
	}
}

// TestBadObservationsAreSetAside: values no run could have seen (a
// negative RPM, a negative answer length, an absurd latency) are dropped
// when the file is read, so the plan goes on.
func TestBadObservationsAreSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "observations.json")
	at := time.Now().UTC().Format(time.RFC3339)
	os.WriteFile(path, []byte(`{"version":1,"orgs":{"org-0":{"label":"high_prio","pools":{"sonnet-4":{
		"limits":{"rpm":-5,"itpm":0,"otpm":0,"source":"headers","at":"`+at+`"},
		"latency":{"mean_seconds":1e308,"mean_output":10,"n":5,"at":"`+at+`"},
		"output":{"256":{"mean":-3,"n":5,"at":"`+at+`"}}}}}}}`), 0o600)
	o := WorldOptions{Path: path, NoProbe: true, Keys: testKeys(t), Model: "claude-sonnet-4-5", MaxTokens: 256}
	w, prov, err := ForKeys(context.Background(), o)
	if err != nil {
		t.Fatalf("a damaged file stopped the plan: %v", err)
	}
	if len(w.Orgs[0].Limits) != 0 || !strings.Contains(prov.String(), "high_prio sonnet-4: limits unknown") {
		t.Errorf("the negative RPM was used: %+v\n%s", w.Orgs[0], prov)
	}
}

// TestProbeSeesDrainedBuckets: probes whose headers show 6 of 600
// requests left (a colleague drained the buckets) make the plan that
// follows them start drained; once the probe is older than FreshProbe the
// buckets have refilled and the plan starts full again.
func TestProbeSeesDrainedBuckets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("anthropic-ratelimit-requests-limit", "600")
		h.Set("anthropic-ratelimit-requests-remaining", "6")
		h.Set("anthropic-ratelimit-requests-reset", time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"max_tokens","usage":{"input_tokens":8,"output_tokens":1}}`)
	}))
	defer srv.Close()
	now := t0
	path := filepath.Join(t.TempDir(), "observations.json")
	o := WorldOptions{Path: path, Keys: testKeys(t), Client: client.New(client.Config{BaseURL: srv.URL}), Model: "claude-sonnet-4-5", MaxTokens: 256,
		Now: func() time.Time { return now }}
	w, prov, err := ForKeys(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// 6 left of a 60 s window at 10/s: 0.6 s of 60 s, 99 % drained.
	if w.BucketDrained < 0.98 || w.BucketDrained > 1 {
		t.Fatalf("bucket drained %.3f after a probe showing 6 of 600 left\n%s", w.BucketDrained, prov)
	}
	now = now.Add(FreshProbe + time.Second)
	w, prov, err = ForKeys(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if w.BucketDrained != 0 || !strings.Contains(prov.String(), "buckets at the start: full") {
		t.Fatalf("bucket drained %.3f from a probe %v old\n%s", w.BucketDrained, FreshProbe+time.Second, prov)
	}
}
