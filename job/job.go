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
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/format/results"
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
	// Succeeded counts the API's answers this run whose result type is
	// succeeded (FromCache counts the response cache's); Final and
	// Transport the errored ones by class (a final error retrying
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

// Errors Run returns, for errors.Is and errors.As.
var (
	// ErrInterrupted (wrapped): ctx was cancelled; what was answered is
	// durable, and running again resumes.
	ErrInterrupted = ijob.ErrInterrupted
	// ErrLocked (wrapped): another run is writing the same results file
	// (Run waits up to 10 s first, for a run killed a moment ago whose
	// lock the kernel is still letting go).
	ErrLocked = results.ErrLocked
)

// InvalidInputError lists the invalid lines of an input file; nothing was
// sent (SkipInvalid records them as errored results instead).
type InvalidInputError struct {
	File string
	// Lines are the first invalid lines (50 at most), in file order.
	Lines []InvalidLine
	// Total counts every invalid line, listed or not, of Scanned lines.
	Total, Scanned int
}

// InvalidLine is why one input line is invalid.
type InvalidLine struct {
	Line     int    // 1-based
	CustomID string // "" when it could not be read
	Reason   string
}

func (e *InvalidInputError) Error() string {
	ie := &ijob.InvalidInputError{File: e.File, Total: e.Total, Scanned: e.Scanned}
	for _, l := range e.Lines {
		ie.Errors = append(ie.Errors, jsonl.LineError{Line: l.Line, CustomID: l.CustomID, Reason: l.Reason})
	}
	return ie.Error()
}

// ChangedError lists ids whose request changed since their result was
// written; nothing was sent (AllowChanged sends them again).
type ChangedError struct {
	Output string
	IDs    []string // the first ones
	Total  int
}

func (e *ChangedError) Error() string { return (*ijob.ChangedError)(e).Error() }

// promisedError gives err's internal error types as this package's.
func promisedError(err error) error {
	var ie *ijob.InvalidInputError
	if errors.As(err, &ie) {
		pe := &InvalidInputError{File: ie.File, Total: ie.Total, Scanned: ie.Scanned}
		for _, l := range ie.Errors {
			pe.Lines = append(pe.Lines, InvalidLine{Line: l.Line, CustomID: l.CustomID, Reason: l.Reason})
		}
		return pe
	}
	var ce *ijob.ChangedError
	if errors.As(err, &ce) {
		return (*ChangedError)(ce)
	}
	return err
}

// Run sends the requests of o.Input not yet done in o.Output and writes
// their results. It returns the report and, if the run could not finish,
// why: an *InvalidInputError or a *ChangedError before anything is sent,
// ErrLocked, ErrInterrupted, or what stopped it.
func Run(ctx context.Context, o Options) (*Report, error) {
	opts, closeIdle, err := ijob.Basic(o).Options()
	if err != nil {
		return nil, err
	}
	defer closeIdle()
	rep, err := ijob.Run(ctx, opts)
	err = promisedError(err)
	if rep == nil {
		return nil, err
	}
	r := Report(rep.Brief())
	return &r, err
}
