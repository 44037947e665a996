// Package bench measures sluice against the simulator and writes the
// figures BENCHMARKS.md quotes. Benchmarks are commands, never pass/fail
// tests: timing on a shared machine is noisy.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sluice-dev/sluice/internal/bench/zeroapi"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// SimProcess is a simulator child process (`sluice sim` or `sluice-bench sim`) (or another upstream the
// engine is measured against, StartZeroAPI): in its own process, so its
// CPU and memory are not charged to the engine measured.
type SimProcess struct {
	cmd  *exec.Cmd
	Base string // http://127.0.0.1:PORT
}

var servingRE = regexp.MustCompile(`serving on (http://\S+)`)

// StartSimPool is StartSim and the key pool the simulator's organizations
// answer to (simtest.Pool): what every benchmark that drives the engine
// against a child simulator needs.
func StartSimPool(ctx context.Context, binary string, cfg sim.Config, dir string) (*SimProcess, *keys.Pool, error) {
	sp, err := StartSim(ctx, binary, cfg, dir)
	if err != nil {
		return nil, nil, err
	}
	pool, err := simtest.Pool(cfg)
	if err != nil {
		sp.Stop()
		return nil, nil, err
	}
	return sp, pool, nil
}

// StartSim runs `binary sim --config <cfg> --addr 127.0.0.1:0` (binary is
// sluice-bench or sluice: both serve the simulator so) and waits until it
// says where it serves.
func StartSim(ctx context.Context, binary string, cfg sim.Config, dir string) (*SimProcess, error) {
	path := filepath.Join(dir, "sim-config.json")
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return nil, err
	}
	return startChild(ctx, binary, "the simulator", "sim", "--config", path, "--addr", "127.0.0.1:0",
		"--time-scale", fmt.Sprint(cfg.TimeScale))
}

// StartZeroAPI runs `binary zeroapi --addr 127.0.0.1:0` (the
// stand-in upstream of internal/bench/zeroapi, with orgs organizations) and
// waits until it says where it serves.
func StartZeroAPI(ctx context.Context, binary string, orgs int) (*SimProcess, error) {
	return startChild(ctx, binary, "the zero-latency upstream", "zeroapi", "--addr", "127.0.0.1:0", "--orgs", fmt.Sprint(orgs))
}

// startChild runs binary with args and waits until it writes "serving on
// URL" to its standard error.
func startChild(ctx context.Context, binary, what string, args ...string) (*SimProcess, error) {
	cmd := exec.CommandContext(ctx, binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case base := <-found:
		return &SimProcess{cmd: cmd, Base: base}, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("bench: %s did not start within 30 s", what)
	}
}

// PID is the child's process id.
func (p *SimProcess) PID() int { return p.cmd.Process.Pid }

// ZeroStats fetches a zero-latency upstream's statistics.
func (p *SimProcess) ZeroStats() (zeroapi.Stats, error) {
	var st zeroapi.Stats
	return st, p.getJSON("/_zero/stats", &st)
}

// Stats fetches the simulator's statistics.
func (p *SimProcess) Stats() (sim.Stats, error) {
	var st sim.Stats
	return st, p.getJSON("/_sim/stats", &st)
}

// getJSON decodes the child's answer to GET path into v.
func (p *SimProcess) getJSON(path string, v any) error {
	resp, err := http.Get(p.Base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("bench: GET %s: HTTP %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Stop ends the child process.
func (p *SimProcess) Stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}
