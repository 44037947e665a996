package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/bench"
)

func benchWorldsCmd() *cobra.Command {
	var (
		only    []string
		secs    float64
		verbose bool
		list    bool
	)
	cmd := &cobra.Command{
		Use:   "worlds",
		Short: "sluice run over a matrix of simulated worlds: bucket depths, faults, acceleration, missing headers, colleagues, unequal orgs, token-bound limits, real time",
		Long: `Runs the same judge-shaped job, with sluice's defaults, against a fresh
simulator child process per world, and prints per world: steady throughput ÷
the binding limit, the share of sluice's attempts answered 429, the fault
share, requests lost, requests billed twice and, with a colleague, its 429
share and how full sluice and the colleague kept that organization.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			worlds := bench.Worlds(secs)
			out := cmd.OutOrStdout()
			if list {
				for _, w := range worlds {
					fmt.Fprintf(out, "%-18s %s (time scale %g, %d requests)\n", w.Name, w.About, w.Sim.TimeScale, w.Workload.N)
				}
				return nil
			}
			var log io.Writer
			if verbose {
				log = cmd.ErrOrStderr()
			}
			var rs []bench.WorldResult
			for _, w := range worlds {
				if len(only) > 0 && !slices.Contains(only, w.Name) {
					continue
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "world %s: %s (%d requests, time scale %g)…\n", w.Name, w.About, w.Workload.N, w.Sim.TimeScale)
				r, err := w.Run(cmd.Context(), bin, log)
				if err != nil {
					return fmt.Errorf("world %s: %w", w.Name, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "  %.1f s, steady %.1f req/s of %.1f (%s): %.3f; 429s %.2f %%, faults %.1f %%, lost %d, billed twice %d\n",
					r.Wall.Seconds(), r.Steady, r.Binding, r.BindsWhat, r.Efficiency(), 100*r.Share429, 100*r.FaultPct, r.Lost, r.Duplicate)
				rs = append(rs, r)
			}
			if len(rs) == 0 {
				return fmt.Errorf("no world matches --only %s (see --list)", strings.Join(only, ","))
			}
			bench.PrintWorlds(out, rs)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these worlds (comma-separated names; see --list)")
	cmd.Flags().Float64Var(&secs, "seconds", 40, "size each job to about this many seconds at its binding limit")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log the engine's events to stderr")
	cmd.Flags().BoolVar(&list, "list", false, "list the worlds and exit")
	return cmd
}
