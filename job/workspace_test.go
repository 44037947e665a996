package job_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/api"
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
		case l.Workspace == "" && l.OK > 0:
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
