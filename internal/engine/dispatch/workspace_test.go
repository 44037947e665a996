package dispatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// keyedDispatcher loads the keys-file lines (of organization org-1, but
// for the labels orgs names) into a dispatcher that is never served.
func keyedDispatcher(t *testing.T, lines string, orgs map[string]string) (*keys.Pool, *Dispatcher) {
	t.Helper()
	kf := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(kf, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := keys.Load(keys.LoadOptions{KeysFile: kf, NoDotEnv: true, Env: keys.EnvMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range pool.Keys() {
		org := "org-1"
		if o, ok := orgs[k.Label()]; ok {
			org = o
		}
		k.SetOrg(org)
	}
	d, err := New(Config{Client: client.New(client.Config{BaseURL: "http://127.0.0.1:1"}), Keys: pool.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	return pool, d
}

// TestWorkspaceSplitOnANamed429: a 429 whose message names a workspace's
// limit splits the organization's keys by workspace, each with lanes of
// its own for every pool in use; a second sign changes nothing; a key of
// the same workspace that joins later goes to its workspace's lanes.
func TestWorkspaceSplitOnANamed429(t *testing.T) {
	pool, d := keyedDispatcher(t, "a=sk-ant-api03-aaaaaaaaaaaaaaaa workspace=wrkspc_a\nb=sk-ant-api03-bbbbbbbbbbbbbbbb\nc=sk-ant-api03-cccccccccccccccc workspace=wrkspc_c\n", nil)
	now := time.Now()
	d.ensureLanes(api.PoolSonnet4, now)
	d.ensureLanes(api.PoolHaiku45, now)
	o := d.orgs["org-1"]
	ka, _ := pool.ByLabel("a")
	a := &attempt{ls: d.byPool[api.PoolSonnet4][0], key: ka, out: client.Outcome{Class: client.RateLimited, Status: 429,
		Named: api.ParseNamedLimit("This request would exceed your workspace's rate limit of 600 requests per minute (workspace: wrkspc_a)")}}
	d.noteWorkspace(a, now)

	if len(d.orgs) != 3 || len(o.keys) != 1 || o.keys[0].Label() != "b" || o.ws != "" {
		t.Fatalf("after the split: %d states, the org keeps %v (workspace %q)", len(d.orgs), o.keys, o.ws)
	}
	for _, ws := range []string{"wrkspc_a", "wrkspc_c"} {
		w := d.orgs["org-1/"+ws]
		if w == nil || w.ws != ws || len(w.keys) != 1 || w.keys[0].Workspace() != ws || w.budgetID() != "org-1/"+ws {
			t.Fatalf("%s: %+v", ws, w)
		}
	}
	if n := len(d.byPool[api.PoolSonnet4]); n != 3 || len(d.byPool[api.PoolHaiku45]) != 3 {
		t.Errorf("lanes: %d Sonnet, %d Haiku; want one per workspace each", n, len(d.byPool[api.PoolHaiku45]))
	}
	d.noteWorkspace(a, now)
	if len(d.orgs) != 3 {
		t.Errorf("a second sign split again: %d states", len(d.orgs))
	}
	// One workspace's reading of a pool's limits is no sign (two that
	// differ are: TestWorkspaceLanes in package job).
	o.split = nil
	h := func(rpm int64) api.RateLimitHeaders {
		return api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: rpm, Remaining: 1}}
	}
	kb, _ := pool.ByLabel("b")
	b := &attempt{ls: a.ls, key: kb, out: client.Outcome{Class: client.OK, Status: 200, Limits: h(10000)}}
	d.noteWorkspace(b, now)
	if o.split == nil || o.split.done {
		t.Fatalf("one reading split: %+v", o.split)
	}
}
