package keys

import (
	"net/http"
	"testing"
)

// TestWorkspace: a keys-file line's workspace goes out as
// anthropic-workspace-id wherever the key applies itself, and only there.
func TestWorkspace(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "keys", "team=sk-ant-api03-personal-key-0001 workspace=wrkspc_01Team\nsolo=sk-ant-api03-workspace-key-0002\n", 0o600)
	p, err := Load(LoadOptions{KeysFile: path, NoDotEnv: true, Env: EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	team, _ := p.ByLabel("team")
	solo, _ := p.ByLabel("solo")
	if team.Workspace() != "wrkspc_01Team" || solo.Workspace() != "" {
		t.Fatalf("workspaces %q %q", team.Workspace(), solo.Workspace())
	}
	for _, style := range []AuthStyle{AuthXAPIKey, AuthBearer} {
		h := http.Header{"Anthropic-Workspace-Id": {"wrkspc_from_a_caller"}}
		team.Apply(h, style)
		if got := h.Values("anthropic-workspace-id"); len(got) != 1 || got[0] != "wrkspc_01Team" || len(h) != 2 {
			t.Errorf("%v: headers %v", style, h)
		}
		h = http.Header{}
		solo.Apply(h, style)
		if len(h) != 1 || h.Get("anthropic-workspace-id") != "" {
			t.Errorf("%v: a key without a workspace set %v", style, h)
		}
	}
	if s := team.String(); s != "team(…0001)" {
		t.Errorf("redacted form %q", s)
	}
}
