// Package judgejob runs LLM-as-judge jobs: items and a rubric in, one
// classified verdict per item and per-group summaries out — the library
// form of `sluice judge`, over the same engine, planner, resume, cost
// accounting and response cache as package job.
//
// Its two entry points are promised (see the README's Go API): Judge for
// items held in memory, RunFile for an items file of any size. Config is a
// struct so fields can be added without breaking a call site.
//
// Files, for an output path OUT (verdicts):
//
//	OUT                  one verdict per judged item (rewritten atomically at the end)
//	OUT.requests.jsonl   the Messages requests, rebuilt from the items every run
//	OUT.results.jsonl    the raw results (job's resumable results file)
//	OUT.judge.json       the rubric fingerprint and model the results were made with
//
// Re-running the same call resumes: items already judged are kept,
// transport-class rows are driven again, and Redrive names other classes
// to ask again (parse_error, truncated, refused).
package judgejob

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/internal/front/job"
	ijudge "github.com/sluice-dev/sluice/internal/front/judgejob"
	"github.com/sluice-dev/sluice/internal/store/cache"
	pjob "github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/judge"
)

// Config is one judge job.
type Config struct {
	// Rubric is what the judge is asked (default judge.DefaultRubric()).
	Rubric *judge.Rubric
	// Model (default judge.DefaultModel), MaxTokens (default 256) and
	// Temperature (nil: the API's default) are the request's parameters.
	Model       string
	MaxTokens   int
	Temperature *float64
	// Output is the verdicts file; the work files live beside it (see the
	// package doc). Judge may leave it empty: a temporary directory is
	// used and removed, and the job cannot be resumed.
	Output string
	// Redrive asks again the items whose verdict is of these classes
	// (transport is always re-driven). Their requests skip the cache.
	Redrive []judge.Class
	// KeepRaw keeps the reply text in every verdict, not only in
	// parse_error and truncated ones.
	KeepRaw bool
	// CacheFile, if set, is a response cache (created if missing): it
	// answers requests it holds without a call and stores new answers
	// under the rubric's fingerprint (never a non-answer). One process at
	// a time may hold it.
	CacheFile string
	// Job is the run's configuration: Dispatch (the API and its keys) is
	// required; Input and Output are the judge job's own and are ignored.
	Job pjob.Options
}

// Result is what a judge job produced.
type Result struct {
	// Verdicts, from Judge only: one per item that has a result, in item
	// order. RunFile streams them to Config.Output instead.
	Verdicts []judge.Verdict
	// Summary counts every verdict of this job's items by group.
	Summary judge.Summary
	// Judged is the number of verdicts written; Pending the items with no
	// result yet (the run was interrupted: re-run to resume).
	Judged, Pending int
	// Rubric is the rubric's fingerprint.
	Rubric string
	// Report is the engine's report of this run (nil when the job failed
	// before sending).
	Report *pjob.Report
}

// ItemError lists the items that cannot be judged; nothing was sent.
type ItemError struct {
	Source string
	Lines  []string // "line N: reason", the first 50
	Total  int      // how many items cannot be judged
}

func (e *ItemError) Error() string { return (*ijudge.ItemError)(e).Error() }

// ErrOtherRubric is returned (wrapped) when the output's results were made
// with another rubric or model: judge into another output, or remove the
// old one.
var ErrOtherRubric = ijudge.ErrOtherRubric

// Judge judges items held in memory and returns their verdicts in item
// order.
func Judge(ctx context.Context, items []judge.Item, cfg Config) (*Result, error) {
	return run(cfg, func(c ijudge.Config) (*ijudge.Result, error) { return ijudge.Judge(ctx, items, c) })
}

// RunFile judges the items of the JSONL file at path — one judge.Item a
// line: {"id": …, "groups": […], and the fields the rubric's template
// names, "question" and "completion" for the default rubric} — into
// cfg.Output, which is required.
func RunFile(ctx context.Context, path string, cfg Config) (*Result, error) {
	return run(cfg, func(c ijudge.Config) (*ijudge.Result, error) { return ijudge.RunFile(ctx, path, c) })
}

func run(cfg Config, do func(ijudge.Config) (*ijudge.Result, error)) (*Result, error) {
	opts, closeIdle, err := job.Basic(cfg.Job).Options()
	if err != nil {
		return nil, err
	}
	defer closeIdle()
	ic := ijudge.Config{Rubric: cfg.Rubric, Model: cfg.Model, MaxTokens: cfg.MaxTokens, Temperature: cfg.Temperature,
		Output: cfg.Output, Redrive: cfg.Redrive, KeepRaw: cfg.KeepRaw, Engine: opts}
	if cfg.CacheFile != "" {
		c, err := cache.Open(cfg.CacheFile, cache.On)
		if err != nil {
			return nil, fmt.Errorf("judgejob: the response cache: %w", err)
		}
		defer c.Close()
		ic.Cache = c
	}
	res, err := do(ic)
	var ie *ijudge.ItemError
	if errors.As(err, &ie) {
		err = (*ItemError)(ie)
	}
	if res == nil {
		return nil, err
	}
	out := &Result{Verdicts: res.Verdicts, Summary: res.Summary, Judged: res.Judged, Pending: res.Pending, Rubric: res.Rubric}
	if res.Report != nil {
		r := pjob.Report(res.Report.Brief())
		out.Report = &r
	}
	return out, err
}
