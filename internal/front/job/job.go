// Package job runs one `sluice run`: it validates the input, resumes from
// what the results file already holds, discovers the keys' organizations,
// streams the remaining requests through the dispatcher, and writes each
// result durably before it counts as done.
//
// Resume is re-running the same command: ids already in the results file
// are skipped, a torn last line is repaired, rows that ran out of retries on
// transport trouble are driven again, and a changed request under a
// completed id is refused unless AllowChanged.
package job

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/keys"
)

// Options configure a run.
type Options struct {
	Input, Output string
	// SkipInvalid records invalid lines as errored results instead of
	// stopping before anything is sent.
	SkipInvalid bool
	// AllowChanged re-runs requests whose params changed under an id that
	// is already done (the old result is dropped).
	AllowChanged bool
	// MaxCost stops admitting new requests once the ledger reaches it (USD;
	// 0 = no limit). Requests of a model without a price count at the
	// catalog's highest prices (cost.Ledger.Bound): a cap errs on the side
	// of stopping.
	MaxCost float64
	// Dispatch configures the engine; Client and Keys are required.
	Dispatch dispatch.Config
	// Grace bounds how long requests in flight may finish after the
	// context is cancelled (default 30 s); Abort cuts it short.
	Grace time.Duration
	// Abort, when closed, cancels requests in flight at once.
	Abort <-chan struct{}
	// Progress receives the live display (Terminal) or periodic log lines.
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
	// Command is how the user ran sluice, for the resume hint.
	Command string
	Logger  *slog.Logger
	// LockWait is how long the run waits for another holder of the
	// results file's lock before it refuses (results.LockWait; the log
	// says it waits): a run killed a moment ago may still hold it while
	// the kernel tears it down. Zero refuses at once; the CLI waits 10 s.
	LockWait time.Duration
	// SyncOff disables fsync: results and the batch journal are not
	// durable across a crash (tests on a throwaway directory).
	SyncOff bool
	// MaxErrors is how many invalid lines are listed (default 50).
	MaxErrors int
	// Rotations, if set, brings the changes of re-read key sources
	// (SIGHUP, the keys file changed) while the job runs: new keys join
	// after a probe, removed keys take no new request and their requests
	// in flight finish (dispatch.Rotator: a removed key stays until its
	// organization has another working key).
	Rotations <-chan keys.Rotation
	// Redact, if set, scrubs key values from error text before it is
	// logged or written (keys.Pool.Redact): a gateway may echo a key.
	Redact func(string) string
	// Plan, if set, picks the route once the input has been surveyed
	// (route.Planner: `run --route auto`); nil means the sync route.
	Plan func(s jsonl.Summary, pending int) (route.Routing, error)
	// Replan, if set, is asked about once a second (ReplanInterval) for a
	// new routing of the requests not yet sent (route.Router.Replan: `run
	// --route auto`); the run applies it with route.Fanout.Reroute. Nil: the
	// first routing holds for the whole run.
	Replan func(route.Measure) (route.Routing, bool)
	// ReplanRefused, if set, is told a routing Replan returned that the run
	// could not apply (route.Fanout.Reroute refused it), so the planner
	// puts its previous plan back in force (route.Router.Refused).
	ReplanRefused  func(route.Routing)
	ReplanInterval time.Duration
	// OnDurable, if set, is told the running count of results made
	// durable this run, after each commit (benchmarks time with it).
	OnDurable func(total int64)

	// CachePrefixOff leaves every request as written. Otherwise (`run
	// --cache-prefix auto`, the default) a prompt prefix that pending
	// requests share and that reaches the model's minimum cacheable length
	// gets one cache_control breakpoint at its end in what is sent (5 min
	// on the sync route, 1 h on the batch route), unless the request has
	// a breakpoint of its own, and the dispatcher warms it once per
	// organization (docs/caching.md). The request as written is what the
	// results file and the response cache key on; the results line says
	// what was added (sluice.cache_prefix).
	CachePrefixOff bool
	// CachePrefixBatch (`--cache-prefix batch`) caches the shared prefix
	// on the batch route too (1 h, each org primed before its batches).
	// Not the default: whether batch rows read a sync-primed prefix is the
	// API's to decide, and when they read little the 1 h writes make a
	// batch job cost more (docs/caching.md, "The batch route is opt-in",
	// has the measurements).
	CachePrefixBatch bool

	// Cache, if set (and not Off), answers requests it holds without a
	// call — the row is written with route "cache" and costs nothing —
	// and, unless read-only, stores every new answer (never a non-answer:
	// see package cache). Requests are looked up by
	// cache.KeyOf(params, CacheExtra...).
	Cache      *cache.Cache
	CacheExtra []string
	// Redrive, if set, is the caller's policy for rows the results file
	// already holds, on top of the engine's own (transport-class rows are
	// always driven again). The judge's --redrive sets it.
	Redrive Redrive
	// Observe, if set, is given every lane's final view, the batch path's
	// stats (their turnaround) and the input's mean max_tokens when the run
	// ends (sent or not: a run interrupted halfway observed as much as it
	// saw) — the command records them for the planner (observe.FromLanes,
	// observe.FromBatch, docs/observe.md).
	Observe func(lanes []dispatch.LaneView, batches batch.Stats, meanMaxTokens int)
	// Now reads the clock for the report's and the progress display's
	// times (default time.Now).
	Now func() time.Time
	// Watch, if set, is told what the run does: its sources once it sends,
	// its decisions, each answer (the history, the live view and the
	// metrics: internal/see/watch, docs/see.md).
	Watch Watcher
}

