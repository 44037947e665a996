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
	root.AddCommand(simCmd(), demoCmd(), runCmd(), keysCmd(), benchCmd(), planCmd(), guidelinesCmd(), judgeCmd(), cacheCmd(), fleetCmd(), proxyCmd(), reportCmd(), statusCmd(), versionCmd())
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
