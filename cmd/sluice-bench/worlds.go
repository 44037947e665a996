package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
)

func benchWorldsCmd() *cobra.Command {
	var (
		only    []string
		secs    float64
		verbose bool
		list    bool
		noLoop  bool
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
			autos := bench.AutoWorlds(secs)
			out := cmd.OutOrStdout()
			if list {
				for _, w := range worlds {
					fmt.Fprintf(out, "%-18s %s (time scale %g, %d requests)\n", w.Name, w.About, w.Sim.TimeScale, w.Workload.N)
				}
				for _, w := range autos {
					fmt.Fprintf(out, "%-18s --route auto: %s (time scale %g, %d requests)\n", w.Name, w.About, w.Sim.TimeScale, w.Workload.N)
				}
				return nil
			}
			var log io.Writer
			if verbose {
				log = cmd.ErrOrStderr()
			}
			var rs []bench.WorldResult
			type loop struct {
				name string
				r    bench.LoopResult
			}
			var loops []loop
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
				if w.Loop > 0 && !noLoop {
					fmt.Fprintf(cmd.ErrOrStderr(), "  the same world as a plain loop over the official Go SDK, %d in flight per key…\n", w.Loop)
					lr, err := w.RunSDKLoop(cmd.Context(), bin, w.Loop)
					if err != nil {
						return fmt.Errorf("world %s, SDK loop: %w", w.Name, err)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "  %s\n", lr)
					loops = append(loops, loop{w.Name, lr})
				}
			}
			var ars []bench.AutoResult
			for _, w := range autos {
				if len(only) > 0 && !slices.Contains(only, w.Name) {
					continue
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "world %s (--route auto): %s (%d requests, time scale %g)…\n", w.Name, w.About, w.Workload.N, w.Sim.TimeScale)
				r, err := w.Run(cmd.Context(), bin, log)
				if err != nil {
					return fmt.Errorf("world %s: %w", w.Name, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "  %.1f s (predicted %.0f s, %.0f–%.0f), %.0f %% by batch, %d re-plan(s), lost %d\n",
					r.Wall.Seconds(), r.Truth.Wall.Mid.Seconds(), r.Truth.Wall.Low.Seconds(), r.Truth.Wall.High.Seconds(), 100*r.ByBatch, len(r.Replans), r.Lost)
				ars = append(ars, r)
			}
			if len(rs)+len(ars) == 0 {
				return fmt.Errorf("no world matches --only %s (see --list)", strings.Join(only, ","))
			}
			if len(rs) > 0 {
				bench.PrintWorlds(out, rs)
				fmt.Fprintln(out, "\nThe planner's prediction (whole job on sync, from the world's configuration) against the measurement:")
				fmt.Fprintln(out)
				bench.PrintPredictions(out, rs)
			}
			if len(ars) > 0 {
				fmt.Fprintln(out, "\nWorlds where --route auto must leave sync (the planner decides; the right route's prediction against the measurement):")
				fmt.Fprintln(out)
				bench.PrintAutoWorlds(out, ars)
			}
			if len(loops) > 0 {
				fmt.Fprintln(out, "\n| world | run | wall | answered | lost | 429s of calls | billed twice |")
				fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|")
				for _, l := range loops {
					for _, r := range rs {
						if r.World.Name == l.name {
							fmt.Fprintf(out, "| %s | sluice run | %.1f s | %d | %d | %.2f %% | %d |\n", l.name, r.Wall.Seconds(), r.World.Workload.N-r.Lost, r.Lost, 100*r.Share429, r.Duplicate)
						}
					}
					fmt.Fprintf(out, "| %s | official Go SDK loop, %d per key | %.1f s | %d | %d | %.2f %% | %d |\n", l.name, worldsLoop(rs, l.name), l.r.Wall.Seconds(), l.r.OK, l.r.Lost, 100*l.r.Share429, l.r.Duplicate)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these worlds (comma-separated names; see --list)")
	cmd.Flags().Float64Var(&secs, "seconds", 40, "size each job to about this many seconds at its binding limit")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log the engine's events to stderr")
	cmd.Flags().BoolVar(&list, "list", false, "list the worlds and exit")
	cmd.Flags().BoolVar(&noLoop, "no-sdk-loop", false, "skip the official-SDK loop run of the worlds that compare with one")
	return cmd
}

// worldsLoop is the SDK loop's calls in flight per key in world name.
func worldsLoop(rs []bench.WorldResult, name string) int {
	for _, r := range rs {
		if r.World.Name == name {
			return r.World.Loop
		}
	}
	return 0
}
