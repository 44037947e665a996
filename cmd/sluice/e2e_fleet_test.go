package main

// End-to-end test of fleet mode: three `sluice run` processes share one
// simulator through one private redis-server; together they must keep each
// organization's concurrency cap, and each must write every result of its
// own job exactly once.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/fleet"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/redisproc"
)

func TestFleetThreeProcessesKeepTheCap(t *testing.T) {
	const (
		jobs = 3
		n    = 1500 // per job
		capS = 30   // --cap-sonnet: per organization, for the whole fleet
	)
	rs := redisproc.ForTest(t)
	e := newE2E(t)
	var ps []*proc
	for j := range jobs {
		in := fmt.Sprintf("in%d.jsonl", j)
		if err := (workload.Judge{N: n, Seed: uint64(40 + j)}).WriteFile(e.path(in)); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, e.start("run", in, "-o", fmt.Sprintf("out%d.jsonl", j), "--route", "sync",
			"--fleet", rs.URL(), "--cap-sonnet", fmt.Sprint(capS)))
	}
	for j, p := range ps {
		if code := p.wait(); code != 0 {
			t.Fatalf("job %d: exit status %d\nstderr:\n%s", j, code, p.stderr.String())
		}
		if !strings.Contains(p.stderr.String(), "fleet: joined") {
			t.Errorf("job %d did not log joining the fleet:\n%s", j, p.stderr.String())
		}
	}
	for j := range jobs {
		e.checkExactlyOnce(e.path(fmt.Sprintf("in%d.jsonl", j)), e.path(fmt.Sprintf("out%d.jsonl", j)))
	}
	st := e.sim.Stats()
	if b := st.Bodies; b.DistinctAnswered != jobs*n || b.AnsweredMoreThanOnce != 0 {
		t.Errorf("simulator answered %d distinct requests (%d more than once), want %d and 0", b.DistinctAnswered, b.AnsweredMoreThanOnce, jobs*n)
	}
	for name, o := range st.Orgs {
		ls := o.Pools[api.PoolSonnet4]
		t.Logf("%s: peak concurrency %d (cap %d), %d admitted, %d × 429", name, ls.PeakConcurrency, capS, ls.Admitted, ls.RateLimited)
		// Alone, each process would take the whole cap: 3 × 30 together.
		if ls.PeakConcurrency > capS {
			t.Errorf("%s: peak concurrency %d over the fleet's cap %d", name, ls.PeakConcurrency, capS)
		}
		if ls.PeakConcurrency < capS/2 {
			t.Errorf("%s: peak concurrency %d: the fleet never came near its cap %d", name, ls.PeakConcurrency, capS)
		}
	}

	// Every member left the fleet; the lanes remain, with no permit held.
	var rep fleet.Report
	if err := json.Unmarshal(e.runOK("fleet", "status", "--fleet", rs.URL(), "--json").stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Members) != 0 || len(rep.Lanes) != len(st.Orgs) {
		t.Fatalf("fleet status after the jobs: %d members, %d lanes; want 0 and %d", len(rep.Members), len(rep.Lanes), len(st.Orgs))
	}
	for _, l := range rep.Lanes {
		if l.InUse != 0 || l.Cap != capS || l.Pool != api.PoolSonnet4 || !l.Buckets[0].Known {
			t.Errorf("lane after the jobs: %+v", l)
		}
	}
	text := e.runOK("fleet", "status", "--fleet", rs.URL()).stdout.String()
	if !strings.Contains(text, "0 member(s)") || !strings.Contains(text, "PERMITS") {
		t.Errorf("fleet status:\n%s", text)
	}
}

// TestFleetNotOnKeys: `sluice keys` only probes; with SLUICE_FLEET set
// (naming a Redis that is not there) it still works, and takes no --fleet.
func TestFleetNotOnKeys(t *testing.T) {
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := newE2E(t)
	e.env = append(e.env, fmt.Sprintf("%s=redis://127.0.0.1:%d/0", envFleet, port))
	out := e.runOK("keys").stdout.String()
	if !strings.Contains(out, "organization") {
		t.Errorf("keys:\n%s", out)
	}
	p := e.start("keys", "--fleet", fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	if code := p.wait(); code == 0 || !strings.Contains(p.stderr.String(), "unknown flag: --fleet") {
		t.Errorf("keys --fleet: exit %d\n%s", code, p.stderr.String())
	}
}
