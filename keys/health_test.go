package keys

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// An auth outage of a few seconds: every attempt in flight is refused, the
// key is held back, its re-probe succeeds, and it was never dead.
func TestBlipMakesSuspectNotDead(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	if v := k.Refused(at(0), at(-time.Second), AllPools, "HTTP 401"); v != Suspected {
		t.Fatalf("first refusal = %v, want Suspected", v)
	}
	// The other 99 attempts in flight at the blip: no new evidence.
	for i := 0; i < 99; i++ {
		if v := k.Refused(at(time.Millisecond), at(-time.Second), AllPools, "HTTP 401"); v != StillSuspect {
			t.Fatalf("in-flight refusal %d = %v, want StillSuspect", i, v)
		}
	}
	if ok, next := k.Usable(at(500*time.Millisecond), api.PoolSonnet4); ok || !next.Equal(at(DefaultHealth.ProbeAfter)) {
		t.Fatalf("Usable during the hold = %v, %v; want false until %v", ok, next, at(DefaultHealth.ProbeAfter))
	}
	if ok, _ := k.Usable(at(DefaultHealth.ProbeAfter), api.PoolSonnet4); !ok {
		t.Fatal("re-probe not admitted once due")
	}
	k.Launched(at(DefaultHealth.ProbeAfter), api.PoolSonnet4)
	if ok, _ := k.Usable(at(DefaultHealth.ProbeAfter+time.Millisecond), api.PoolSonnet4); ok {
		t.Fatal("a second attempt admitted while the re-probe is out")
	}
	if k.Answered(at(-time.Second), api.PoolSonnet4) {
		t.Fatal("an attempt sent before the suspicion ended it")
	}
	if !k.Answered(at(DefaultHealth.ProbeAfter), api.PoolSonnet4) {
		t.Fatal("the re-probe's answer did not end the suspicion")
	}
	if dead, _ := k.Dead(); dead || k.Suspect(api.PoolSonnet4) {
		t.Fatal("key dead or still suspect after a good answer")
	}
	if ok, _ := k.Usable(at(DefaultHealth.ProbeAfter+time.Millisecond), api.PoolSonnet4); !ok {
		t.Fatal("recovered key not usable")
	}
}

// A revoked key: re-probes keep failing; it dies once the refusals have
// lasted DefaultHealth.DeadAfter with DefaultHealth.DeadStrikes of them, not before.
func TestLastingRefusalKills(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	now := at(0)
	k.Refused(now, now, AllPools, "HTTP 401")
	probes := 0
	for {
		ok, next := k.Usable(now, AllPools)
		if !ok {
			if next.IsZero() {
				break // dead
			}
			now = next
			continue
		}
		k.Launched(now, AllPools)
		probes++
		v := k.Refused(now.Add(100*time.Millisecond), now, AllPools, "HTTP 401 "+secretHigh)
		now = now.Add(100 * time.Millisecond)
		if v == Killed {
			break
		}
		if dead, _ := k.Dead(); dead {
			t.Fatal("dead without Killed")
		}
		if probes > 100 {
			t.Fatal("never dies")
		}
	}
	dead, why := k.Dead()
	if !dead {
		t.Fatal("not dead after lasting refusals")
	}
	if now.Sub(t0) < DefaultHealth.DeadAfter {
		t.Errorf("dead after %v, before DefaultHealth.DeadAfter %v", now.Sub(t0), DefaultHealth.DeadAfter)
	}
	if now.Sub(t0) > DefaultHealth.DeadAfter+DefaultHealth.MaxProbeGap+time.Second {
		t.Errorf("dead only after %v", now.Sub(t0))
	}
	if probes+1 < DefaultHealth.DeadStrikes {
		t.Errorf("%d probes, want at least %d strikes", probes, DefaultHealth.DeadStrikes)
	}
	if strings.Contains(why, secretHigh) {
		t.Errorf("reason leaks the key: %q", why)
	}
	if v := k.Refused(now, now, AllPools, "again"); v != AlreadyDead {
		t.Errorf("refusal of a dead key = %v", v)
	}
	if ok, next := k.Usable(now.Add(time.Hour), api.PoolOpus4); ok || !next.IsZero() {
		t.Error("dead key usable or due")
	}
}

// Many refusals within DefaultHealth.DeadAfter never kill: only time does.
func TestStrikesAloneDoNotKill(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	k.Refused(at(0), at(0), AllPools, "401")
	for i := 1; i < 1000; i++ {
		d := time.Duration(i) * 50 * time.Millisecond
		if d >= DefaultHealth.DeadAfter {
			break
		}
		if v := k.Refused(at(d), at(d), AllPools, "401"); v != StillSuspect {
			t.Fatalf("refusal at %v = %v", d, v)
		}
	}
}