// RoutedBy hands the run's routing to rt (`--route auto|sync|batch`): it
// picks the route once the input is surveyed, re-plans while the run
// goes, and hears of a re-plan the run could not apply.
func (o *Options) RoutedBy(rt *route.Router) {
	o.Plan, o.Replan, o.ReplanRefused = rt.Route, rt.Replan, rt.Refused
}

// LockWaiting is what a run says, on its Logger, when the lock of the
// results file at path is held and it waits LockWait for it (judgejob
// says the same of its verdicts file).
func (o *Options) LockWaiting(path string) func() {
	return func() {
		if o.Logger != nil {
			o.Logger.Warn(fmt.Sprintf("another sluice holds the lock of %s (one killed a moment ago may still be exiting); waiting up to %s for it", path, o.LockWait))
		}
	}
}

// Redrive is a caller's policy for rows already done, applied by the
// engine; the zero value drives nothing again beyond the engine's own
// rule. The judge's --redrive sets all three: it re-asks rows whose
// verdict is of a class being re-asked, keeps the others although their
// max_tokens changed, and refuses cached answers that would parse to a
// class being re-asked (the cache would hand them back on every resume).
type Redrive struct {
	// Again names done ids whose rows are driven again. The cache may
	// answer them, subject to AcceptCached.
	Again func(id string) bool
	// KeepChanged names done ids whose row is kept although their request
	// changed since; any other changed id is refused as usual
	// (ChangedError).
	KeepChanged func(id string) bool
	// AcceptCached vets a cached answer before it is served: a rejected
	// one is a miss, and the request is sent.
	AcceptCached func(message []byte) bool
}

func (p Redrive) again(id string) bool       { return p.Again != nil && p.Again(id) }
func (p Redrive) keepChanged(id string) bool { return p.KeepChanged != nil && p.KeepChanged(id) }
func (p Redrive) accept(message []byte) bool { return p.AcceptCached == nil || p.AcceptCached(message) }

// ErrInterrupted is returned (wrapped) when a run stopped before every
// request was done; re-running the same command resumes it.
var ErrInterrupted = errors.New("job: interrupted")

// InvalidInputError lists the bad lines of an input file.
type InvalidInputError struct {
	File    string
	Errors  []jsonl.LineError
	Total   int // every invalid line, listed or not
	Scanned int
}

func (e *InvalidInputError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d of %d lines are invalid; nothing was sent", e.File, e.Total, e.Scanned)
	for _, le := range e.Errors {
		fmt.Fprintf(&b, "\n  %s:%d: %s", e.File, le.Line, le.Reason)
	}
	if e.Total > len(e.Errors) {
		fmt.Fprintf(&b, "\n  … and %d more", e.Total-len(e.Errors))
	}
	b.WriteString("\nfix them, or pass --skip-invalid to record them as errored results")
	return b.String()
}

// ChangedError lists ids whose request changed since their result was written.
type ChangedError struct {
	Output string
	IDs    []string
	Total  int
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("%d requests changed since their results were written to %s (first: %s); pass --allow-changed to run them again, or write to a new output file",
		e.Total, e.Output, strings.Join(e.IDs, ", "))
}
