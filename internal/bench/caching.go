package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// CachingRun is `sluice-bench caching` (issue 16): a job whose requests
// share a long system prompt, on three organizations bound by ITPM, run on
// the sync route and on the batch route, each with --cache-prefix off and
// auto.
type CachingRun struct {
	Binary string
	N      int
	// PrefixTokens is the shared system prompt's size, OwnTokens each
	// request's own input (both approximate, by the chars ÷ 4 rule).
	PrefixTokens, OwnTokens int
	// TimeScale runs the simulator that many times fast (limits × K).
	TimeScale float64
	// PrimeHit, on the batch route, is the world's share of batch rows
	// that read a prefix only a sync primer wrote (sim batch.prime_hit);
	// users measured 0–16 %, the simulator's default is 0.8.
	PrimeHit float64
	// CacheHit, on the batch route, is the world's share of batch rows
	// that read a prefix a batch warmed before theirs began (sim
	// batch.cache_hit); the docs say 30–98 %, users measured 100 %.
	CacheHit float64
	Log      io.Writer
}

// CachingResult is one arm.
type CachingResult struct {
	Arm    string // the --cache-prefix value: "off", "auto" or "batch"
	Route  string // "sync" or "batch"
	Wall   time.Duration
	Steady float64 // req/s between 10 % and 90 % durable
	Tokens cost.Tokens
	// InputUSD prices the input categories only (uncached, cache writes,
	// cache reads); TotalUSD adds output.
	InputUSD, TotalUSD float64
	Lost               int
	Binding            string // what the run's report says held it back
	// Primers, Seeds and BatchHitRate: the batch route's sync primers, its
	// one-request seed batches, and the share of its batch rows' cacheable
	// input read (the report's); AsWritten the requests the batch runner
	// sent without the added breakpoint (their org not batch-warm).
	Primers, Seeds, AsWritten int64
	BatchHitRate              float64
	// Predicted is the planner's wall-clock range for the arm's route
	// and PredictedUSD its cost, decided in the run's Plan hook as
	// `sluice run` would (the survey's shared prefix included).
	Predicted    plan.Range
	PredictedUSD float64
}

// HitRate is the share of prefix-bearing input read from the cache.
func (r CachingResult) HitRate() float64 {
	all := r.Tokens.CacheRead + r.Tokens.CacheWrite5m + r.Tokens.CacheWrite1h
	if all == 0 {
		return 0
	}
	return float64(r.Tokens.CacheRead) / float64(all)
}

// cachingWorld is three orgs ITPM-bound at 300k / 225k / 150k (RPM and
// OTPM far above), buckets of 10 s that start empty (a full bucket's burst
// would hide the pacing).
func (c CachingRun) cachingWorld() sim.Config {
	cfg := sim.Default()
	cfg.TimeScale = c.TimeScale
	cfg.BucketWindow = sim.Duration(10 * time.Second)
	cfg.BucketsStartEmpty = true
	for i := range cfg.Orgs {
		cfg.Orgs[i].Limits = cloneLimits(cfg.Orgs[i].Limits)
	}
	itpmBound(&cfg)
	cfg.Batch.PrimeHit, cfg.Batch.CacheHit = c.PrimeHit, c.CacheHit
	return cfg
}

