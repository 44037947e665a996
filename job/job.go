// Package job runs a requests file to a results file: the Message Batches
// format in (one {"custom_id", "params"} line per request) and out (one
// result line per request), durably, resumable — the library form of
// `sluice run`.
//
// Run sends each request once over every organization's keys (the sync
// lanes of package dispatch, or Message Batches when Route is batch or the
// planner picks them under auto), writes each result line before it counts
// it as done, and stops cleanly on a cancelled context. Running it again on
// the same files sends only what is not done yet.
//
// This package is promised (see the README's Go API): the engine, planner
// and file formats beneath it are internal. Invariants: every valid input
// line ends in exactly one results line, whatever stops a run in between; a
// result line is reported done only once it is durable; key values never
// reach the results file, the report or a log line.
package job

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/dispatch"
	ijob "github.com/sluice-dev/sluice/internal/front/job"
)

// Options configure a run. Input, Output and Dispatch.Keys are required;
// zero fields take the defaults noted.
type Options struct {
	// Input is the requests file, Output the results file (created, or
	// resumed when it exists).
	Input, Output string
	// Dispatch says how to reach the API and with which keys.
	Dispatch dispatch.Config
	// Route is how the requests are sent: sync (the default: Messages
	// calls), batch (Message Batches, half price, slower) or auto (the
	// planner decides from the input's shape and each organization's
	// limits, which it learns with one max_tokens-1 call per organization,
	// and re-plans from what the run measures).
	Route string
	// Prefer is what auto optimises: latency (the default), cost or
	// balanced; Deadline rules out routes predicted to take longer.
	Prefer   string
	Deadline time.Duration
	// SkipInvalid records invalid lines as errored results instead of
	// stopping before anything is sent.
	SkipInvalid bool
	// AllowChanged re-runs requests whose params changed under an id that
	// is already done (the old result is dropped).
	AllowChanged bool
	// MaxCost stops admitting new requests once the run's cost reaches it
	// (USD; 0: no limit). A model without a price counts at the highest
	// prices known, so a cap errs on the side of stopping.
	MaxCost float64
	// Grace bounds how long requests in flight may finish once ctx is
	// cancelled (default 30 s).
	Grace time.Duration
	// Progress, if set, receives a progress line now and then.
	Progress io.Writer
	// Logger receives the run's log; nil discards it.
	Logger *slog.Logger
}

// Report is what a run did.
type Report struct {
	// Route is the route chosen first (sync, batch or split) and why;
	// PredictedSeconds the planner's wall-clock for it (0: none).
	Route, RouteWhy  string
	PredictedSeconds float64
	WallSeconds      float64
	// Stopped says why the run ended early ("": it did not).
	Stopped string
	// The input's requests: all, invalid, already done before this run,
	// done ones driven again, answered by a response cache, and results
	// written this run (durable; FromCache is part of it).
	Total, Invalid, AlreadyDone, Redriven, FromCache, Written int
	// Succeeded counts results this run whose type is succeeded; Final
	// and Transport the errored ones by class (a final error retrying
	// cannot fix; a transport error a re-run drives again).
	Succeeded, Final, Transport int64
	// Answers retried, by class: 429s, 529s, failures (5xx answers, lost
	// connections).
	RateLimited, Overloaded, Failed int64
	ThroughputRPM                   float64
	// BindingLimit names the limit that held the run back most.
	BindingLimit string
	// CostUSD is the run's cost at the catalog's prices; CostKnown is
	// false when a model had no price (CostUSD is then the priced part).
	CostUSD   float64
	CostKnown bool
}

// Run sends the requests of o.Input not yet done in o.Output and writes
// their results. It returns the report and, if the run could not finish,
// why (invalid input lines are listed in the error).
func Run(ctx context.Context, o Options) (*Report, error) {
	opts, err := ijob.Basic(o).Options()
	if err != nil {
		return nil, err
	}
	rep, err := ijob.Run(ctx, opts)
	if rep == nil {
		return nil, err
	}
	r := Report(rep.Brief())
	return &r, err
}
