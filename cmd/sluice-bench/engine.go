package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/internal/bench/zeroapi"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// engineCmds are the benchmarks of the engine in this process: efficiency,
// capacity and memory.
func engineCmds() []*cobra.Command {
	// Each subcommand has its own variables: cobra writes a flag's default
	// into its variable when the flag is registered.
	type knobs struct {
		n     int
		scale float64
	}
	flags := func(c *cobra.Command, k *knobs, defN int, defScale float64) {
		c.Flags().IntVar(&k.n, "n", defN, "requests")
		c.Flags().Float64Var(&k.scale, "time-scale", defScale, "simulator time scale")
	}
	ek, ck, mk := &knobs{}, &knobs{}, &knobs{}
	self := func() (string, error) { return os.Executable() }

	eff := &cobra.Command{
		Use:   "efficiency",
		Short: "Throughput ÷ binding limit on the three-org preset, with the default caps and with caps lifted",
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := self()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// A full bucket holds 10 s of each limit rather than a whole
			// minute, so the initial burst cannot hide the steady pacing
			// (at 60 s the lifted arm would finish inside its first bucket).
			for _, arm := range []struct {
				name  string
				caps  map[api.Family]int
				scale float64
				n     int
			}{
				{"three-org, default caps", nil, ek.scale, ek.n},
				{"three-org, caps lifted", map[api.Family]int{api.FamilySonnet: 5000}, ek.scale / 3, ek.n * 3 / 2},
			} {
				cfg := sim.Default()
				cfg.TimeScale = arm.scale
				cfg.BucketWindow = sim.Duration(10 * time.Second)
				// Empty at the start: a full bucket is a burst the engine may
				// spend, and it would count as steady throughput above the limit.
				cfg.BucketsStartEmpty = true
				r, err := bench.EngineRun{Name: fmt.Sprintf("%s (time scale %g)", arm.name, arm.scale), Binary: bin, Sim: cfg,
					Workload: workload.Judge{N: arm.n, Seed: 11}, Caps: arm.caps}.Run(cmd.Context())
				if err != nil {
					return err
				}
				r.Print(out)
			}
			return nil
		},
	}
	flags(eff, ek, 40000, 10)

	var capUpstream string
	capacity := &cobra.Command{
		Use:   "capacity",
		Short: "Requests/s one sluice process drives against a zero-latency, unlimited upstream",
		Long: `capacity runs sluice run's code path in this process against a zero-latency,
unlimited upstream in a child process and prints the steady rate, and the
CPU and allocations per request of the engine and the upstream.

--upstream zero (the default) is internal/bench/zeroapi, an upstream that spends as
little CPU as it can (it checks only keys and framing), so that on a small
machine the engine, not the upstream, is what is measured; --upstream sim is the
simulator with no latency and the same limits far out of reach (a faithful
world, 100–160 µs of CPU a request of its own on a two-core machine).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := self()
			if err != nil {
				return err
			}
			var zero bool
			switch capUpstream {
			case "zero":
				zero = true
			case "sim":
			default:
				return fmt.Errorf("capacity: --upstream %q: zero or sim", capUpstream)
			}
			r, err := bench.EngineRun{Name: "capacity (zero latency, limits out of reach, " + capUpstream + ")", Binary: bin, Sim: unlimited(ck.scale, 8, 32),
				Workload: workload.Judge{N: ck.n, Seed: 12, MaxTokens: 64}, Zero: zero}.Run(cmd.Context())
			if err != nil {
				return err
			}
			r.Predicted = 0
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	flags(capacity, ck, 100000, 1)
	capacity.Flags().StringVar(&capUpstream, "upstream", "zero", "what the engine runs against: zero (internal/bench/zeroapi) or sim (the simulator)")

	memory := &cobra.Command{
		Use:   "memory",
		Short: "Peak RSS of one sluice process running a 1,000,000-line input",
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := self()
			if err != nil {
				return err
			}
			r, err := bench.EngineRun{Name: "memory", Binary: bin, Sim: unlimited(mk.scale, 1, 8),
				Workload: workload.Judge{N: mk.n, Seed: 13, MaxTokens: 16, NoRubric: true, InputMin: 20, InputMax: 40}}.Run(cmd.Context())
			if err != nil {
				return err
			}
			r.Predicted = 0
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	flags(memory, mk, 1000000, 1)
	return []*cobra.Command{eff, capacity, memory}
}

// unlimited is the three-org world with no latency and limits far above
// anything one process reaches: only the engine's own speed shows. The
// limits are stated, not absent: the API sends its rate-limit headers with
// every answer, and the engine reads them and learns from them then too
// (before 2026-12-07 this world had no limits, so no headers).
func unlimited(scale float64, outMin, outMax int) sim.Config {
	c := sim.Default()
	c.TimeScale = scale
	for name := range c.Latency {
		c.Latency[name] = sim.LatencyModel{TokensPerSec: 1e12}
	}
	for i := range c.Orgs {
		c.Orgs[i].Limits = nil
		limits := zeroapi.Limits // the stand-in upstream's: one world for both
		c.Orgs[i].DefaultLimits = &limits
	}
	c.Output = sim.OutputModel{Min: outMin, Max: outMax}
	return c
}
