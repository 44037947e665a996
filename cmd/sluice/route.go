package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/jsonl"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/plan"
	"github.com/sluice-dev/sluice/route"
)

// routeFlags choose how `sluice run` sends its requests.
type routeFlags struct {
	route      string
	prefer     string
	deadline   time.Duration
	limitsFile string
	chunk      int
	window     int
	stuckAfter time.Duration
}

func (f *routeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.route, "route", "auto", "auto (the planner decides), sync (Messages calls) or batch (Message Batches, half price)")
	fl.StringVar(&f.prefer, "prefer", "latency", "what auto optimises: latency, cost or balanced")
	fl.DurationVar(&f.deadline, "deadline", 0, "the job must finish within this (rules out routes predicted to take longer; bounds batch polling)")
	fl.StringVar(&f.limitsFile, "limits-file", "", "the organizations' limits for the planner (see sluice plan --help); default: read them from one 1-token probe per organization")
	fl.IntVar(&f.chunk, "chunk", 0, "requests per batch (default: the planner's)")
	fl.IntVar(&f.window, "window", 0, "batches in flight per organization (default: the planner's)")
	fl.DurationVar(&f.stuckAfter, "stuck-after", 0, "cancel a batch not ended this long after create and re-drive it on sync (default: the planner's; env SLUICE_BATCH_STUCK_AFTER)")
}

// fromEnv applies SLUICE_BATCH_STUCK_AFTER unless --stuck-after was given.
func (f *routeFlags) fromEnv(cmd *cobra.Command) error {
	v, ok := os.LookupEnv("SLUICE_BATCH_STUCK_AFTER")
	if !ok || cmd.Flags().Changed("stuck-after") {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("SLUICE_BATCH_STUCK_AFTER: %w", err)
	}
	f.stuckAfter = d
	return nil
}

// router returns job.Options.Plan for these flags. With --route auto the
// planner decides from the input's shape and the organizations' limits
// from --limits-file (without one, from the etiquette caps alone: no paid
// probe is sent). world, if set, is the planner's world (the demo's
// simulator), and timeScale the simulator's clock (1 for the real API).
func (f routeFlags) router(ks []*keys.Key, world *plan.World, log *slog.Logger) func(jsonl.Summary, int) (route.Routing, error) {
	return f.routerScaled(ks, world, 1, log)
}

func (f routeFlags) routerScaled(ks []*keys.Key, world *plan.World, timeScale float64, log *slog.Logger) func(jsonl.Summary, int) (route.Routing, error) {
	return route.Planner(route.Options{
		Route: f.route, Prefer: f.prefer, Deadline: f.deadline, Chunk: f.chunk, Window: f.window,
		StuckAfter: f.stuckAfter, TimeScale: timeScale, Log: log,
		World: func() (plan.World, error) { return f.world(ks, world, log) },
	})
}

// world is the planner's view of the organizations: a given world (the
// demo's simulator), --limits-file, or limits probed from live headers.
func (f routeFlags) world(ks []*keys.Key, given *plan.World, log *slog.Logger) (plan.World, error) {
	if given != nil {
		return *given, nil
	}
	if f.limitsFile != "" {
		fh, err := os.Open(f.limitsFile)
		if err != nil {
			return plan.World{}, err
		}
		defer fh.Close()
		return plan.ReadWorld(fh)
	}
	// No paid probe: the organizations' limits are learned from the
	// headers once requests flow. Until then the plan knows the etiquette
	// caps, which bind first on most organizations.
	seen := map[string]bool{}
	var orgs []plan.Org
	for _, k := range ks {
		if dead, _ := k.Dead(); dead || seen[k.Org()] {
			continue
		}
		seen[k.Org()] = true
		orgs = append(orgs, plan.Org{Name: k.Label()})
	}
	log.Info("planning with the etiquette caps only: the organizations' rate limits are not known before the first answers (pass --limits-file for a better plan)")
	return plan.NewWorld("caps only", orgs...), nil
}
