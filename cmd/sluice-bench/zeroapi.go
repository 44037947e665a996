package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench/zeroapi"
)

// benchZeroAPICmd serves internal/bench/zeroapi: the upstream `bench capacity`
// starts as a child process to measure the engine against.
func benchZeroAPICmd() *cobra.Command {
	var (
		addr string
		orgs int
	)
	cmd := &cobra.Command{
		Use:   "zeroapi",
		Short: "Serve a zero-latency stand-in for the Messages API, limits out of reach, that spends as little CPU as it can (bench capacity's upstream)",
		Long: `zeroapi answers POST /v1/messages and /v1/messages/count_tokens at once,
with limits out of reach stated in the API's rate-limit headers, for the keys
it prints, and GET /_zero/stats with what it answered. It is a measuring instrument: it checks only the key and the framing.
sluice-bench capacity starts it as a child process.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if orgs < 1 || orgs > 3 {
				return fmt.Errorf("bench zeroapi: --orgs %d: between 1 and 3", orgs)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("bench zeroapi: %w", err)
			}
			srv := zeroapi.New(zeroapi.Config{Orgs: orgs})
			out := cmd.ErrOrStderr()
			fmt.Fprintf(out, "sluice-bench zeroapi: %d organizations, serving on http://%s\n", orgs, ln.Addr())
			for i := range orgs {
				// The stand-in's own fake keys, like the simulator's.
				fmt.Fprintf(out, "  org %s key %s\n", zeroapi.OrgID(i), zeroapi.Key(i))
			}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-cmd.Context().Done():
				srv.Close()
				<-errc
				return nil
			}
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "listen address (HOST:PORT; port 0 picks one)")
	cmd.Flags().IntVar(&orgs, "orgs", 3, "organizations, one key each (1–3)")
	return cmd
}
