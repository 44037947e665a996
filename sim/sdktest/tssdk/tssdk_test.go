package tssdk_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

const (
	jsDir  = "js"
	jsTest = "sim.test.mjs"
	// model is a Sonnet 4 pool model, the pool the limited world restricts.
	// (claude-sonnet-4-5 would make the SDK print a deprecation warning.)
	model = "claude-sonnet-4-6"
	// refill is how long the limited world's one-request bucket takes to
	// refill in real time, and so the largest retry-after its 429s carry.
	refill = 2 * time.Second
)

// TestTypeScriptSDK runs js/sim.test.mjs with the official TypeScript SDK
// against the simulator.
func TestTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: shells out to node and npm")
	}
	node, npm := requireTools(t)

	base := startSim(t, fastWorld())
	limited := startSim(t, limitedWorld(t))

	ensureNodeModules(t, npm)

	runNodeTest(t, node, jsTest,
		"SIM_BASE_URL="+base,
		"SIM_LIMITED_URL="+limited,
		"SIM_KEY="+sim.FakeKeyHighPrio,
		"SIM_MODEL="+model,
		"SIM_LIMITED_REFILL_SECONDS="+strconv.Itoa(int(refill/time.Second)),
	)
}

// runNodeTest runs `node --test file` in js/ with env added to this
// process's environment, failing the test with node's output if it fails.
func runNodeTest(t *testing.T, node, file string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", file)
	cmd.Dir = jsDir
	cmd.Env = append(append(os.Environ(), env...), "NO_COLOR=1", "FORCE_COLOR=0")
	// node --test runs the file in a child process: if the context kills the
	// parent, do not wait forever for the child's copy of the pipes.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s failed after %v: %v\n%s", file, time.Since(start).Round(time.Millisecond), err, out)
	}
	t.Logf("node --test %s passed in %v:\n%s", file, time.Since(start).Round(time.Millisecond), out)
}

// requireTools finds node and npm, skipping (or failing, under
// SLUICE_REQUIRE_NODE=1) when either is missing or node is too old for
// node:test.
func requireTools(t *testing.T) (node, npm string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("SLUICE_REQUIRE_NODE") == "1" {
			t.Fatalf("SLUICE_REQUIRE_NODE=1 but "+format, args...)
		}
		t.Skipf(format+" (set SLUICE_REQUIRE_NODE=1 to make this a failure)", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH: the TypeScript SDK conformance test needs Node.js >= 20")
	}
	npm, err = exec.LookPath("npm")
	if err != nil {
		missing("npm is not on PATH: the TypeScript SDK conformance test needs it to install js/node_modules")
	}
	v, err := exec.Command(node, "--version").Output()
	if err != nil {
		missing("node --version failed: %v", err)
	}
	ver := strings.TrimSpace(string(v))
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(ver, "v"), ".", 2)[0])
	if major < 20 {
		missing("node %s is too old: the TypeScript SDK conformance test needs Node.js >= 20", ver)
	}
	return node, npm
}

// ensureNodeModules runs `npm ci` in js/ when the SDK is not installed.
func ensureNodeModules(t *testing.T, npm string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(jsDir, "node_modules", "@anthropic-ai", "sdk", "package.json")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = jsDir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("npm ci in %s failed after %v: %v\n%s", jsDir, time.Since(start).Round(time.Millisecond), err, out.Bytes())
	}
	t.Logf("npm ci in %s took %v", jsDir, time.Since(start).Round(time.Millisecond))
}

// startSim serves cfg over loopback TCP for the rest of the test and
// returns its base URL.
func startSim(t *testing.T, cfg sim.Config) string {
	t.Helper()
	srv, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// fastWorld is the three-org preset at TimeScale 1000: answers take
// milliseconds and a 3-request batch ends in about 60 ms.
func fastWorld() sim.Config {
	cfg := sim.Default()
	cfg.TimeScale = 1000
	return cfg
}

// limitedWorld makes the high_prio org's Sonnet 4 lane a one-request bucket
// that refills in refill (2 s) of real time. With RPM 1, TimeScale K =
// 60 s/refill gives K requests per real minute, one per refill; a bucket
// window of refill (a 60 s window would hold the whole minute) makes the
// bucket hold K × refill/60 s = 1 request. So a second call within refill
// gets a 429 with retry-after: 2 (1 if the calls were over a second
// apart). Two seconds rather than one leave a slow machine a margin.
func limitedWorld(t *testing.T) sim.Config {
	cfg := sim.Default()
	cfg.TimeScale = time.Minute.Seconds() / refill.Seconds()
	cfg.BucketWindow = sim.Duration(refill)
	found := false
	for i := range cfg.Orgs {
		for _, k := range cfg.Orgs[i].Keys {
			if k.Key == sim.FakeKeyHighPrio {
				cfg.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: 1}
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the default preset has no org with sim.FakeKeyHighPrio")
	}
	return cfg
}
