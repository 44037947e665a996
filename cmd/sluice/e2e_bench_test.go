package main

import (
	"fmt"
	"regexp"
	"testing"
)

// TestBenchCapacityRuns: `bench capacity` drives every request once
// through the engine against each upstream it offers, in a child process,
// and reports the engine's and the upstream's cost per request.
func TestBenchCapacityRuns(t *testing.T) {
	const n = 3000
	for _, upstream := range []string{"zero", "sim"} {
		t.Run(upstream, func(t *testing.T) {
			e := newE2E(t)
			p := e.runOK("bench", "capacity", "--n", fmt.Sprint(n), "--upstream", upstream)
			out := p.stdout.String()
			for _, re := range []string{
				fmt.Sprintf(`%d requests in .*req/s steady`, n),
				fmt.Sprintf(`: %d admitted, 0 × 429 .*, 0 extra answers`, n),
				`engine per request: \d+ allocations, .* KiB allocated; CPU \d+ µs \(the .*'s: \d+ µs\)`,
			} {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("bench capacity --upstream %s output does not match %s:\n%s", upstream, re, out)
				}
			}
		})
	}
	e := newE2E(t)
	if p := e.start("bench", "capacity", "--upstream", "nowhere"); p.wait() == 0 {
		t.Errorf("bench capacity --upstream nowhere succeeded")
	}
}
