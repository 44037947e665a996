package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// TestKeyRotationMidRun: a run on two keys of two orgs, from a keys file.
// Mid-run the file is rewritten — one key replaced by another key of its
// org, a key of a third org added — and later a SIGHUP re-reads it
// unchanged. The run goes on without a restart: the new keys are probed
// and serve requests, the replaced key takes none after it left (its
// requests in flight finish), nothing is lost or written twice.
func TestKeyRotationMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	// The world, not the machine, sets how long the run lasts: Sonnet at
	// 750 RPM of simulated time per org (250 req/s real at time scale 20)
	// behind buckets of one second, so 5,000 requests take about 10 s on
	// any machine and longer on a loaded one — time for the key watch
	// (a 2 s poll, then a file that holds still) to see the new file and
	// the new key to be probed and serve. Unthrottled, the run took about
	// 3 s and a loaded CI box finished it before the new key joined.
	const n = 5000
	e, writeKeys := rotationWorld(t)
	keysFile := e.path("keys.txt")
	writeKeys("high_prio="+sim.FakeKeyHighPrio, "batch="+sim.FakeKeyBatch)
	in, out := e.path("in.jsonl"), e.path("out.jsonl")
	if err := (workload.Judge{N: n, Seed: 7}).WriteFile(in); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "in.jsonl", "-o", "out.jsonl", "--keys-file", keysFile, "--report", "report.json")
	e.waitForLines(p, out, 600)
	calls := func(org, label string) int64 { return e.sim.Stats().Orgs[org].Keys[label].Calls }
	if calls("low_prio", "low_prio") != 0 {
		t.Fatal("the key not yet in the file was used")
	}
	// batch's key is replaced by another of its org (a key removed while
	// its org has no other working key would stay: the next test).
	writeKeys("high_prio="+sim.FakeKeyHighPrio, "batch_two="+secondKey["batch"], "low_prio="+sim.FakeKeyLowPrio)

	// The new key joins: probed, then serving.
	deadline := time.Now().Add(30 * time.Second)
	for calls("low_prio", "low_prio") < 50 {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the added key served %d calls (run exited: %v)", calls("low_prio", "low_prio"), p.exited())
		}
		time.Sleep(10 * time.Millisecond)
	}
	removedAtJoin := calls("batch", "batch")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil { // unchanged file: nothing moves
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Fatalf("run: exit status %d\nstderr:\n%s", code, p.stderr.String())
	}
	e.checkExactlyOnce(in, out)
	if after := calls("batch", "batch") - removedAtJoin; after != 0 {
		t.Errorf("the removed key was sent %d requests after it left", after)
	}
	stderr := p.stderr.String()
	for _, want := range []string{"a key file changed", "key left the run", "key joined the run", "SIGHUP"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	perOrg := map[string]int{}
	for _, r := range e.readResults(out) {
		perOrg[r.Sluice.Org]++
	}
	t.Logf("rows per org: %v", perOrg)
	if perOrg["low_prio"] == 0 {
		t.Errorf("no row from the added key's org: %v", perOrg)
	}
	rep := e.readReport(filepath.Join(e.dir, "report.json"))
	labels := fmt.Sprint(rep.Keys)
	if !strings.Contains(labels, "low_prio") {
		t.Errorf("the report's keys lack the added key: %s", labels)
	}
}

// badKey is a key the simulator refuses (revoked): a mistyped key.
const badKey = "sk-ant-fake-sim-high-prio-mistyped-0bad"

// secondKey is a second key of an org in rotationWorld, by org name.
var secondKey = map[string]string{
	"high_prio": "sk-ant-fake-sim-high-prio-second-0002",
	"batch":     "sk-ant-fake-sim-batch-second-0002",
}

