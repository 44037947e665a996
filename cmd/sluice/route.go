package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/jsonl"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/plan"
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
// probe is sent).
func (f routeFlags) router(ks []*keys.Key, world *plan.World, log *slog.Logger) func(jsonl.Summary, int) (job.Routing, error) {
	return func(s jsonl.Summary, pending int) (job.Routing, error) {
		switch f.route {
		case "sync":
			return job.Routing{Route: job.RouteSync, Why: "--route sync"}, nil
		case "batch", "auto":
		default:
			return job.Routing{}, fmt.Errorf("run: --route must be auto, sync or batch, got %q", f.route)
		}
		prio, err := plan.ParsePriority(f.prefer)
		if err != nil {
			return job.Routing{}, err
		}
		model := s.MainModel()
		w, err := f.world(ks, world, log)
		if err != nil {
			return job.Routing{}, err
		}
		j := plan.Job{N: pending, Model: model, MeanInput: s.MeanEstInputTokens(), MaxTokens: int(s.MeanMaxTokens())}
		opts := plan.Options{Priority: prio, Deadline: f.deadline, Chunk: f.chunk, Window: f.window}
		if f.route == "batch" {
			opts.MinBatch = 1
		}
		d, err := plan.Decide(w, j, opts)
		if err != nil {
			return job.Routing{}, err
		}
		for _, warn := range d.Warnings {
			log.Warn("plan: " + warn)
		}
		r := job.Routing{Route: string(d.Route), Why: d.Why, Predicted: d.Wall.Mid}
		if d.Route == plan.RouteSync {
			r.SyncOrgs = d.Orgs // a small job needs fewer organizations
		}
		if f.route == "batch" {
			r.Route, r.Why = job.RouteBatch, "--route batch"
			r.Predicted = d.BatchWall.Mid
			if d.Batch == nil || d.Route != plan.RouteBatch {
				// The planner would not send it all to batch; size the
				// chunks and the window as it would, or as asked.
				br, err := w.SimulateBatch(pending, f.chunk, f.window)
				if err != nil {
					return job.Routing{}, err
				}
				d.Batch = &br
			}
		}
		if pending > 0 && r.Route == job.RouteSplit {
			r.BatchShare = float64(d.BatchN) / float64(pending)
		}
		if r.Route != job.RouteSync {
			// The planner's stuck threshold, floored: against the real API
			// a healthy batch may take far longer than its prediction, and a
			// needless escape re-drives it at full price.
			bc := batch.Config{StuckAfter: max(d.StuckAfter, batch.MinStuckAfter)}
			if d.Batch != nil {
				bc.ChunkSize, bc.WindowByOrg, bc.Turnaround = d.Batch.Chunk, d.Batch.WindowByOrg(), d.Batch.MaxTurnaround
				bc.WindowPerOrg = d.Batch.MinWindowRequests()
			}
			if f.stuckAfter != 0 {
				bc.StuckAfter = f.stuckAfter
			}
			if f.deadline > 0 {
				bc.Deadline = time.Now().Add(f.deadline)
			}
			r.Batch = bc
		}
		log.Info("route chosen", "route", r.Route, "predicted", r.Predicted.Round(time.Second), "why", r.Why)
		return r, nil
	}
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
