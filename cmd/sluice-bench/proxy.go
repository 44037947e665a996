package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/sim"
)

// proxyBenchRPM are the three orgs' Sonnet 4 requests per minute in the
// proxy load test (before time scaling): far below what 200 clients offer.
var proxyBenchRPM = map[string]int64{"high_prio": 600, "batch": 400, "low_prio": 600}

// benchProxyCmd is `sluice-bench proxy`: the issue-6 load test.
func benchProxyCmd() *cobra.Command {
	var (
		n, clients int
		scale      float64
		verbose    bool
		soak       int
		soakBatch  int
		soakFlight int
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "SDK clients through `sluice proxy` onto a three-org simulator whose limits are far below their load",
		Long: `proxy starts 'sluice sim' (three-org preset, Sonnet 4 limited to 600, 400 and
600 RPM per organization, time-scaled, buckets of 10 s) and 'sluice proxy' in
front of it, each a child process, then drives --n calls from --clients
concurrent official Go SDK clients (SDK retries off) through the proxy. It
prints the 429s the clients received, the simulator's share of 429s, and the
steady throughput over the binding limit computed from the world.

--soak N instead runs N virtual-batch rows through the proxy (batches of
--soak-batch rows, --soak-in-flight at a time; each created, polled until it
ends and its results read back whole; ended batches are kept), on a
simulator whose limits are out of reach, with the planner given the world
(--limits-file), and prints the proxy's resident set at the start, after the
first batch, at 10 %, at 50 % and at the end: a proxy that runs for weeks
must not grow with the rows it has served (goal: flat within 20 % from 10 %
on). Time scale 100 unless --time-scale is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := sluiceBinary(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if soak > 0 {
				if !cmd.Flags().Changed("time-scale") {
					scale = 100
				}
				s := bench.ProxySoak{Binary: bin, Rows: soak, BatchSize: soakBatch, InFlight: soakFlight, TimeScale: scale, Log: cmd.ErrOrStderr()}
				r, err := s.Run(cmd.Context())
				if err != nil {
					return err
				}
				r.Print(cmd.OutOrStdout())
				return nil
			}
			cfg := sim.Default()
			cfg.TimeScale = scale
			cfg.BucketWindow = sim.Duration(10 * time.Second)
			// Empty at the start: a full bucket is a burst the engine may
			// spend, and it would count as steady throughput above the limit.
			cfg.BucketsStartEmpty = true
			for i := range cfg.Orgs {
				rpm, ok := proxyBenchRPM[cfg.Orgs[i].Name]
				if !ok {
					return fmt.Errorf("bench proxy: the three-org preset has no org %q", cfg.Orgs[i].Name)
				}
				cfg.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: rpm, ITPM: 10_000_000, OTPM: 10_000_000}
			}
			run := bench.ProxyRun{
				Name:   fmt.Sprintf("proxy, three-org at %d+%d+%d RPM (time scale %g)", proxyBenchRPM["high_prio"], proxyBenchRPM["batch"], proxyBenchRPM["low_prio"], scale),
				Binary: bin, Sim: cfg, Clients: clients, Calls: n,
			}
			if verbose {
				run.Log = cmd.ErrOrStderr()
			}
			r, err := run.Run(cmd.Context())
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 10000, "calls in all")
	cmd.Flags().IntVar(&clients, "clients", 200, "concurrent SDK clients")
	cmd.Flags().Float64Var(&scale, "time-scale", 10, "simulator time scale")
	cmd.Flags().BoolVar(&verbose, "v", false, "show the proxy's log")
	cmd.Flags().IntVar(&soak, "soak", 0, "instead of the load test, run this many virtual-batch rows through the proxy and print its RSS as they go (e.g. 1000000)")
	cmd.Flags().IntVar(&soakBatch, "soak-batch", 10000, "with --soak: rows a batch")
	cmd.Flags().IntVar(&soakFlight, "soak-in-flight", 2, "with --soak: batches at a time")
	return cmd
}
