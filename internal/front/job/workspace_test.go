package job_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// TestWorkspaceLanes: two keys of one organization, one sending workspace
// wrkspc_research (its keys-file line names it), whose own Sonnet limit is
// far below the organization's. The keys share the organization's lanes
// until the answers show the workspace's limit; then each workspace has a
// lane of its own, the report names it, and every row is done.
func TestWorkspaceLanes(t *testing.T) {
	const ws = "wrkspc_research"
	e := newEnv(t, 0, func(c *sim.Config) {
		p, err := sim.Preset("scale")
		if err != nil {
			t.Fatal(err)
		}
		p.TimeScale = 30
		o := &p.Orgs[0]
		o.Keys = append(o.Keys, sim.KeyConfig{Label: "team", Key: "sk-ant-fake-sim-team-personal-0002"})
		o.Workspaces = []sim.WorkspaceConfig{{ID: ws, Limits: map[api.Pool]sim.Limits{api.PoolSonnet4: {RPM: 600, ITPM: 1_000_000, OTPM: 200_000}}}}
		*c = p
	})
	kf := filepath.Join(e.dir, "keys")
	if err := os.WriteFile(kf, []byte("solo=sk-ant-fake-sim-scale-0001\nteam=sk-ant-fake-sim-team-personal-0002 workspace="+ws+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := keys.Load(keys.LoadOptions{KeysFile: kf, NoDotEnv: true, Env: keys.EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	var ps []map[string]any
	for i := range 1500 {
		ps = append(ps, map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("item %d", i)}}})
	}
	writeLines(t, e.in, ps)
	o := e.options()
	o.Dispatch.Keys = pool.Keys()
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 1500 {
		t.Fatalf("succeeded %d of 1500", rep.Succeeded)
	}
	var wsLane, orgLane bool
	for _, l := range rep.Lanes {
		switch {
		case l.Workspace == ws && l.OK > 0:
			wsLane = true
		case l.Workspace != ws && l.OK > 0:
			orgLane = true
		}
	}
	if !wsLane || !orgLane {
		t.Errorf("lanes %+v: want the organization's and the workspace's, both used", rep.Lanes)
	}
	seen := e.sim.Stats().Orgs["scale"].Counters.Workspaces
	if seen[ws] == 0 || seen[""] == 0 {
		t.Errorf("the simulator saw workspaces %v: the team key must send %s, the other none", seen, ws)
	}
	var named bool
	for _, k := range rep.Keys {
		if k.Label == "team" && k.Workspace == ws {
			named = true
		}
	}
	if !named {
		t.Errorf("keys %+v: the report does not name the team key's workspace", rep.Keys)
	}
}

// TestWorkspaceScopedKeyLanes: two keys of one organization, neither
// naming a workspace in the keys file; one is scoped (in the simulator)
// to a workspace whose own Sonnet limit is 10 RPM. The answers' workspace
// header shows each key's workspace, so the organization's lanes split
// by workspace once the two read different limits: the scoped key gets a
// lane of its own and the other key is not paced at the workspace's
// limit. Neither key sends anthropic-workspace-id.
func TestWorkspaceScopedKeyLanes(t *testing.T) {
	const ws = "wrkspc_small"
	e := newEnv(t, 0, func(c *sim.Config) {
		p, err := sim.Preset("scale")
		if err != nil {
			t.Fatal(err)
		}
		p.TimeScale = 30
		o := &p.Orgs[0]
		o.Keys = append(o.Keys, sim.KeyConfig{Label: "small", Key: "sk-ant-fake-sim-small-scoped-0002", Workspace: ws})
		o.Workspaces = []sim.WorkspaceConfig{{ID: ws, Limits: map[api.Pool]sim.Limits{api.PoolSonnet4: {RPM: 10, ITPM: 1_000_000, OTPM: 200_000}}}}
		*c = p
	})
	kf := filepath.Join(e.dir, "keys")
	if err := os.WriteFile(kf, []byte("solo=sk-ant-fake-sim-scale-0001\nsmall=sk-ant-fake-sim-small-scoped-0002\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := keys.Load(keys.LoadOptions{KeysFile: kf, NoDotEnv: true, Env: keys.EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	var ps []map[string]any
	for i := range n {
		ps = append(ps, map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("item %d", i)}}})
	}
	writeLines(t, e.in, ps)
	o := e.options()
	o.Dispatch.Keys = pool.Keys()
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != n {
		t.Fatalf("succeeded %d of %d", rep.Succeeded, n)
	}
	var wsOK, otherOK int64
	for _, l := range rep.Lanes {
		if l.Workspace == ws {
			wsOK += l.OK
		} else {
			otherOK += l.OK
		}
	}
	if wsOK == 0 || otherOK <= wsOK {
		t.Errorf("lanes %+v: want the scoped key's workspace in a lane of its own (%d done) and the organization's doing most (%d)", rep.Lanes, wsOK, otherOK)
	}
	var named bool
	for _, k := range rep.Keys {
		if k.Label == "small" && k.Workspace == ws {
			named = true
		}
	}
	if !named {
		t.Errorf("keys %+v: the report does not name the scoped key's workspace", rep.Keys)
	}
	if seen := e.sim.Stats().Orgs["scale"].Counters.Workspaces; seen[ws] != 0 {
		t.Errorf("the simulator saw workspaces %v: neither key names one, so neither sends it", seen)
	}
}