// rotationWorld is the world of the rotation tests: the three-org
// simulator where the world, not the machine, sets how long a run lasts
// (Sonnet at 750 RPM of simulated time per org — 250 req/s real at time
// scale 20 — behind buckets of one second), with a second key on
// high_prio and on batch (secondKey) and a revoked one on high_prio
// (badKey); keys come only from a keys file,
// which writeKeys rewrites as an editor saves (a rename).
func rotationWorld(t *testing.T) (e *e2e, writeKeys func(lines ...string)) {
	e = newE2EWith(t, func(c *sim.Config) {
		c.BucketWindow = sim.Duration(time.Second)
		for i := range c.Orgs {
			l := c.Orgs[i].Limits[api.PoolSonnet4]
			l.RPM = 750
			c.Orgs[i].Limits[api.PoolSonnet4] = l
			if k, ok := secondKey[c.Orgs[i].Name]; ok {
				c.Orgs[i].Keys = append(c.Orgs[i].Keys, sim.KeyConfig{Label: c.Orgs[i].Name + "_two", Key: k})
			}
			if c.Orgs[i].Name == "high_prio" {
				c.Orgs[i].Keys = append(c.Orgs[i].Keys, sim.KeyConfig{Label: "high_prio_bad", Key: badKey, Status: "revoked"})
			}
		}
	})
	e.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + e.url}
	keysFile := e.path("keys.txt")
	return e, func(lines ...string) {
		tmp := keysFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, keysFile); err != nil { // as an editor saves
			t.Fatal(err)
		}
	}
}

// TestRotationKeepsAnOrgsOnlyKey: a run on one org's only key, from a
// keys file. Mid-run the key is replaced by a mistyped one: nothing fails,
// the run logs an error naming the kept key, and the old key keeps
// serving; once a good key of the org is written, the old key leaves and
// the new one serves. Every request ends ok, once.
func TestRotationKeepsAnOrgsOnlyKey(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	const n = 4000
	e, writeKeys := rotationWorld(t)
	writeKeys("high_prio=" + sim.FakeKeyHighPrio)
	in, out := e.path("in.jsonl"), e.path("out.jsonl")
	if err := (workload.Judge{N: n, Seed: 8}).WriteFile(in); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "in.jsonl", "-o", "out.jsonl", "--keys-file", e.path("keys.txt"), "--route", "sync")
	e.waitForLines(p, out, 300)
	calls := func(label string) int64 { return e.sim.Stats().Orgs["high_prio"].Keys[label].Calls }
	denied := func(label string) int64 { return e.sim.Stats().Orgs["high_prio"].Keys[label].Denied }

	writeKeys("high_prio=" + badKey)
	// The bad key is probed and refused twice (a probe, then a re-probe:
	// only then is it dead); the old one keeps serving.
	deadline := time.Now().Add(30 * time.Second)
	for denied("high_prio_bad") < 2 {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the mistyped key was never probed (run exited: %v)", p.exited())
		}
		time.Sleep(10 * time.Millisecond)
	}
	atBad := calls("high_prio")
	for calls("high_prio") < atBad+200 {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the kept key served %d calls after the bad rotation (run exited: %v)", calls("high_prio")-atBad, p.exited())
		}
		time.Sleep(10 * time.Millisecond)
	}

	writeKeys("high_prio_two=" + secondKey["high_prio"])
	for calls("high_prio_two") < 50 {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the good key served %d calls (run exited: %v)", calls("high_prio_two"), p.exited())
		}
		time.Sleep(10 * time.Millisecond)
	}
	leftAt := calls("high_prio")
	if code := p.wait(); code != 0 {
		t.Fatalf("run: exit status %d\nstderr:\n%s", code, p.stderr.String())
	}
	e.checkExactlyOnce(in, out)
	// Attempts of the old key in flight when it left may still be counted.
	if after := calls("high_prio") - leftAt; after > 50 {
		t.Errorf("the replaced key was sent %d requests after the good key served", after)
	}
	stderr := p.stderr.String()
	for _, want := range []string{"level=ERROR", "stays in use", "key=high_prio", "key left the run"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
