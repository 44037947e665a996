package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// AutoWorld is a world of `sluice-bench worlds` run as `sluice run --route
// auto` would run it: the planner picks the route (and re-plans) where
// the right answer is not sync.
type AutoWorld struct {
	Name, About string
	Sim         sim.Config
	Workload    workload.Judge
	// Told, if set, is the world the planner is told before the first
	// answer (a stale limits file, observations of another day); nil: the
	// simulator's own configuration.
	Told *sim.Config
	// WantBatch: the right route sends most of the job by batch.
	WantBatch bool
}

// AutoResult is what an AutoWorld measured.
type AutoResult struct {
	World AutoWorld
	// First is the first decision (from the told world); Truth the
	// decision in the world as it is, which the run is measured against.
	First, Truth plan.Decision
	Replans      []job.ReplanReport
	Wall         time.Duration
	// ByBatch is the share of the requests answered by batch.
	ByBatch float64
	Lost    int
}

// InRange reports whether the measured wall-clock is inside the true
// decision's predicted range.
func (r AutoResult) InRange() bool {
	return r.Wall >= r.Truth.Wall.Low && r.Wall <= r.Truth.Wall.High
}

// Met: the run sent most of the job by batch when batch was the right
// answer, lost nothing, and took as long as the planner said.
func (r AutoResult) Met() bool {
	return r.Lost == 0 && r.InRange() && (!r.World.WantBatch || r.ByBatch >= 0.5)
}

// AutoWorlds are the worlds where `--route auto` must leave sync: three
// organizations of 30 RPM each, buckets of 10 s that start empty, time
// scale 10, a judge job sized to about secs × 6 seconds on sync — once
// planned from the world as it is, once from a stale view of a fast world
// that only the first answers correct.
func AutoWorlds(secs float64) []AutoWorld {
	slow := sim.Default()
	slow.TimeScale = 10
	slow.BucketWindow = sim.Duration(10 * time.Second)
	slow.BucketsStartEmpty = true
	for i := range slow.Orgs {
		slow.Orgs[i].Limits = map[api.Pool]sim.Limits{api.PoolSonnet4: {RPM: 30, ITPM: 50_000_000, OTPM: 10_000_000}}
	}
	// 90 RPM in all at time scale 10: 15 requests a real second.
	n := max(1000, int(15*6*secs))
	fast := sim.Default()
	fast.TimeScale = 10
	return []AutoWorld{
		{Name: "low-rpm-batch", About: "3 × 30 RPM, large N: batch is the right answer for latency", Sim: slow,
			Workload: workload.Judge{N: n, Seed: 23}, WantBatch: true},
		{Name: "replan-stale-fast", About: "the same, planned from a stale view of fast organizations: the first answers must re-route it", Sim: slow,
			Workload: workload.Judge{N: n, Seed: 24}, Told: &fast, WantBatch: true},
	}
}

// Run runs the world against a fresh simulator child process of binary,
// through the planner hooks `sluice run --route auto` uses.
func (w AutoWorld) Run(ctx context.Context, binary string, log io.Writer) (AutoResult, error) {
	res := AutoResult{World: w}
	dir, err := os.MkdirTemp("", "sluice-autoworlds-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	wl := w.Workload
	if wl.Model == "" {
		wl.Model = "claude-sonnet-4-5-20250929"
	}
	if wl.MaxTokens == 0 {
		wl.MaxTokens = 256
	}
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := wl.WriteFile(in); err != nil {
		return res, err
	}
	sum, _, err := jsonl.ScanFile(in, 0)
	if err != nil {
		return res, err
	}
	j := plan.Job{N: sum.Valid, Model: sum.MainModel(), MeanInput: sum.MeanEstInputTokens(), MaxTokens: int(sum.MeanMaxTokens() + 0.5)}
	if res.Truth, err = plan.Decide(plan.FromModel(w.Sim.Model(), nil), j, plan.Options{Priority: plan.PreferLatency}); err != nil {
		return res, err
	}
	told := w.Sim
	if w.Told != nil {
		told = *w.Told
	}
	toldWorld := plan.FromModel(told.Model(), nil)
	sp, pool, err := StartSimPool(ctx, binary, w.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	if log == nil {
		log = io.Discard
	}
	logger := slog.New(slog.NewTextHandler(log, nil))
	rt := route.NewRouter(route.Options{Route: "auto", Prefer: "latency", TimeScale: w.Sim.TimeScale, Log: logger,
		World:      func(plan.Job) (plan.World, error) { return toldWorld, nil },
		OnDecision: func(d plan.Decision) { res.First = d }})
	caps := 0
	for _, c := range dispatch.DefaultCaps {
		caps = max(caps, c)
	}
	start := time.Now()
	opts := job.Options{
		Input: in, Output: out, Logger: logger,
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: sp.Base, MaxConns: caps*len(w.Sim.Orgs) + 64}),
			Keys: pool.Keys()},
	}
	opts.RoutedBy(rt)
	rep, err := job.Run(ctx, opts)
	res.Wall = time.Since(start)
	if err != nil {
		return res, err
	}
	res.Replans = rep.Replans
	if n := rep.Requests.Written; n > 0 {
		res.ByBatch = float64(rep.Batch.Results) / float64(n)
	}
	res.Lost, err = lostRequests(out, wl.N)
	return res, err
}

// PrintAutoWorlds writes the auto worlds' table BENCHMARKS.md quotes.
func PrintAutoWorlds(w io.Writer, rs []AutoResult) {
	fmt.Fprintln(w, "| world | requests | first plan | re-plans | right route (predicted range) | sync would take | measured wall | by batch | in range | met |")
	fmt.Fprintln(w, "|---|---:|---|---|---|---:|---:|---:|:-:|:-:|")
	for _, r := range rs {
		re := "none"
		if len(r.Replans) > 0 {
			re = ""
			for i, p := range r.Replans {
				if i > 0 {
					re += "; "
				}
				re += fmt.Sprintf("%s at %.1f s", describeRoute(p.Route, p.BatchShare), p.AtSeconds)
			}
		}
		in, met := "yes", "yes"
		if !r.InRange() {
			in = "**no**"
		}
		if !r.Met() {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %d | %s (%.0f s) | %s | %s, %.0f s (%.0f–%.0f) | %.0f s | %.1f s | %.0f %% | %s | %s |\n",
			r.World.Name, r.World.Workload.N, describeRoute(string(r.First.Route), share(r.First)), r.First.Wall.Mid.Seconds(), re,
			describeRoute(string(r.Truth.Route), share(r.Truth)), r.Truth.Wall.Mid.Seconds(), r.Truth.Wall.Low.Seconds(), r.Truth.Wall.High.Seconds(),
			r.Truth.SyncWall.Mid.Seconds(), r.Wall.Seconds(), 100*r.ByBatch, in, met)
	}
}

func share(d plan.Decision) float64 {
	if n := d.SyncN + d.BatchN; n > 0 {
		return float64(d.BatchN) / float64(n)
	}
	return 0
}

func describeRoute(r string, batchShare float64) string {
	if r == route.Split {
		return fmt.Sprintf("split %.0f %% batch", 100*batchShare)
	}
	return r
}
