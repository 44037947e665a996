package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/sim"
)

// benchPredictCmd is `sluice-bench predict`: the planner's wall-clock
// against the measured one, on the sync route at N = 10 … 100,000 and on
// the batch route at a few N.
func benchPredictCmd() *cobra.Command {
	var (
		syncScale, batchScale float64
		syncN, batchN         []int
		write                 string
		seed                  uint64
	)
	cmd := &cobra.Command{
		Use:   "predict",
		Short: "Predicted vs measured wall-clock on the sync and batch routes (three-org preset)",
		Long: `predict runs judge-shaped jobs through the code of 'sluice run' against a
'sluice sim' child process on the three-org preset: forced onto the sync route
at each --sync-n (time scale --time-scale), then onto the batch route at each
--batch-n (time scale --batch-time-scale, large, so that simulated hours take
seconds). For each run it prints what the planner predicted inside the run's
Plan hook, what the run measured, their ratio and whether it is within ±10 %,
as a markdown table. --write FILE replaces (or appends) the section
"## Prediction vs measurement" of FILE.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			var cells []bench.PredictCell
			for _, n := range syncN {
				cells = append(cells, bench.PredictCell{Route: route.Sync, N: n, TimeScale: syncScale})
			}
			for _, n := range batchN {
				cells = append(cells, bench.PredictCell{Route: route.Batch, N: n, TimeScale: batchScale})
			}
			if len(cells) == 0 {
				return errors.New("bench predict: no cells (--sync-n and --batch-n are both empty)")
			}
			for _, c := range cells {
				if c.N < 1 || c.TimeScale <= 0 {
					return fmt.Errorf("bench predict: N must be >= 1 and time scales > 0 (got N %d, K %g)", c.N, c.TimeScale)
				}
			}
			p := bench.PredictRun{Binary: bin, Sim: sim.Default(), Seed: seed}
			log := cmd.ErrOrStderr()
			var results []bench.PredictResult
			began := time.Now()
			for _, c := range cells {
				fmt.Fprintf(log, "bench predict: %s N=%d at time scale %g … ", c.Route, c.N, c.TimeScale)
				r, err := p.Run(cmd.Context(), c)
				if err != nil {
					fmt.Fprintln(log)
					return fmt.Errorf("bench predict: %s N=%d: %w", c.Route, c.N, err)
				}
				fmt.Fprintf(log, "predicted %s, measured %s (×%.2f)\n",
					r.Predicted.Mid.Round(time.Millisecond), r.Wall.Round(time.Millisecond), r.Ratio())
				results = append(results, r)
			}
			fmt.Fprintf(log, "bench predict: %d runs in %s\n", len(results), time.Since(began).Round(time.Second))
			var b bytes.Buffer
			bench.WritePredictTable(&b, results, "sluice "+strings.Join(os.Args[1:], " "), time.Now())
			if _, err := cmd.OutOrStdout().Write(b.Bytes()); err != nil {
				return err
			}
			if write == "" {
				return nil
			}
			old, err := os.ReadFile(write)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return os.WriteFile(write, []byte(bench.ReplaceSection(string(old), bench.PredictSection, b.String())), 0o644)
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&syncScale, "time-scale", 3, "simulator time scale of the sync runs")
	fl.Float64Var(&batchScale, "batch-time-scale", 120, "simulator time scale of the batch runs")
	fl.IntSliceVar(&syncN, "sync-n", []int{10, 100, 1000, 10000, 100000}, "N of the sync runs")
	fl.IntSliceVar(&batchN, "batch-n", []int{500, 2000, 10000}, "N of the batch runs")
	fl.StringVar(&write, "write", "", "replace or append the section \""+bench.PredictSection+"\" of this markdown file")
	fl.Uint64Var(&seed, "seed", 21, "seed of the judge workload")
	return cmd
}
