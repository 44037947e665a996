package keys

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// orgOf makes keys a, b of organization "org-1" and c of "org-2".
func orgOf(t *testing.T) (a, b, c *Key) {
	t.Helper()
	a, b, c = newKey("a", "test", secretHigh), newKey("b", "test", secretBatch), newKey("c", "test", secretLow)
	a.SetOrg("org-1")
	b.SetOrg("org-1")
	c.SetOrg("org-2")
	return a, b, c
}

// TestApplyRefusalScopes: one rule per scope. A 401 or 403 is evidence
// for the key's health rule (the key, or the key for one pool); a
// workspace's spend limit kills the key at once and leaves its
// organization's other keys (they may be in other workspaces); the
// organization's billing, spend cap or credit kills every key of the
// organization at once, and only of that organization.
func TestApplyRefusalScopes(t *testing.T) {
	sent, now := at(-time.Second), at(0)
	t.Run("key", func(t *testing.T) {
		a, b, c := orgOf(t)
		v, killed := ApplyRefusal(a, []*Key{a, b, c}, Refusal{Scope: RefusedKey, Pool: api.PoolSonnet4, Sent: sent, At: now, Reason: "HTTP 401"})
		if v != Suspected || len(killed) != 0 || !a.Suspect(AllPools) || b.Suspect(AllPools) {
			t.Fatalf("a 401: %v, killed %v; want a suspect as a whole, b untouched", v, killed)
		}
	})
	t.Run("key and pool", func(t *testing.T) {
		a, b, _ := orgOf(t)
		v, _ := ApplyRefusal(a, []*Key{a, b}, Refusal{Scope: RefusedKeyPool, Pool: api.PoolSonnet4, Sent: sent, At: now, Reason: "HTTP 403"})
		if v != Suspected || !a.Suspect(api.PoolSonnet4) || a.Suspect(api.PoolHaiku45) {
			t.Fatalf("a 403 for one pool: %v; want a suspect for that pool only", v)
		}
		// Not per model (the batch endpoints): the key as a whole.
		v, _ = ApplyRefusal(b, []*Key{a, b}, Refusal{Scope: RefusedKeyPool, Pool: AllPools, Sent: sent, At: now, Reason: "HTTP 403"})
		if v != Suspected || !b.Suspect(api.PoolHaiku45) {
			t.Fatalf("a 403 on an endpoint of no pool: %v; want b suspect as a whole", v)
		}
	})
	t.Run("workspace", func(t *testing.T) {
		a, b, c := orgOf(t)
		v, killed := ApplyRefusal(a, []*Key{a, b, c}, Refusal{Scope: RefusedWorkspace, At: now, Reason: "HTTP 400: workspace limit"})
		if dead, _ := a.Dead(); v != Killed || !dead || !slices.Equal(killed, []*Key{a}) {
			t.Fatalf("workspace limit: %v, killed %v, a dead %v", v, killed, dead)
		}
		if dead, _ := b.Dead(); dead {
			t.Fatal("a workspace's limit killed another key of the organization")
		}
	})
	t.Run("organization", func(t *testing.T) {
		a, b, c := orgOf(t)
		v, killed := ApplyRefusal(a, []*Key{a, b, c}, Refusal{Scope: RefusedOrg, At: now, Reason: "HTTP 402"})
		if v != Killed || !slices.Equal(killed, []*Key{a, b}) {
			t.Fatalf("org refusal: %v, killed %v; want a and b", v, killed)
		}
		for _, k := range []*Key{a, b} {
			if dead, why := k.Dead(); !dead || why != "HTTP 402" {
				t.Errorf("%s: dead %v (%q)", k.Label(), dead, why)
			}
		}
		if dead, _ := c.Dead(); dead {
			t.Fatal("another organization's key died")
		}
		// Once: the keys already dead are not killed again.
		if v, killed := ApplyRefusal(b, []*Key{a, b, c}, Refusal{Scope: RefusedOrg, At: now, Reason: "HTTP 402"}); v != AlreadyDead || len(killed) != 0 {
			t.Fatalf("second org refusal: %v, killed %v", v, killed)
		}
	})
	t.Run("lasting 401 kills the key only", func(t *testing.T) {
		a, b, _ := orgOf(t)
		h := a.Health()
		var v Verdict
		var killed []*Key
		for i := 0; v != Killed; i++ {
			when := at(time.Duration(i) * h.DeadAfter / time.Duration(h.DeadStrikes-1))
			v, killed = ApplyRefusal(a, []*Key{a, b}, Refusal{Scope: RefusedKey, Sent: when, At: when, Reason: "HTTP 401"})
			if i > 10 {
				t.Fatal("never killed")
			}
		}
		if !slices.Equal(killed, []*Key{a}) {
			t.Fatalf("killed %v, want a", killed)
		}
		if dead, _ := b.Dead(); dead {
			t.Fatal("a 401 killed another key")
		}
	})
	t.Run("no scope", func(t *testing.T) {
		a, b, _ := orgOf(t)
		if v, killed := ApplyRefusal(a, []*Key{a, b}, Refusal{At: now}); v != 0 || killed != nil || a.Suspect(AllPools) {
			t.Fatalf("zero scope: %v, %v", v, killed)
		}
	})
}
