package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

// routeFlags choose how `sluice run` sends its requests.
type routeFlags struct {
	route      string
	prefer     string
	deadline   time.Duration
	limitsFile string
	// observations is the observations file (docs/observe.md); noProbe
	// refuses the limits probe of an organization it knows nothing of.
	observations string
	noProbe      bool
	chunk        int
	window       int
	stuckAfter   time.Duration
}

func (f *routeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.route, "route", "auto", "auto (the planner decides), sync (Messages calls) or batch (Message Batches, half price)")
	fl.StringVar(&f.prefer, "prefer", "latency", "what auto optimises: latency, cost or balanced")
	fl.DurationVar(&f.deadline, "deadline", 0, "the job must finish within this (rules out routes predicted to take longer; bounds batch polling)")
	fl.StringVar(&f.limitsFile, "limits-file", "", "the organizations' limits for the planner (see sluice plan --help); default: what earlier runs observed (--observations), else one max_tokens-1 probe per organization")
	registerObserveFlags(fl, &f.observations, &f.noProbe)
	fl.IntVar(&f.chunk, "chunk", 0, "requests per batch (default: the planner's)")
	fl.IntVar(&f.window, "window", 0, "batches in flight per organization (default: the planner's)")
	fl.DurationVar(&f.stuckAfter, "stuck-after", 0, "cancel a batch not ended this long after create and re-drive it on sync (default: the planner's; env SLUICE_BATCH_STUCK_AFTER)")
}

// registerObserveFlags registers --observations and --no-probe, for every
// command whose planner reads the observations (run, judge, plan, proxy).
func registerObserveFlags(fl *pflag.FlagSet, path *string, noProbe *bool) {
	fl.StringVar(path, "observations", observe.DefaultPath(), "what runs observed of each organization (limits, latency, answer lengths), read by the planner and written when a run or the proxy ends (env SLUICE_OBSERVATIONS; empty: off)")
	fl.BoolVar(noProbe, "no-probe", false, "never send the planner's limits probe (one max_tokens-1 Messages call per organization not yet observed); plan those organizations from the etiquette caps")
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
// planner decides from the input's shape and the organizations' limits:
// from --limits-file, else what earlier runs observed, else one probe per
// organization (docs/observe.md). world, if set, is the planner's world
// (the demo's simulator), and timeScale the simulator's clock (1 for the
// real API). c sends the probes (nil: none).
// The Router is wired into a run with job.Options.RoutedBy (`--route
// auto` re-plans once the first answers are in: docs/route.md).
func (f routeFlags) router(ks []*keys.Key, c *client.Client, world *plan.World, log *slog.Logger) *route.Router {
	return f.routerScaled(ks, c, world, 1, log)
}

func (f routeFlags) routerScaled(ks []*keys.Key, c *client.Client, world *plan.World, timeScale float64, log *slog.Logger) *route.Router {
	return route.NewRouter(route.Options{
		Route: f.route, Prefer: f.prefer, Deadline: f.deadline, Chunk: f.chunk, Window: f.window,
		StuckAfter: f.stuckAfter, TimeScale: timeScale, Log: log,
		World: func(j plan.Job) (plan.World, error) { return f.world(ks, c, world, j, log) },
	})
}

// world is the planner's view of the organizations for job j: a given
// world (the demo's simulator), --limits-file, or the observations of the
// keys' organizations (probing those never seen, unless --no-probe).
func (f routeFlags) world(ks []*keys.Key, c *client.Client, given *plan.World, j plan.Job, log *slog.Logger) (plan.World, error) {
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
	o := observe.WorldOptions{Path: f.observations, Off: f.observations == "", Keys: ks, Client: c, NoProbe: f.noProbe,
		Model: j.Model, MaxTokens: j.MaxTokens, Log: log}
	w, prov, err := observe.ForKeys(context.Background(), o)
	if err != nil {
		return plan.World{}, err
	}
	for _, line := range prov {
		log.Info("plan: " + line)
	}
	return w, nil
}

// observer returns job.Options.Observe for these flags: the run's lanes
// and batch turnaround recorded in the observations file for the next
// plan (nil when --observations is empty). A failure to record is a
// warning: the run's results are not at stake.
func (f routeFlags) observer(log *slog.Logger) func([]dispatch.LaneView, batch.Stats, int) {
	if f.observations == "" {
		return nil
	}
	return func(views []dispatch.LaneView, bs batch.Stats, maxTokens int) {
		recordObservations(f.observations, views, bs, maxTokens, log)
	}
}

// recordObservations merges lanes' views and a batch path's turnaround
// into the observations file at
// path.
func recordObservations(path string, views []dispatch.LaneView, bs batch.Stats, maxTokens int, log *slog.Logger) {
	now := time.Now()
	readErr, err := observe.RecordRun(path, now, observe.FromLanes(views, maxTokens, now), observe.FromBatch(bs, now))
	if readErr != nil {
		log.Warn("the observations file was unreadable and is replaced", "err", readErr)
	}
	if err != nil {
		log.Warn("observations not recorded", "err", err)
	}
}
