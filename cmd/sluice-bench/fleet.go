package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// fleetBenchLimits are the orgs' Sonnet 4 limits in the fleet's "limits"
// scenario (before time scaling): far below what the caps allow, so the
// shared buckets bind — RPM on two orgs (the proxy benchmark's 600 and
// 400), OTPM on the third (86,400: 600 answers a minute at the simulator's
// mean of 144 output tokens, so the refunds of over-reserved output
// matter).
var fleetBenchLimits = map[string]sim.Limits{
	"high_prio": {RPM: 600, ITPM: 10_000_000, OTPM: 10_000_000},
	"batch":     {RPM: 400, ITPM: 10_000_000, OTPM: 10_000_000},
	"low_prio":  {RPM: 10_000, ITPM: 10_000_000, OTPM: 86_400},
}

// benchFleetCmd is `sluice-bench fleet`: three `sluice run --fleet`
// processes sharing one simulator through one private redis-server, steady,
// with one process SIGKILLed mid-run, and with Redis stopped and restarted.
func benchFleetCmd() *cobra.Command {
	var (
		n, jobs   int
		scale     float64
		outage    time.Duration
		scenarios []string
		verbose   bool
	)
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Several sluice processes sharing one org budget through Redis (needs redis-server)",
		Long: `fleet starts a 'sluice sim' child process (three-org preset, buckets of 10 s)
and a private redis-server on a free port, then runs --jobs 'sluice run --fleet'
processes at once, each with its own job of --n judge-shaped requests, in
five scenarios:

  split   the control arm: no Redis, each process with 1/--jobs of every
          cap (a static split: what the machine gives three processes now);
  steady  all jobs run to the end, sharing the caps through Redis;
  kill    job 0 is SIGKILLed at 20 % of its results, then resumed once the
          others are done;
  redis   Redis is stopped at 40 % of all results and restarted after --outage;
  limits  as steady, but the simulator's Sonnet limits are far below the
          caps (600 and 400 RPM, and 86,400 OTPM): the shared buckets, the
          refunds and the header corrections bind, not the caps.

Each prints the simulator's peak concurrency per organization against the
cap, 429s, the fleet's throughput against its binding limit, the spread of
the jobs' wall-clocks, and what the scenario measures; every result file is
checked to hold every request exactly once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := sluiceBinary(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, sc := range scenarios {
				cfg := sim.Default()
				cfg.TimeScale = scale
				cfg.BucketWindow = sim.Duration(10 * time.Second)
				// Empty at the start: a full bucket is a burst the engine may
				// spend, and it would count as steady throughput above the limit.
				cfg.BucketsStartEmpty = true
				fr := bench.FleetRun{Binary: bin, Sim: cfg, Jobs: jobs, Workload: workload.Judge{N: n, Seed: 21}}
				if verbose {
					fr.Log = os.Stderr
				}
				switch sc {
				case "split":
					fr.Name, fr.NoFleet = fmt.Sprintf("control: no fleet, each process capped at 1/%d", jobs), true
				case "steady":
					fr.Name = "steady"
				case "kill":
					fr.Name, fr.KillAt = "kill", 0.2
				case "redis":
					fr.Name, fr.OutageAt, fr.Outage = "redis restart", 0.4, outage
				case "limits":
					for i := range cfg.Orgs {
						l, ok := fleetBenchLimits[cfg.Orgs[i].Name]
						if !ok {
							return fmt.Errorf("bench fleet: the three-org preset has no org %q", cfg.Orgs[i].Name)
						}
						cfg.Orgs[i].Limits[api.PoolSonnet4] = l
					}
					fr.Sim = cfg
					fr.Name = "limits: 600 / 400 RPM, 86,400 OTPM"
				default:
					return fmt.Errorf("bench fleet: unknown scenario %q (split, steady, kill, redis, limits)", sc)
				}
				fr.Name += fmt.Sprintf(" (time scale %g)", scale)
				r, err := fr.Run(cmd.Context())
				if err != nil {
					return err
				}
				r.Print(out)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 10000, "requests per job")
	cmd.Flags().IntVar(&jobs, "jobs", 3, "sluice processes")
	cmd.Flags().Float64Var(&scale, "time-scale", 10, "simulator time scale")
	cmd.Flags().DurationVar(&outage, "outage", 5*time.Second, "how long Redis stays down in the redis scenario")
	cmd.Flags().StringSliceVar(&scenarios, "scenario", []string{"split", "steady", "kill", "redis", "limits"}, "scenarios to run")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log the scenario's events to stderr")
	return cmd
}
