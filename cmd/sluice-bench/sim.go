package main

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/sim"
)

// simChildCmd serves the simulator as the benchmarks' child process
// (internal/bench.StartSim starts `BINARY sim --config FILE --addr ADDR
// --time-scale K`): the flags of `sluice sim` that StartSim uses, so a
// benchmark needs no sluice binary for its world.
func simChildCmd() *cobra.Command {
	var (
		config, addr string
		timeScale    float64
	)
	cmd := &cobra.Command{
		Use:    "sim",
		Short:  "Serve the simulator with a configuration file (the benchmarks' child process; for a simulator of your own, sluice sim)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := sim.LoadConfig(config, sim.Default())
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("time-scale") {
				cfg.TimeScale = timeScale
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			srv, err := sim.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sluice-bench sim: time scale %g, serving on http://%s\n", cfg.TimeScale, ln.Addr())
			return srv.ServeUntil(cmd.Context(), ln, 5*time.Second)
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "JSON config file (sim.Config; fields absent keep the three-org preset's)")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address (HOST:PORT; port 0 picks one)")
	cmd.Flags().Float64Var(&timeScale, "time-scale", 1, "divide every latency and delay, multiply every per-minute limit (default: the file's)")
	cmd.MarkFlagRequired("config")
	return cmd
}
