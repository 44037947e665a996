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
	"github.com/sluice-dev/sluice/internal/workload"
	"github.com/sluice-dev/sluice/sim"
)

// TestKeyRotationMidRun: a run on two keys of two orgs, from a keys file.
// Mid-run the file is rewritten — one key removed, a key of a third org
// added — and later a SIGHUP re-reads it unchanged. The run goes on without
// a restart: the new key is probed and serves requests, the removed key
// takes none after it left (its requests in flight finish), nothing is
// lost or written twice.
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
	e := newE2EWith(t, func(c *sim.Config) {
		c.BucketWindow = sim.Duration(time.Second)
		for i := range c.Orgs {
			l := c.Orgs[i].Limits[api.PoolSonnet4]
			l.RPM = 750
			c.Orgs[i].Limits[api.PoolSonnet4] = l
		}
	})
	e.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + e.url}
	keysFile := e.path("keys.txt")
	writeKeys := func(lines ...string) {
		tmp := keysFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, keysFile); err != nil { // as an editor saves
			t.Fatal(err)
		}
	}
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
	writeKeys("high_prio="+sim.FakeKeyHighPrio, "low_prio="+sim.FakeKeyLowPrio)

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
