package route_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

// TestSplitRule: the batch route takes every id, the sync route none, and a
// split a share of them close to BatchShare — the same ids every time.
func TestSplitRule(t *testing.T) {
	const n = 20000
	for _, share := range []float64{0, 0.1, 0.5, 0.9, 1} {
		r := route.Routing{Route: route.Split, BatchShare: share}
		got := 0
		for i := range n {
			id := fmt.Sprintf("item-%06d", i)
			b := r.ToBatch(id)
			if b != r.ToBatch(id) {
				t.Fatalf("share %g: %s changed sides", share, id)
			}
			if b {
				got++
			}
		}
		if f := float64(got) / n; f < share-0.02 || f > share+0.02 {
			t.Errorf("share %g: %d of %d to batch (%.3f)", share, got, n, f)
		}
	}
	if !(route.Routing{Route: route.Batch}).ToBatch("x") || (route.Routing{Route: route.Sync, BatchShare: 1}).ToBatch("x") {
		t.Fatal("the batch route must take every id and the sync route none")
	}
}

func pool(t *testing.T) []*keys.Key {
	t.Helper()
	p, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKeys: "a1=sk-ant-test-aaaaaaaa1,a2=sk-ant-test-aaaaaaaa2,b1=sk-ant-test-bbbbbbbb1,c1=sk-ant-test-cccccccc1"})})
	if err != nil {
		t.Fatal(err)
	}
	ks := p.Keys()
	for _, k := range ks {
		k.SetOrg("org-" + k.Label()[:1])
	}
	return ks
}

// TestSyncKeys: SyncOrgs names organizations by their first key's label;
// every key of a named org is kept, and with no match all are.
func TestSyncKeys(t *testing.T) {
	ks := pool(t)
	labels := func(ks []*keys.Key) (s string) {
		for _, k := range ks {
			s += k.Label() + " "
		}
		return s
	}
	for _, c := range []struct {
		orgs []string
		want string
	}{
		{nil, "a1 a2 b1 c1 "},
		{[]string{"a1"}, "a1 a2 "},
		{[]string{"a1", "c1"}, "a1 a2 c1 "},
		{[]string{"a2"}, "a1 a2 b1 c1 "}, // a2 is not the label of a first key
	} {
		if got := labels(route.Routing{SyncOrgs: c.orgs}.SyncKeys(ks)); got != c.want {
			t.Errorf("SyncOrgs %v: keys %q, want %q", c.orgs, got, c.want)
		}
	}
}

// TestOpenStartsTheBatchPathOnlyWhenNeeded: no batch path on the sync route
// with no journal; one on the batch route; and an unreadable journal is
// ErrOpenBatches, so the caller sends nothing on sync. (The sync route with
// an open journal is job's TestSyncRunHarvestsAnOpenJournal-style tests:
// it needs batches an earlier run left open.)
func TestOpenStartsTheBatchPathOnlyWhenNeeded(t *testing.T) {
	ks := pool(t)
	cl := client.New(client.Config{BaseURL: "http://127.0.0.1:1"})
	dir := t.TempDir()
	cfg := func(r string, journal string) route.Config {
		return route.Config{Routing: route.Routing{Route: r}, Client: cl, Keys: ks, NoSync: true, Journal: journal,
			Sink: func(dispatch.Result, string) {}, Reroute: func(*dispatch.Request, string) {}}
	}
	f, err := route.Open(cfg(route.Sync, filepath.Join(dir, "none")))
	if err != nil || f.Batch() != nil || f.ToBatch("x") {
		t.Fatalf("sync route, no journal: %v, batch path %v", err, f.Batch() != nil)
	}
	journal := filepath.Join(dir, "j")
	f, err = route.Open(cfg(route.Batch, journal))
	if err != nil || f.Batch() == nil || !f.ToBatch("x") {
		t.Fatalf("batch route: %v", err)
	}
	if err := f.Batch().Close(); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "dir-journal")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := route.Open(cfg(route.Sync, bad)); !errors.Is(err, route.ErrOpenBatches) {
		t.Fatalf("an unreadable journal: %v, want ErrOpenBatches", err)
	}
}