// Run runs one arm in a fresh simulator child process, on the batch
// route when batchRoute (chunks of 500, as `sluice run` polls them on the
// simulator's clock), else on sync.
func (c CachingRun) Run(ctx context.Context, off, batchRoute bool) (CachingResult, error) {
	res := CachingResult{Arm: "auto", Route: route.Sync}
	if batchRoute && !off {
		res.Arm = "batch"
	}
	if off {
		res.Arm = "off"
	}
	if batchRoute {
		res.Route = fmt.Sprintf("%s (prime_hit %g, cache_hit %g)", route.Batch, c.PrimeHit, c.CacheHit)
	}
	dir, err := os.MkdirTemp("", "sluice-caching-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	const model = "claude-sonnet-4-5-20250929"
	words := strings.Fields("judge the answer against the reference for accuracy completeness and clarity citing evidence")
	var sys strings.Builder
	for i := 0; sys.Len() < 4*c.PrefixTokens; i++ {
		sys.WriteString(words[i%len(words)])
		sys.WriteByte(' ')
	}
	wl := workload.Judge{N: c.N, Model: model, MaxTokens: 64, Seed: 16, System: sys.String(),
		InputMin: c.PrefixTokens + c.OwnTokens*9/10, InputMax: c.PrefixTokens + c.OwnTokens*11/10}
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := wl.WriteFile(in); err != nil {
		return res, err
	}
	cfg := c.cachingWorld()
	sp, pool, err := StartSimPool(ctx, c.Binary, cfg, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	log := c.Log
	if log == nil {
		log = io.Discard
	}
	steady := newSteadyWindow(c.N)
	o := job.Options{
		Input: in, Output: out, Logger: slog.New(slog.NewTextHandler(log, nil)), CachePrefixOff: off,
		CachePrefixBatch: batchRoute && !off, // the batch arm's "auto" is --cache-prefix batch
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: sp.Base, MaxConns: 100*len(cfg.Orgs) + 64}),
			Keys: pool.Keys()},
		OnDurable: steady.observe,
	}
	forced := route.Sync
	if batchRoute {
		forced = route.Batch
	}
	world := plan.FromModel(cfg.Model(), nil)
	o.Plan = func(s jsonl.Summary, pending int) (route.Routing, error) {
		rt, d, rng, err := predictRouting(world, forced, s, pending, c.TimeScale)
		res.Predicted, res.PredictedUSD = rng, d.SyncCost
		if batchRoute { // the forced route's, whichever the decision preferred
			res.PredictedUSD = d.BatchCost
		}
		return rt, err
	}
	start := time.Now()
	rep, err := job.Run(ctx, o)
	res.Wall = time.Since(start)
	if err != nil {
		return res, err
	}
	res.Steady = steady.rate()
	res.Binding = rep.BindingLimit
	res.Primers, res.BatchHitRate = rep.PromptCache.Primers, rep.PromptCache.BatchHitRate()
	res.Seeds, res.AsWritten = rep.Batch.Seeds, rep.Batch.AsWritten
	res.Tokens = rep.Cost.Total.Tokens
	res.TotalUSD = rep.Cost.Total.USD
	// The input cost is the run's exact cost less its output's: on the
	// batch route the primers' input is billed at the sync price, which
	// the ledger knows (their one output token each is priced as batch
	// here, a few millionths of a dollar off).
	output := cost.Tokens{Output: res.Tokens.Output}
	outUSD, _ := cost.TokensCost(model, output, batchRoute)
	res.InputUSD = res.TotalUSD - outUSD
	if res.Lost, err = lostRequests(out, c.N); err != nil {
		return res, err
	}
	return res, nil
}

// PrintCaching writes the table BENCHMARKS.md quotes: rows in pairs
// (off, auto) per route.
func PrintCaching(w io.Writer, c CachingRun, rs []CachingResult) {
	fmt.Fprintf(w, "%d requests, a %d-token shared system prompt and ~%d tokens of their own, three orgs ITPM-bound (300k / 225k / 150k), time scale %g\n\n",
		c.N, c.PrefixTokens, c.OwnTokens, c.TimeScale)
	fmt.Fprintln(w, "| route | --cache-prefix | wall | predicted wall | steady req/s | binding (the run's report) | input tokens: uncached / written / read | hit rate | batch primers / seeds / sent as written | input cost | total cost | predicted cost | lost |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		t := r.Tokens
		fmt.Fprintf(w, "| %s | %s | %.1f s | %.1f s (%.1f–%.1f) | %.0f | %s | %d / %d / %d | %.1f %% | %d / %d / %d | $%.2f | $%.2f | $%.2f | %d |\n", r.Route, r.Arm, r.Wall.Seconds(),
			r.Predicted.Mid.Seconds(), r.Predicted.Low.Seconds(), r.Predicted.High.Seconds(), r.Steady, r.Binding,
			t.Input, t.CacheWrite5m+t.CacheWrite1h, t.CacheRead, 100*r.HitRate(), r.Primers, r.Seeds, r.AsWritten, r.InputUSD, r.TotalUSD, r.PredictedUSD, r.Lost)
	}
	fmt.Fprintln(w)
	for i := 0; i+1 < len(rs); i += 2 {
		off, auto := rs[i], rs[i+1]
		if off.Steady <= 0 || off.InputUSD <= 0 || auto.Wall <= 0 {
			continue
		}
		fmt.Fprintf(w, "%s, %s ÷ off: throughput ×%.2f (steady), wall ×%.2f; input cost %+.0f %%", auto.Route, auto.Arm,
			auto.Steady/off.Steady, off.Wall.Seconds()/auto.Wall.Seconds(), 100*(auto.InputUSD/off.InputUSD-1))
		if strings.HasPrefix(auto.Route, route.Batch) {
			fmt.Fprintf(w, "; batch rows' hit rate %.1f %% after %d primers and %d seeds", 100*auto.BatchHitRate, auto.Primers, auto.Seeds)
		}
		fmt.Fprintln(w)
	}
}
