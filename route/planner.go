package route

// The planner hook: the planner's decision for a surveyed input, as a
// Routing. `sluice run`, `sluice judge`, the demo, the benchmarks and the
// proxy's virtual batches share it, so they all route a job the same way.

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/batch"
	"github.com/sluice-dev/sluice/jsonl"
	"github.com/sluice-dev/sluice/plan"
)

// Options are a run's routing choices (the command's --route, --prefer,
// --deadline, --chunk, --window and --stuck-after).
type Options struct {
	// Route is auto (the planner decides), sync or batch.
	Route string
	// Prefer is what auto optimises: latency, cost or balanced.
	Prefer     string
	Deadline   time.Duration
	Chunk      int
	Window     int
	StuckAfter time.Duration
	// TimeScale is the simulator's (0 or 1 against the real API): the
	// batch path's poll intervals and the stuck floor run on its clock.
	TimeScale float64
	// World returns the planner's view of the organizations for the job
	// (its model and token shape: what a probe of the organizations asks
	// about); called once, when the run has surveyed its input.
	World func(plan.Job) (plan.World, error)
	Log   *slog.Logger
	// OnDecision, if set, sees the planner's decision (benchmarks report
	// it beside the measurement).
	OnDecision func(plan.Decision)
	// Now reads the clock a Deadline counts from (default time.Now).
	Now func() time.Time
}

// Planner returns the hook that routes a surveyed input for o
// (job.Options.Plan, proxy.Config.Plan).
func Planner(o Options) func(jsonl.Summary, int) (Routing, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	k := o.TimeScale
	if k <= 0 {
		k = 1
	}
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) / k) }
	return func(s jsonl.Summary, pending int) (Routing, error) {
		switch o.Route {
		case "sync":
			return Routing{Route: Sync, Why: "--route sync"}, nil
		case "batch", "auto":
		default:
			return Routing{}, fmt.Errorf("--route must be auto, sync or batch, got %q", o.Route)
		}
		prio, err := plan.ParsePriority(o.Prefer)
		if err != nil {
			return Routing{}, err
		}
		j := plan.Job{N: pending, Model: s.MainModel(), MeanInput: s.MeanEstInputTokens(), MaxTokens: int(s.MeanMaxTokens())}
		w, err := o.World(j)
		if err != nil {
			return Routing{}, err
		}
		opts := plan.Options{Priority: prio, Deadline: o.Deadline, Chunk: o.Chunk, Window: o.Window}
		if o.Route == "batch" {
			opts.MinBatch = 1
		}
		d, err := plan.Decide(w, j, opts)
		if err != nil {
			return Routing{}, err
		}
		for _, warn := range d.Warnings {
			o.Log.Warn("plan: " + warn)
		}
		r := Routing{Route: string(d.Route), Why: d.Why, Predicted: d.Wall.Mid}
		if d.Route == plan.RouteSync {
			r.SyncOrgs = d.Orgs // a small job needs fewer organizations
		}
		if o.Route == "batch" {
			r.Route, r.Why = Batch, "--route batch"
			r.Predicted = d.BatchWall.Mid
			if d.Batch == nil || d.Route != plan.RouteBatch {
				// The planner would not send it all to batch; size the
				// chunks and the window as it would, or as asked.
				br, err := w.SimulateBatch(pending, o.Chunk, o.Window)
				if err != nil {
					return Routing{}, err
				}
				d.Batch = &br
			}
		}
		if pending > 0 && r.Route == Split {
			r.BatchShare = float64(d.BatchN) / float64(pending)
		}
		if r.Route != Sync {
			// The planner's stuck threshold, floored: against the real API
			// a healthy batch may take far longer than its prediction, and a
			// needless escape re-drives it at full price.
			bc := batch.Config{StuckAfter: max(d.StuckAfter, scaled(batch.MinStuckAfter))}
			// The batch path polls as the planner modelled it: a world's own
			// schedule (a limits file's poll_min/poll_max, or a simulator's,
			// scaled), else the defaults on the simulator's clock.
			switch p := w.Poll; {
			case p.Min > 0 && (p.Min != plan.DefaultPollMin || p.Max != plan.DefaultPollMax):
				bc.PollMin, bc.PollMax = p.Min, p.Max
			case k != 1:
				bc.PollMin, bc.PollMax = scaled(batch.DefaultPollMin), scaled(batch.DefaultPollMax)
			}
			if d.Batch != nil {
				bc.ChunkSize, bc.WindowByOrg, bc.Turnaround = d.Batch.Chunk, d.Batch.WindowByOrg(), d.Batch.MaxTurnaround
				bc.WindowPerOrg = d.Batch.MinWindowRequests()
			}
			if o.StuckAfter != 0 {
				bc.StuckAfter = o.StuckAfter
			}
			if o.Deadline > 0 {
				bc.Deadline = o.Now().Add(o.Deadline)
			}
			r.Batch = bc
		}
		if o.OnDecision != nil {
			o.OnDecision(d)
		}
		o.Log.Info("route chosen", "route", r.Route, "predicted", r.Predicted.Round(time.Second), "why", r.Why)
		return r, nil
	}
}
