package main

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/sim"
)

// defaultSimAddr is where `sluice sim` listens without --addr.
const defaultSimAddr = "127.0.0.1:4080"

// simFlags are the world-shaping flags shared by `sim` and `demo`.
type simFlags struct {
	preset    string
	config    string
	timeScale float64
	seed      uint64
}

func (f *simFlags) register(cmd *cobra.Command, defaultScale float64) {
	cmd.Flags().StringVar(&f.preset, "preset", sim.PresetThreeOrg, "world to simulate: "+fmt.Sprint(sim.PresetNames()))
	cmd.Flags().StringVar(&f.config, "config", "", "JSON config file; its fields override the preset's")
	cmd.Flags().Float64Var(&f.timeScale, "time-scale", defaultScale, "divide every latency and delay, multiply every per-minute limit")
	cmd.Flags().Uint64Var(&f.seed, "seed", 0, "seed for answers, jitter and faults (0 keeps the preset's)")
}

// build returns the effective configuration.
func (f *simFlags) build(cmd *cobra.Command) (sim.Config, error) {
	cfg, err := sim.Preset(f.preset)
	if err != nil {
		return cfg, err
	}
	if f.config != "" {
		if cfg, err = sim.LoadConfig(f.config, cfg); err != nil {
			return cfg, err
		}
	}
	if cmd.Flags().Changed("time-scale") || f.config == "" {
		cfg.TimeScale = f.timeScale
	}
	if f.seed != 0 {
		cfg.Seed = f.seed
	}
	return cfg, cfg.Validate()
}

func simCmd() *cobra.Command {
	var (
		flags       simFlags
		addr        string
		printConfig bool
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve a simulated Anthropic API (Messages, Batches, rate limits, faults)",
		Long: `sim serves a faithful simulation of the Anthropic API on loopback: Messages
(plain and streaming), count_tokens, models and Message Batches, with per-org ×
model-pool rate limits, rate-limit headers, batch queue behaviour and fault
injection. With no flags it serves the three-org preset on ` + defaultSimAddr + `.

Control endpoints: GET /_sim/stats, POST /_sim/reset, POST /_sim/keys
({"label":…,"status":"revoked"}), GET /_sim/config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.build(cmd)
			if err != nil {
				return err
			}
			if printConfig {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(cfg)
			}
			srv, err := sim.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			out := cmd.ErrOrStderr()
			fmt.Fprintf(out, "sluice sim: preset %s, time scale %g, serving on http://%s\n", flags.preset, cfg.TimeScale, ln.Addr())
			for _, o := range cfg.Orgs {
				for _, k := range o.Keys {
					// These are the simulator's own documented fake keys.
					fmt.Fprintf(out, "  org %-10s key %-10s %s\n", o.Name, k.Label, k.Key)
				}
			}
			fmt.Fprintf(out, "try: curl -s http://%s/v1/messages -H 'x-api-key: %s' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n",
				ln.Addr(), cfg.Orgs[0].Keys[0].Key)
			err = srv.ServeUntil(cmd.Context(), ln, 5*time.Second)
			if cmd.Context().Err() != nil {
				fmt.Fprintln(out, "sluice sim: stopped")
			}
			return err
		},
	}
	flags.register(cmd, 1)
	cmd.Flags().StringVar(&addr, "addr", defaultSimAddr, "listen address (HOST:PORT; port 0 picks one)")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration as JSON and exit")
	return cmd
}
