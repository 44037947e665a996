package batch

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// secondBatchKey is a second key of the simulator's batch organization.
const secondBatchKey = "sk-ant-fake-sim-batch-0042"

// TestOrgRefusalKillsEveryKey: a create refused for the organization (402
// billing_error) kills every key of the organization at once, as on the
// sync path (keys.ApplyRefusal): its batch path ends after one create and
// its requests are re-routed, instead of the next key of the same
// organization being refused in turn.
func TestOrgRefusalKillsEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) {
			for i := range c.Orgs {
				if c.Orgs[i].Name == "batch" {
					c.Orgs[i].Keys = append(c.Orgs[i].Keys, sim.KeyConfig{Label: "batch2", Key: secondBatchKey})
				}
			}
		}, "batch")
		pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKeys: "batch2=" + secondBatchKey})})
		if err != nil {
			t.Fatal(err)
		}
		second := pool.Keys()[0]
		if _, err := dispatch.Discover(t.Context(), w.client, []*keys.Key{second}, "claude-haiku-4-5"); err != nil {
			t.Fatal(err)
		}
		first := w.key(t, "batch")
		if second.Org() != first.Org() {
			t.Fatalf("the second key's org %q is not the first's %q", second.Org(), first.Org())
		}
		w.tap.createStatus = 402
		cfg := w.config()
		cfg.Keys = []*keys.Key{first, second}
		reqs := requests(10)
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []*keys.Key{first, second} {
			if dead, _ := k.Dead(); !dead {
				t.Errorf("key %s alive after its organization was refused", k.Label())
			}
		}
		if n := w.tap.createCount(); n != 1 {
			t.Errorf("%d creates: the organization's other key was tried after the organization was refused", n)
		}
		if len(col.reroutes) != len(reqs) || len(col.results) != 0 {
			t.Errorf("%d re-routed, %d results; want all re-routed", len(col.reroutes), len(col.results))
		}
	})
}

// TestCreateRetryAfterCapped: a create refused with a retry-after of a
// day pauses its org only up to Config.MaxRetryAfter (the sync
// dispatcher's rule, api.CapRetryAfter), logged once.
func TestCreateRetryAfterCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.tap.firstCreateRetryAfter = "86400"
		var logs logBuffer
		cfg := w.config()
		cfg.MaxRetryAfter, cfg.Logger = 2*time.Minute, logs.logger()
		reqs := requests(10)
		col, _, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		cs := w.tap.creates
		if len(cs) != 2 || cs[0].status != 429 {
			t.Fatalf("creates %+v; want a 429, then the create", cs)
		}
		if gap := cs[1].at.Sub(cs[0].at); gap < cfg.MaxRetryAfter || gap > cfg.MaxRetryAfter+time.Second {
			t.Errorf("created again %v after the 429; want the cap, %v", gap, cfg.MaxRetryAfter)
		}
		if n := strings.Count(logs.String(), "retry-after longer than the cap"); n != 1 {
			t.Errorf("the cap was logged %d times:\n%s", n, logs.String())
		}
	})
}
