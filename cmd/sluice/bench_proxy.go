package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/sim"
)

// proxyBenchRPM are the three orgs' Sonnet 4 requests per minute in the
// proxy load test (before time scaling): far below what 200 clients offer.
var proxyBenchRPM = map[string]int64{"high_prio": 600, "batch": 400, "low_prio": 600}

// benchProxyCmd is `sluice bench proxy`: the issue-6 load test.
func benchProxyCmd() *cobra.Command {
	var (
		n, clients int
		scale      float64
		verbose    bool
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "SDK clients through `sluice proxy` onto a three-org simulator whose limits are far below their load",
		Long: `proxy starts 'sluice sim' (three-org preset, Sonnet 4 limited to 600, 400 and
600 RPM per organization, time-scaled, buckets of 10 s) and 'sluice proxy' in
front of it, each a child process, then drives --n calls from --clients
concurrent official Go SDK clients (SDK retries off) through the proxy. It
prints the 429s the clients received, the simulator's share of 429s, and the
steady throughput over the binding limit computed from the world.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
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
	return cmd
}
