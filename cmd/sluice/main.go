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

	"github.com/spf13/cobra"
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
	var prof profiles
	prof.register(root)
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
	root.AddCommand(simCmd(), demoCmd(), runCmd(), keysCmd(), benchCmd(), planCmd(), guidelinesCmd(), judgeCmd(), cacheCmd(), fleetCmd(), proxyCmd(), modelsCmd(), reportCmd(), statusCmd(), versionCmd())
	err := root.ExecuteContext(ctx)
	if perr := prof.stop(); perr != nil {
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
