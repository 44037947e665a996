package job

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	engine "github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// Basic is the shape of the promised job.Options (the package job at the
// module's root converts its Options to Basic field for field, as does
// judgejob's): the choices a library caller makes. Options turns it into a
// run's Options with the engine, the planner and its world wired as
// `sluice run` wires them, minus what only the command has (the
// observations file, the live view, key rotation).
type Basic struct {
	Input, Output string
	Dispatch      dispatch.Config
	Route         string
	Prefer        string
	Deadline      time.Duration
	SkipInvalid   bool
	AllowChanged  bool
	MaxCost       float64
	Grace         time.Duration
	Progress      io.Writer
	Logger        *slog.Logger
}

// Options is the run's configuration for b, and what to call once the run
// is over (it closes the connections the run kept alive). Its route is
// b.Route (sync by default); auto and batch ask the planner, whose world is
// one small probe of each organization (docs/observe.md: a max_tokens-1
// call), as `sluice run` plans with no observations file. As the command does, it
// hides the keys' values from the log and from the results file (a gateway
// may echo a key) and waits up to 10 s for a results file's lock held by a
// run just killed.
func (b Basic) Options() (Options, func(), error) {
	switch b.Route {
	case "":
		b.Route = "sync"
	case "sync", "batch", "auto":
	default:
		return Options{}, nil, fmt.Errorf("job: Route must be sync, batch or auto, got %q", b.Route)
	}
	if b.Prefer == "" {
		b.Prefer = "latency"
	}
	if _, err := plan.ParsePriority(b.Prefer); err != nil {
		return Options{}, nil, fmt.Errorf("job: Prefer: %w", err)
	}
	eo := engine.Options(b.Dispatch)
	log := eo.RedactLog(b.Logger)
	if eo.Logger == nil {
		eo.Logger = log
	} else {
		eo.Logger = eo.RedactLog(eo.Logger)
	}
	c := eo.Client()
	o := Options{Input: b.Input, Output: b.Output, Dispatch: eo.Config(c), SkipInvalid: b.SkipInvalid,
		AllowChanged: b.AllowChanged, MaxCost: b.MaxCost, Grace: b.Grace, Progress: b.Progress, Logger: log,
		Redact: eo.Redactor(), LockWait: 10 * time.Second}
	o.RoutedBy(route.NewRouter(route.Options{Route: b.Route, Prefer: b.Prefer, Deadline: b.Deadline, Log: log,
		World: observe.Probed(b.Dispatch.Keys, c, log)}))
	return o, c.CloseIdle, nil
}

// Brief is the shape of the promised job.Report (which converts from it
// field for field): a report's figures, flat.
type Brief struct {
	Route, RouteWhy                                           string
	PredictedSeconds                                          float64
	WallSeconds                                               float64
	Stopped                                                   string
	Total, Invalid, AlreadyDone, Redriven, FromCache, Written int
	Succeeded, Final, Transport                               int64
	RateLimited, Overloaded, Failed                           int64
	ThroughputRPM                                             float64
	BindingLimit                                              string
	CostUSD                                                   float64
	CostKnown                                                 bool
}

// Brief is r's figures, flat.
func (r *Report) Brief() Brief {
	q := r.Requests
	return Brief{Route: r.Route, RouteWhy: r.RouteWhy, PredictedSeconds: r.PredictedSeconds, WallSeconds: r.WallSeconds,
		Stopped: r.Stopped, Total: q.Total, Invalid: q.Invalid, AlreadyDone: q.AlreadyDone, Redriven: q.Redriven,
		FromCache: q.FromCache, Written: q.Written, Succeeded: r.Succeeded,
		Final: r.Errored.Final, Transport: r.Errored.Transport,
		RateLimited: r.Retries.RateLimited, Overloaded: r.Retries.Overloaded, Failed: r.Retries.Failed,
		ThroughputRPM: r.ThroughputRPM, BindingLimit: r.BindingLimit,
		CostUSD: r.Cost.Total.USD, CostKnown: r.Cost.Total.Known()}
}
