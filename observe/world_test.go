package observe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/client"
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
// back for ProbeTimeout at most, all organizations at once, not one
// client timeout after another. (The bound is checked against the test's
// own context, which the plan honours.)
func TestProbeIsBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	o := WorldOptions{Off: true, Keys: testKeys(t), Client: client.New(client.Config{BaseURL: srv.URL}), Model: "claude-sonnet-4-5"}
	start := time.Now()
	_, prov, err := ForKeys(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a canceled plan took %v", d)
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
