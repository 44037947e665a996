package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
)

func benchOverheadCmd() *cobra.Command {
	var (
		conns, body                 int
		dur, warm                   time.Duration
		rate                        float64
		model, proxyCPU, proxyAlloc string
		verbose                     bool
	)
	cmd := &cobra.Command{
		Use:   "overhead",
		Short: "What `sluice proxy` adds to one request: the same load straight to a zero-latency simulator and through the proxy",
		Long: `overhead starts 'sluice sim' (three orgs, zero latency, limits out of reach) as a child
process and drives a closed loop from --connections keep-alive connections
(each sends its next request when the last is answered, as wrk does) with
--body-byte Messages bodies, first straight to the simulator and then through
'sluice proxy' (a second child) in front of it. It prints req/s, p50 and p99
of both, the ratio, the latency the proxy adds, the CPU each process spent
per request and the proxy's heap allocations per request.

A closed loop runs both at saturation, where latency is queueing (about
connections ÷ rate), so the slower path's p50 is larger by the throughput
ratio alone. With --rate R (default 1000; 0 skips it) each target is then
also driven open-loop at R requests a second, evenly spaced, each request's
latency counted from the moment it was due: at a rate both sustain, the
difference is what the proxy itself adds to one request.

The load generator shares the machine's cores with both children: on a small
machine every figure is a floor, and the ratio is the number to compare.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := sluiceBinary(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			run := bench.OverheadRun{Binary: bin, Sim: unlimited(1, 8, 32), Connections: conns, BodyBytes: body,
				Duration: dur, Warmup: warm, Rate: rate, Model: model}
			if proxyCPU != "" {
				run.ProxyArgs = append(run.ProxyArgs, "--cpu-profile", proxyCPU)
			}
			if proxyAlloc != "" {
				run.ProxyArgs = append(run.ProxyArgs, "--alloc-profile", proxyAlloc)
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
	cmd.Flags().IntVar(&conns, "connections", 32, "keep-alive connections, each with one request outstanding")
	cmd.Flags().IntVar(&body, "body", 1024, "bytes in each request body")
	cmd.Flags().DurationVar(&dur, "duration", 10*time.Second, "measured window of each phase")
	cmd.Flags().DurationVar(&warm, "warmup", 2*time.Second, "load before each measured window (not counted)")
	cmd.Flags().Float64Var(&rate, "rate", 1000, "requests a second of the open-loop phase (0: closed loop only)")
	cmd.Flags().StringVar(&model, "model", "claude-haiku-4-5-20251001", "model named in each request")
	cmd.Flags().StringVar(&proxyCPU, "proxy-cpu-profile", "", "write the proxy's pprof CPU profile to FILE (an absolute path)")
	cmd.Flags().StringVar(&proxyAlloc, "proxy-alloc-profile", "", "write the proxy's pprof allocation profile to FILE (an absolute path) as it ends")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "pass the proxy's log through to stderr")
	return cmd
}