// A 403 for one model pool holds back (and finally kills) the key for that
// pool only.
func TestPoolRefusalIsPerPool(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	k.Refused(at(0), at(0), api.PoolOpus4, "HTTP 403")
	if ok, _ := k.Usable(at(0), api.PoolOpus4); ok {
		t.Fatal("refused pool usable")
	}
	if ok, _ := k.Usable(at(0), api.PoolSonnet4); !ok {
		t.Fatal("another pool held back by a 403")
	}
	// A good answer on another pool says nothing about opus.
	k.Answered(at(0), api.PoolSonnet4)
	if !k.Suspect(api.PoolOpus4) {
		t.Fatal("an answer on sonnet cleared the opus suspicion")
	}
	now := at(0)
	for i := 0; i < 20; i++ {
		now = now.Add(DefaultHealth.MaxProbeGap)
		if k.Refused(now, now, api.PoolOpus4, "HTTP 403") == Killed {
			break
		}
	}
	if dead, _ := k.DeadFor(api.PoolOpus4); !dead {
		t.Fatal("not dead for opus after lasting 403s")
	}
	if dead, _ := k.DeadFor(api.PoolSonnet4); dead {
		t.Fatal("dead for sonnet after opus 403s")
	}
	if dead, _ := k.Dead(); dead {
		t.Fatal("whole key dead after one pool's 403s")
	}
	if ok, _ := k.Usable(now, api.PoolSonnet4); !ok {
		t.Fatal("sonnet unusable")
	}
}

// Gaps between re-probes double up to DefaultHealth.MaxProbeGap.
func TestProbeGapsDouble(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	k.Refused(at(0), at(0), AllPools, "401")
	now, last := at(0), at(0)
	var gaps []time.Duration
	for i := 0; i < 7; i++ {
		_, next := k.Usable(now, AllPools)
		now = next
		gaps = append(gaps, now.Sub(last))
		last = now
		k.Launched(now, AllPools)
		k.Refused(now, now, AllPools, "401")
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second, 15 * time.Second}
	for i := range want {
		if gaps[i] != want[i] {
			t.Fatalf("gaps = %v, want %v", gaps, want)
		}
	}
}

// A pool's rule replaces the default for every key: here the first refusal
// kills (what `--key-dead-after 0` with one strike would be).
func TestSetHealth(t *testing.T) {
	p := loadEnv(t, map[string]string{EnvAPIKey: secretHigh, EnvBatch: secretBatch})
	p.SetHealth(Health{DeadAfter: 0, DeadStrikes: 1})
	a, b := p.Keys()[0], p.Keys()[1]
	if v := a.Refused(at(0), at(0), AllPools, "401"); v != Killed {
		t.Fatalf("first refusal under a one-strike rule = %v, want Killed", v)
	}
	if h := b.Health(); h.DeadStrikes != 1 || h.DeadAfter != 0 || h.ProbeAfter != DefaultHealth.ProbeAfter {
		t.Errorf("the other key's rule = %+v", h)
	}
	// Zero DeadAfter with the default strikes: three refusals, however fast.
	p.SetHealth(Health{})
	b.Refused(at(0), at(0), AllPools, "401")
	b.Refused(at(1), at(1), AllPools, "401")
	if v := b.Refused(at(2), at(2), AllPools, "401"); v != Killed {
		t.Errorf("third refusal under DeadAfter 0 = %v, want Killed", v)
	}
}

// TestRotation: Diff finds new and gone keys by value; a kept key keeps its
// handle; the rotated pool redacts the removed keys' values as well as the
// new ones; a retired key takes no attempt and is not dead.
func TestRotation(t *testing.T) {
	old := loadEnv(t, map[string]string{EnvAPIKey: secretHigh, EnvBatch: secretBatch})
	next := loadEnv(t, map[string]string{EnvAPIKey: secretHigh, EnvLowPrio: secretLow})
	added, removed := old.Diff(next)
	if len(added) != 1 || added[0].Label() != "low_prio" || len(removed) != 1 || removed[0].Label() != "batch" {
		t.Fatalf("added %v removed %v", added, removed)
	}
	rot := old.Rotated(added, removed)
	if ks := rot.Keys(); len(ks) != 2 || ks[0] != old.Keys()[0] || ks[1] != added[0] {
		t.Fatalf("rotated keys %v: want the kept handle, then the new key", ks)
	}
	for _, s := range []string{secretHigh, secretBatch, secretLow} {
		assertNoSecret(t, "rotated Redact", rot.Redact("x "+s+" y"))
	}
	k := removed[0]
	if !k.Retire() || k.Retire() {
		t.Fatal("Retire must be true once")
	}
	if ok, next := k.Usable(at(0), AllPools); ok || !next.IsZero() {
		t.Error("a retired key is usable")
	}
	if dead, _ := k.Dead(); dead || !k.Retired() {
		t.Error("a retired key is dead, or not retired")
	}
	if a, r := rot.Diff(rot); len(a)+len(r) != 0 {
		t.Errorf("Diff of a pool with itself: %v %v", a, r)
	}
}
