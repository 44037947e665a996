// Command sluice gets N Claude API calls done in the least wall-clock, or
// the least money, without being a bad neighbour on shared keys.
//
// This file wires flags to packages; the work lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/profiling"
)

func main() {
	ctx, stop := notifyInterrupts(context.Background())
	defer stop()
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Get N Claude API calls done fast, politely, durably",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var prof profiling.Flags
	prof.Register(root)
	var withParent bool
	root.PersistentFlags().BoolVar(&withParent, "exit-with-parent", false, "stop as on SIGTERM when standard input (a pipe the parent holds) reaches its end: the parent died; for programs that start sluice")
	profStart := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if withParent {
			if err := exitWithParent(os.Stdin, selfSignals); err != nil {
				return err
			}
		}
		return profStart(cmd, args)
	}
	root.AddCommand(simCmd(), demoCmd(), runCmd(), keysCmd(), movedBenchCmd(), planCmd(), guidelinesCmd(), judgeCmd(), cacheCmd(), fleetCmd(), proxyCmd(), modelsCmd(), reportCmd(), statusCmd(), versionCmd())
	err := root.ExecuteContext(ctx)
	if perr := prof.Stop(); perr != nil {
		fmt.Fprintln(os.Stderr, "sluice:", perr)
	}
	if err != nil {
		msg := err.Error()
		if f := logRedact.Load(); f != nil {
			msg = (*f)(msg) // an error may carry a lower layer's raw text
		}
		fmt.Fprintln(os.Stderr, "sluice:", msg)
		var ee *exitError
		if errors.As(err, &ee) {
			stop()
			os.Exit(ee.code)
		}
		stop()
		os.Exit(1)
	}
}

// movedBenchCmd answers `sluice bench …`: the benchmark harness is its own
// command, sluice-bench, so the shipped binary carries none of it.
func movedBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Moved: the benchmarks are the sluice-bench command",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			rest := "…"
			if len(args) > 0 {
				rest = strings.Join(args, " ")
			}
			return &exitError{code: 2, err: fmt.Errorf("bench moved: use sluice-bench (go run ./cmd/sluice-bench %s)", rest)}
		},
	}
}
