package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// TestPlanForYourKeys: with keys and no named world, `sluice plan` plans
// for the keys' organizations. Against a simulator whose three orgs allow
// 1,200 / 900 / 600 Sonnet RPM (the world the issue found the caps-only
// plan 2-3× too optimistic in), the first plan probes each org once
// (max_tokens 1) and predicts the RPM-bound rate; the second reads the
// probes back from the observations file and sends nothing; --no-probe on
// an empty file sends nothing and says the limits are unknown.
func TestPlanForYourKeys(t *testing.T) {
	s, base := simtest.Loopback(t, func(c *sim.Config) {
		for i, rpm := range []int64{1200, 900, 600} {
			l := c.Orgs[i].Limits[api.PoolSonnet4]
			l.RPM = rpm
			c.Orgs[i].Limits[api.PoolSonnet4] = l
		}
	})
	env := map[string]string{"ANTHROPIC_BASE_URL": base}
	for k, v := range fakeKeys {
		env[k] = v
	}
	calls := func() (n int64) {
		for _, o := range s.Stats().Orgs {
			n += o.Pools[api.PoolSonnet4].Admitted + o.Pools[api.PoolSonnet4].RateLimited
		}
		return n
	}
	obs := filepath.Join(t.TempDir(), "observations.json")
	plan := func(extra ...string) (decisionJSON, string) {
		t.Helper()
		args := append([]string{"--n", "29500", "--json", "--no-dotenv", "--observations", obs}, extra...)
		out, stderr, err := executeWith(t, env, planCmd(), args...)
		if err != nil {
			t.Fatalf("plan %v: %v\n%s", args, err, stderr)
		}
		var d decisionJSON
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return d, stderr
	}

	d, stderr := plan()
	if got := calls(); got != 3 {
		t.Errorf("the first plan sent %d Messages calls, want one probe per org (3)\n%s", got, stderr)
	}
	if strings.Count(stderr, "(probe, ") != 3 || !strings.Contains(stderr, "3 probe(s) answered of 3 sent") {
		t.Errorf("the first plan does not say its limits came from 3 probes:\n%s", stderr)
	}
	// 2,700 RPM in all, less the reserve: at most 45 req/s, so 29,500
	// requests take at least 655 s on sync (caps only said 4m54s).
	if d.SyncWall.Mid < 29500/45.0 {
		t.Errorf("sync wall %.0f s predicted, want ≥ %.0f (the RPM-bound rate)\n%s", d.SyncWall.Mid, 29500/45.0, stderr)
	}
	for _, l := range d.Lanes {
		if l.Binding != "RPM" {
			t.Errorf("lane %s bound by %q, want RPM\n%s", l.Org, l.Binding, stderr)
		}
	}

	d2, stderr := plan()
	if got := calls(); got != 3 {
		t.Errorf("the second plan sent %d more Messages calls, want none (the observations know the orgs)", got-3)
	}
	if strings.Contains(stderr, "probe(s) answered") || strings.Count(stderr, "(probe, ") != 3 {
		t.Errorf("the second plan does not read the recorded probes:\n%s", stderr)
	}
	if d2.SyncWall.Mid != d.SyncWall.Mid {
		t.Errorf("the same limits gave %.0f s, then %.0f s", d.SyncWall.Mid, d2.SyncWall.Mid)
	}

	obs = filepath.Join(t.TempDir(), "empty.json")
	_, stderr = plan("--no-probe")
	if got := calls(); got != 3 {
		t.Errorf("--no-probe sent %d Messages calls", got-3)
	}
	if strings.Count(stderr, "limits unknown") != 3 || !strings.Contains(stderr, "no probe sent") {
		t.Errorf("--no-probe does not say the limits are unknown:\n%s", stderr)
	}
}

// TestPlanWithoutKeysSaysSo: with no key and no named world, the plan is
// for the three-org preset, and standard error says why.
func TestPlanWithoutKeysSaysSo(t *testing.T) {
	out, stderr, err := executeWith(t, nil, planCmd(), "--n", "1000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var d decisionJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.World != sim.PresetThreeOrg {
		t.Errorf("world %q (%v), want the %s preset", d.World, err, sim.PresetThreeOrg)
	}
	if !strings.Contains(stderr, "no API key found: planning for the simulator preset three-org") {
		t.Errorf("stderr does not say the plan is for the preset:\n%s", stderr)
	}
}

// TestKeysWorkspace: `sluice keys` shows each key's workspace — the one its
// answers name, a workspace-scoped key's included — and a key whose
// workspace= the API refuses is dead, by label, never by value.
func TestKeysWorkspace(t *testing.T) {
	_, base := simtest.Loopback(t, func(c *sim.Config) {
		c.Orgs[0].Workspaces = []sim.WorkspaceConfig{{ID: "wrkspc_research"}}
		c.Orgs[0].Keys[0].Workspace = "wrkspc_research"
	})
	kf := filepath.Join(t.TempDir(), "keys")
	lines := "scoped=" + sim.FakeKeyHighPrio + "\nspan=" + sim.FakeKeyBatch + " workspace=wrkspc_reserch\n"
	if err := os.WriteFile(kf, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := executeWith(t, map[string]string{"ANTHROPIC_BASE_URL": base}, keysCmd(), "--no-dotenv", "--keys-file", kf, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rows []keyRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]keyRow{}
	for _, r := range rows {
		got[r.Label] = r
	}
	if r := got["scoped"]; r.Workspace != "wrkspc_research" || r.Health != "ok" {
		t.Errorf("scoped: %+v, want its workspace from the answers", r)
	}
	if r := got["span"]; r.Workspace != "wrkspc_reserch" || !strings.HasPrefix(r.Health, "dead: ") || !strings.Contains(r.Health, "workspace") {
		t.Errorf("span: %+v, want dead for its refused workspace", r)
	}
	if strings.Contains(out+stderr, sim.FakeKeyBatch) || strings.Contains(out+stderr, sim.FakeKeyHighPrio) {
		t.Error("a key value was printed")
	}
	text, _, err := executeWith(t, map[string]string{"ANTHROPIC_BASE_URL": base}, keysCmd(), "--no-dotenv", "--keys-file", kf)
	if err != nil || !strings.Contains(text, "workspace") || !strings.Contains(text, "wrkspc_research") {
		t.Errorf("the table lacks the workspace column: %v\n%s", err, text)
	}
}
