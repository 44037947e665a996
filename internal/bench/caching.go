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

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/cost"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/workload"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/sim"
)

// CachingRun is `sluice bench caching` (issue 16): a job whose requests
// share a long system prompt, on three organizations bound by ITPM, run on
// the sync route with --cache-prefix off and auto.
type CachingRun struct {
	Binary string
	N      int
	// PrefixTokens is the shared system prompt's size, OwnTokens each
	// request's own input (both approximate, by the chars ÷ 4 rule).
	PrefixTokens, OwnTokens int
	// TimeScale runs the simulator that many times fast (limits × K).
	TimeScale float64
	Log       io.Writer
}

// CachingResult is one arm.
type CachingResult struct {
	Arm    string // "off" or "auto"
	Wall   time.Duration
	Steady float64 // req/s between 10 % and 90 % durable
	Tokens cost.Tokens
	// InputUSD prices the input categories only (uncached, cache writes,
	// cache reads); TotalUSD adds output.
	InputUSD, TotalUSD float64
	Lost               int
	Binding            string // what the run's report says held it back
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
	return cfg
}

// Run runs one arm in a fresh simulator child process.
func (c CachingRun) Run(ctx context.Context, off bool) (CachingResult, error) {
	res := CachingResult{Arm: "auto"}
	if off {
		res.Arm = "off"
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
	start := time.Now()
	rep, err := job.Run(ctx, job.Options{
		Input: in, Output: out, Logger: slog.New(slog.NewTextHandler(log, nil)), CachePrefixOff: off,
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: sp.Base, MaxConns: 100*len(cfg.Orgs) + 64}),
			Keys: pool.Keys()},
		OnDurable: steady.observe,
	})
	res.Wall = time.Since(start)
	if err != nil {
		return res, err
	}
	res.Steady = steady.rate()
	res.Binding = rep.BindingLimit
	res.Tokens = rep.Cost.Total.Tokens
	res.TotalUSD = rep.Cost.Total.USD
	input := res.Tokens
	input.Output = 0
	res.InputUSD, _ = cost.TokensCost(model, input, false)
	if res.Lost, err = lostRequests(out, c.N); err != nil {
		return res, err
	}
	return res, nil
}

// PrintCaching writes the table BENCHMARKS.md quotes.
func PrintCaching(w io.Writer, c CachingRun, rs []CachingResult) {
	fmt.Fprintf(w, "%d requests, a %d-token shared system prompt and ~%d tokens of their own, three orgs ITPM-bound (300k / 225k / 150k), sync route, time scale %g\n\n",
		c.N, c.PrefixTokens, c.OwnTokens, c.TimeScale)
	fmt.Fprintln(w, "| --cache-prefix | wall | steady req/s | binding (the run's report) | input tokens: uncached / written / read | hit rate | input cost | total cost | lost |")
	fmt.Fprintln(w, "|---|---:|---:|---|---|---:|---:|---:|---:|")
	for _, r := range rs {
		t := r.Tokens
		fmt.Fprintf(w, "| %s | %.1f s | %.0f | %s | %d / %d / %d | %.1f %% | $%.2f | $%.2f | %d |\n", r.Arm, r.Wall.Seconds(), r.Steady, r.Binding,
			t.Input, t.CacheWrite5m+t.CacheWrite1h, t.CacheRead, 100*r.HitRate(), r.InputUSD, r.TotalUSD, r.Lost)
	}
	if len(rs) == 2 && rs[0].Steady > 0 && rs[0].InputUSD > 0 {
		fmt.Fprintf(w, "\nauto ÷ off: throughput ×%.2f (steady), wall ×%.2f; input cost −%.0f %%\n",
			rs[1].Steady/rs[0].Steady, rs[0].Wall.Seconds()/rs[1].Wall.Seconds(), 100*(1-rs[1].InputUSD/rs[0].InputUSD))
	}
}
