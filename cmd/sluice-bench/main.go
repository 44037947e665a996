// Command sluice-bench measures sluice against the simulator and prints the
// figures BENCHMARKS.md quotes. It is apart from sluice, as promtool is from
// prometheus, so the binary users run carries no benchmark harness.
//
// Most benchmarks drive the engine in this process against upstreams this
// binary serves as child processes (its hidden sim and zeroapi
// subcommands). chaos, fleet, overhead and proxy run the sluice binary
// itself (`sluice run`, `sluice proxy`, and its `sluice sim`) as child
// processes: see sluiceBinary for which one.
//
// This file wires flags to internal/bench; the work lives there.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/profiling"
)

// exitError ends the process with code after printing err.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// sluiceFlag is --sluice: the sluice binary to measure.
var sluiceFlag string

// builtDir holds the sluice binary sluiceBinary built, removed as main ends.
var builtDir string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	root := &cobra.Command{
		Use:           "sluice-bench",
		Short:         "Measure sluice against the simulator (figures for BENCHMARKS.md)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var prof profiling.Flags
	prof.Register(root)
	root.PersistentFlags().StringVar(&sluiceFlag, "sluice", "", "the sluice binary that chaos, fleet, overhead and proxy run as children (default: one built now from the checkout in the working directory, go build ./cmd/sluice)")
	root.AddCommand(engineCmds()...)
	root.AddCommand(benchPredictCmd(), benchFleetCmd(), benchJudgeValidationCmd(), benchJudgeValidationArmCmd(), benchProxyCmd(), benchOverheadCmd(), benchWorldsCmd(), benchChaosCmd(), benchCachingCmd(), benchZeroAPICmd(), simChildCmd())
	err := root.ExecuteContext(ctx)
	if perr := prof.Stop(); perr != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", perr)
	}
	stop()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		os.Exit(code)
	}
}

// sluiceBinary is the sluice binary the benchmarks that run `sluice run` or
// `sluice proxy` as child processes measure: --sluice PATH, else one built
// now from the module in the working directory with the go on PATH (go run
// ./cmd/sluice-bench … from a checkout measures that checkout), removed as
// sluice-bench ends. It never takes a sluice from PATH or from beside this
// binary: one built at another commit is not the code under measurement.
func sluiceBinary(ctx context.Context, log io.Writer) (string, error) {
	if sluiceFlag != "" {
		p, err := filepath.Abs(sluiceFlag)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("--sluice: %w", err)
		}
		return p, nil
	}
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return "", err
		}
		builtDir = dir
	}
	p := filepath.Join(builtDir, "sluice")
	if runtime.GOOS == "windows" {
		p += ".exe"
	}
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	fmt.Fprintln(log, "sluice-bench: building the sluice to measure: go build github.com/sluice-dev/sluice/cmd/sluice (--sluice to choose another)")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", p, "github.com/sluice-dev/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("this benchmark runs the sluice binary; building it failed (run from a sluice checkout, or pass --sluice PATH): %v\n%s", err, out)
	}
	return p, nil
}
