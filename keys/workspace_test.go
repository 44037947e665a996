package keys

import (
	"net/http"
	"strings"
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

// TestOneValueTwoWorkspaces: a key that spans workspaces may be listed once
// per workspace; each line is a key of its own, sending its workspace. The
// same value and workspace twice is still one key, with a warning; a
// rotation that drops one workspace's line removes only that key.
func TestOneValueTwoWorkspaces(t *testing.T) {
	dir := t.TempDir()
	const v = "sk-ant-api03-personal-key-0001"
	path := writeFile(t, dir, "keys", "a="+v+" workspace=wrkspc_A\nb="+v+" workspace=wrkspc_B\nc="+v+" workspace=wrkspc_A\n", 0o600)
	p, err := Load(LoadOptions{KeysFile: path, NoDotEnv: true, Env: EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Keys()) != 2 {
		t.Fatalf("%d keys, want a and b: %v", len(p.Keys()), p.Keys())
	}
	b, ok := p.ByLabel("b")
	if !ok || b.Workspace() != "wrkspc_B" {
		t.Fatalf("b: %v %q", ok, b.Workspace())
	}
	if w := p.Warnings(); len(w) != 1 || !strings.Contains(w[0], "key c") || strings.Contains(w[0], v) {
		t.Errorf("warnings %q: want one about c, without the value", w)
	}
	path2 := writeFile(t, dir, "keys2", "a="+v+" workspace=wrkspc_A\n", 0o600)
	next, err := Load(LoadOptions{KeysFile: path2, NoDotEnv: true, Env: EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	added, removed := p.Diff(next)
	if len(added) != 0 || len(removed) != 1 || removed[0].Label() != "b" {
		t.Errorf("diff: added %v, removed %v; want b removed only", added, removed)
	}
}

// TestRepeatedWorkspaceAttribute: two workspace= on one line is an error
// naming the line, never the key.
func TestRepeatedWorkspaceAttribute(t *testing.T) {
	dir := t.TempDir()
	const v = "sk-ant-api03-personal-key-0001"
	path := writeFile(t, dir, "keys", "# keys\na="+v+" workspace=wrkspc_A workspace=wrkspc_B\n", 0o600)
	_, err := Load(LoadOptions{KeysFile: path, NoDotEnv: true, Env: EnvMap(nil)})
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "workspace= is given twice") || strings.Contains(err.Error(), v) {
		t.Fatalf("err %v: want line 2, workspace given twice, no key value", err)
	}
}
