package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/front/workload"
)

// TestRunProbesOnceThenObserves: `sluice run --route auto` on organizations
// it has never seen probes each once (max_tokens 1) and plans with the
// limits the probes read; the run's end records what its lanes saw; the
// next run plans from those observations — limits from the headers,
// latency and answer length measured — and sends no probe.
func TestRunProbesOnceThenObserves(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	e := newE2E(t)
	e.probe = true
	obs := e.path("observations.json")
	e.env = append(e.env, "SLUICE_OBSERVATIONS="+obs)
	admitted := func() (n int64) {
		for _, o := range e.sim.Stats().Orgs {
			for _, p := range o.Pools {
				n += p.Admitted
			}
		}
		return n
	}
	for i, seed := range []uint64{1, 2} {
		in, out := fmt.Sprintf("in%d.jsonl", i), fmt.Sprintf("out%d.jsonl", i)
		if err := (workload.Judge{N: 300, Seed: seed}).WriteFile(e.path(in)); err != nil {
			t.Fatal(err)
		}
		before := admitted()
		p := e.runOK("run", in, "-o", out)
		stderr := p.stderr.String()
		sent := admitted() - before
		switch i {
		case 0:
			if sent != 303 || strings.Count(stderr, "(probe, just now)") != 3 || !strings.Contains(stderr, "3 probe(s) answered of 3 sent") {
				t.Errorf("first run: %d calls admitted, want 300 + one probe per org; stderr:\n%s", sent, stderr)
			}
		case 1:
			if sent != 300 || strings.Contains(stderr, "probe(s) answered") || strings.Count(stderr, "(headers, ") != 3 ||
				!strings.Contains(stderr, "latency: recent mean") || !strings.Contains(stderr, "answer length at max_tokens 256: mean") {
				t.Errorf("second run: %d calls admitted, want 300 and a plan from the first run's observations; stderr:\n%s", sent, stderr)
			}
		}
	}
	f, err := observe.Load(obs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Orgs) != 3 {
		t.Fatalf("observations of %d orgs, want 3", len(f.Orgs))
	}
	for id, o := range f.Orgs {
		p := o.Pools[api.PoolSonnet4]
		if p == nil || p.Limits == nil || p.Limits.Source != observe.SourceHeaders || p.Limits.RPM <= 0 || p.Latency == nil || p.Latency.N == 0 {
			t.Errorf("org %s (%s): %+v, want limits from the headers and a measured latency", id, o.Label, p)
		}
	}
}
