package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/sim"
)

// benchCachingCmd is `sluice-bench caching` (docs/caching.md).
func benchCachingCmd() *cobra.Command {
	run := bench.CachingRun{}
	var routes []string
	var primeHits, cacheHits []float64
	cmd := &cobra.Command{
		Use:   "caching",
		Short: "The prompt-caching lever: a shared-prefix job on ITPM-bound orgs with --cache-prefix off and auto",
		Long: `caching runs --n requests that share a --prefix-token system prompt and have
about --own tokens of their own through the code of 'sluice run', against a
'sluice sim' child process with three organizations bound by ITPM (300k /
225k / 150k), on the sync route and then on the batch route (--routes; the batch route in
one world per pair of --prime-hits and --cache-hits values), each once with
--cache-prefix off and once with auto (batch on the batch route). It prints wall-clock, steady
throughput, the input tokens uncached, written and read, the hit rate, the
batch route's primers and seeds and the input and total cost of each, and the ratios.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if run.N < 10 || run.PrefixTokens < 1 || run.OwnTokens < 1 || run.TimeScale <= 0 {
				return fmt.Errorf("bench caching: --n must be ≥ 10, --prefix-tokens, --own and --time-scale positive")
			}
			for _, h := range append(append([]float64(nil), primeHits...), cacheHits...) {
				if h < 0 || h > 1 {
					return fmt.Errorf("bench caching: --prime-hits and --cache-hits are shares in [0, 1], got %v", h)
				}
			}
			run.Binary = bin
			var rs []bench.CachingResult
			for _, rt := range routes {
				if rt != "sync" && rt != "batch" {
					return fmt.Errorf("bench caching: --routes takes sync and batch, got %q", rt)
				}
				type world struct{ primeHit, cacheHit float64 }
				worlds := []world{{sim.Default().Batch.PrimeHit, sim.Default().Batch.CacheHit}}
				if rt == "batch" {
					worlds = nil
					for _, ch := range cacheHits {
						for _, ph := range primeHits {
							worlds = append(worlds, world{ph, ch})
						}
					}
				}
				for _, wd := range worlds {
					run.PrimeHit, run.CacheHit = wd.primeHit, wd.cacheHit
					for _, off := range []bool{true, false} {
						arm := "auto" // the --cache-prefix value the arm runs with
						if off {
							arm = "off"
						} else if rt == "batch" {
							arm = "batch"
						}
						fmt.Fprintf(cmd.ErrOrStderr(), "bench caching: %s, --cache-prefix %s … ", rt, arm)
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
	fl.Float64SliceVar(&cacheHits, "cache-hits", []float64{0.8, 0.3}, "batch worlds: the share of batch rows that read a prefix a batch warmed before theirs began (the docs: 30–98 %)")
	fl.Float64Var(&run.TimeScale, "time-scale", 40, "simulator time scale (limits × K, latencies ÷ K)")
	return cmd
}
