package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit/leakcheck"
	"github.com/sluice-dev/sluice/internal/testkit/testbin"
)

// bin is the sluice-bench binary the tests run.
var bin = &testbin.Binary{Name: "sluice-bench"}

// TestMain removes the binary the tests built, and fails the
// package if its tests leave goroutines running.
func TestMain(m *testing.M) { leakcheck.Main(m, bin.Remove) }

// benchBin returns the path of the sluice-bench binary, building it on first
// use. It skips the test under -short.
func benchBin(t *testing.T) string { return bin.Path(t) }

// run runs `sluice-bench args...` in a fresh directory with a clean
// environment and returns its exit status, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, benchBin(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestBenchCapacityRuns: `sluice-bench capacity` drives every request once
// through the engine against each upstream it offers, in a child process
// (this binary's hidden zeroapi and sim subcommands), and reports the
// engine's and the upstream's cost per request.
func TestBenchCapacityRuns(t *testing.T) {
	const n = 3000
	for _, upstream := range []string{"zero", "sim"} {
		t.Run(upstream, func(t *testing.T) {
			code, out, stderr := run(t, "capacity", "--n", fmt.Sprint(n), "--upstream", upstream)
			if code != 0 {
				t.Fatalf("sluice-bench capacity --upstream %s: exit status %d\nstderr:\n%s", upstream, code, stderr)
			}
			for _, re := range []string{
				fmt.Sprintf(`%d requests in .*req/s steady`, n),
				fmt.Sprintf(`: %d admitted, 0 × 429 .*, 0 extra answers`, n),
				`engine per request: \d+ allocations, .* KiB allocated; CPU \d+ µs \(the .*'s: \d+ µs\)`,
			} {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("sluice-bench capacity --upstream %s output does not match %s:\n%s", upstream, re, out)
				}
			}
		})
	}
	if code, _, stderr := run(t, "capacity", "--upstream", "nowhere"); code == 0 || !strings.Contains(stderr, "--upstream") {
		t.Errorf("sluice-bench capacity --upstream nowhere: exit status %d, stderr %q", code, stderr)
	}
}

// TestSluiceBinaryFlag: --sluice names the binary the benchmarks that run
// sluice measure, and a path that is not there is refused before any
// benchmark starts.
func TestSluiceBinaryFlag(t *testing.T) {
	code, _, stderr := run(t, "--sluice", filepath.Join(t.TempDir(), "absent"), "proxy", "--n", "10")
	if code == 0 || !strings.Contains(stderr, "--sluice") {
		t.Errorf("sluice-bench --sluice ABSENT proxy: exit status %d, stderr %q", code, stderr)
	}
}
