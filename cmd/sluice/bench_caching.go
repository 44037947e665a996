package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/sim"
)

// benchCachingCmd is `sluice bench caching` (docs/caching.md).
func benchCachingCmd() *cobra.Command {
	run := bench.CachingRun{}
	var routes []string
	var primeHits []float64
	cmd := &cobra.Command{
		Use:   "caching",
		Short: "The prompt-caching lever: a shared-prefix job on ITPM-bound orgs with --cache-prefix off and auto",
		Long: `caching runs --n requests that share a --prefix-token system prompt and have
about --own tokens of their own through the code of 'sluice run', against a
'sluice sim' child process with three organizations bound by ITPM (300k /
225k / 150k), on the sync route and then on the batch route (--routes; the batch route in
one world per --prime-hits value), each once with --cache-prefix off and
once with auto. It prints wall-clock, steady
throughput, the input tokens uncached, written and read, the hit rate, the
batch route's primers and the input and total cost of each, and the ratios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if run.N < 10 || run.PrefixTokens < 1 || run.OwnTokens < 1 || run.TimeScale <= 0 {
				return fmt.Errorf("bench caching: --n must be ≥ 10, --prefix-tokens, --own and --time-scale positive")
			}
			run.Binary = bin
			var rs []bench.CachingResult
			for _, rt := range routes {
				if rt != "sync" && rt != "batch" {
					return fmt.Errorf("bench caching: --routes takes sync and batch, got %q", rt)
				}
				worlds := []float64{sim.Default().Batch.PrimeHit}
				if rt == "batch" {
					worlds = primeHits
				}
				for _, ph := range worlds {
					run.PrimeHit = ph
					for _, off := range []bool{true, false} {
						fmt.Fprintf(cmd.ErrOrStderr(), "bench caching: %s, --cache-prefix %s … ", rt, map[bool]string{true: "off", false: "auto"}[off])
						r, err := run.Run(cmd.Context(), off, rt == "batch")
						if err != nil {
							fmt.Fprintln(cmd.ErrOrStderr())
							return err
						}
						fmt.Fprintf(cmd.ErrOrStderr(), "%.1f s\n", r.Wall.Seconds())
						rs = append(rs, r)
					}
				}
			}
			bench.PrintCaching(cmd.OutOrStdout(), run, rs)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&run.N, "n", 20000, "requests")
	fl.IntVar(&run.PrefixTokens, "prefix-tokens", 3000, "tokens of the shared system prompt")
	fl.IntVar(&run.OwnTokens, "own", 300, "tokens of each request's own input")
	fl.StringSliceVar(&routes, "routes", []string{"sync", "batch"}, "the routes to run, each with off and auto")
	fl.Float64SliceVar(&primeHits, "prime-hits", []float64{0.8, 0.16}, "batch worlds: the share of batch rows that read a prefix only a sync primer wrote (users measured 0–16 %)")
	fl.Float64Var(&run.TimeScale, "time-scale", 40, "simulator time scale (limits × K, latencies ÷ K)")
	return cmd
}