// TestMistypedWorkspaceStopsTheRun: a key whose keys-file workspace is
// not one of its organization's stops the run at the key probe, before a
// request is paid for, with an error naming the key's label and the
// workspace and never its value.
func TestMistypedWorkspaceStopsTheRun(t *testing.T) {
	e := newEnv(t, 20, nil)
	o := e.options()
	kf := filepath.Join(e.dir, "keys")
	line := "team=" + sim.FakeKeyHighPrio + " workspace=wrkspc_reserch\n"
	if err := os.WriteFile(kf, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := keys.Load(keys.LoadOptions{KeysFile: kf, NoDotEnv: true, Env: keys.EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	o.Dispatch.Keys = append(pool.Keys(), o.Dispatch.Keys...)
	_, err = e.run(o)
	if !errors.Is(err, dispatch.ErrWorkspaceRefused) || !strings.Contains(err.Error(), "team(…") || !strings.Contains(err.Error(), "wrkspc_reserch") ||
		strings.Contains(err.Error(), sim.FakeKeyHighPrio) {
		t.Fatalf("run: %v; want ErrWorkspaceRefused naming team and wrkspc_reserch, without the key", err)
	}
	if n := e.sim.Stats().Bodies.DistinctAnswered; n != 0 {
		t.Errorf("%d requests answered before the run stopped", n)
	}
}

// TestSummaryShowsDeadLanesAndKeys: a lane that died before its first
// attempt and a dead key are in the summary, the key by label, last four
// and workspace.
func TestSummaryShowsDeadLanesAndKeys(t *testing.T) {
	r := &job.Report{Lanes: []job.LaneReport{{Org: "org-a", Pool: "sonnet-4", Dead: true}, {Org: "org-b", Pool: "haiku-4-5"}},
		Keys: []job.KeyReport{{Label: "team", Last4: "0001", Workspace: "wrkspc_x", Dead: true, Reason: "probe: HTTP 403: workspace not found"}}}
	var b strings.Builder
	r.Summary(&b)
	s := b.String()
	if !strings.Contains(s, "org-a") || !strings.Contains(s, "(dead)") || strings.Contains(s, "org-b") {
		t.Errorf("summary lanes:\n%s\nwant the dead lane, not the unused live one", s)
	}
	if !strings.Contains(s, "key team (…0001) workspace wrkspc_x not used: probe: HTTP 403: workspace not found") {
		t.Errorf("summary keys:\n%s", s)
	}
}
