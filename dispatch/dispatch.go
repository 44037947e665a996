// Package dispatch sends Messages calls over every organization's keys at
// once: each request goes on the lane (organization × model pool) with the
// most headroom, paced by the API's rate-limit headers within etiquette
// caps, and the dispatcher owns every retry and backoff. One Result per
// request is its final word.
//
// This package is the promised front door to sluice's scheduler (the
// engine itself is internal and may change): Config says how to reach the
// API and with which keys; New probes each key once for its organization
// (a free count_tokens call) and builds the Dispatcher; run its Serve, then
// Submit requests as they come or Do one and wait. Close lets the requests
// in flight finish; Done is closed once they have.
//
// Invariants: a Request submitted before Close gets exactly one Result,
// through its callback (Submit) or as the return value (Do), unless the
// Serve context is cancelled first (then Result.Aborted: nothing should be
// recorded for it). A key value never appears in a Result, a log line or an
// error; keys are named by label.
package dispatch

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/client"
	engine "github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

// Request is one Messages request to send; Result is the final word on
// one.
type (
	Request = call.Request
	Result  = call.Result
)

// Config says how to reach the API and with which keys. Zero fields take
// the defaults noted; Keys is required.
type Config struct {
	// BaseURL of the API, without a trailing slash (default
	// https://api.anthropic.com).
	BaseURL string
	// Version is the anthropic-version header (default 2023-06-01).
	Version string
	// Auth sends each key as x-api-key (the default) or as
	// Authorization: Bearer.
	Auth keys.AuthStyle
	// Keys to send with (keys.Load). Keys of one organization share its
	// lanes; a key whose organization is not known yet is probed by New.
	Keys []*keys.Key
	// DiscoverModel is the model the keys' probe names (default
	// claude-sonnet-4-5): a key refused for that model alone stays for
	// the others.
	DiscoverModel string
	// Caps are the etiquette caps on requests in flight per organization
	// and model family (default DefaultCaps: Sonnet 100, Haiku 120,
	// Opus 40).
	Caps map[api.Family]int
	// Reserve is the share of every rate-limit bucket left for colleagues
	// on the same organization (default 0.15; negative: none).
	Reserve float64
	// MaxRetryAfter caps a server's retry-after (default 10 minutes): a
	// longer one is logged and honoured only up to the cap.
	MaxRetryAfter time.Duration
	// MaxQueued bounds requests accepted but not yet sent (default 4 × the
	// sum of caps); Submit blocks beyond it.
	MaxQueued int
	// HTTP2 lets the connections speak HTTP/2 where the server offers it
	// (many requests on few connections) instead of one HTTP/1.1
	// connection per request in flight.
	HTTP2 bool
	// Transport, if set, replaces the tuned transport (a proxy, a test's
	// wrapper).
	Transport http.RoundTripper
	// Logger receives the dispatcher's log; nil discards it.
	Logger *slog.Logger
}

// DefaultCaps are the etiquette caps on requests in flight per
// organization, by model family (a copy: changing it changes nothing).
var DefaultCaps = maps.Clone(engine.DefaultCaps)

// Errors New returns (wrapped), for errors.Is.
var (
	// ErrNoLiveKey: every key was refused (a 401 twice, a 403 for every
	// model), or a dispatcher lost its last live key while it ran (Err).
	ErrNoLiveKey = engine.ErrNoLiveKey
	// ErrWorkspaceRefused: the API refused a key's workspace (keys.Load's
	// workspace=): a mistyped workspace id.
	ErrWorkspaceRefused = engine.ErrWorkspaceRefused
)

// Dispatcher sends requests over every organization's lanes.
type Dispatcher struct {
	d      *engine.Dispatcher
	c      *client.Client
	redact func(string) string
}

// New probes every key of cfg whose organization is not known yet and
// builds a Dispatcher over them. It returns an error when no key is left
// alive (ErrNoLiveKey), when the API refused a key's workspace
// (ErrWorkspaceRefused), when no probe got an answer at all (nothing
// answers at BaseURL), or when ctx ends first.
func New(ctx context.Context, cfg Config) (*Dispatcher, error) {
	o := engine.Options(cfg)
	d, c, err := o.Start(ctx)
	if err != nil {
		return nil, err
	}
	return &Dispatcher{d: d, c: c, redact: o.Redactor()}, nil
}

// Serve runs the dispatcher until Close has let every request finish
// (nil) or ctx is cancelled (requests not finished end Aborted); then it
// closes the connections it kept alive.
func (d *Dispatcher) Serve(ctx context.Context) error {
	defer d.c.CloseIdle()
	return d.d.Serve(ctx)
}

// Submit queues req; cb gets its Result once, from another goroutine. It
// blocks while MaxQueued requests wait, and fails only when ctx ends or
// the dispatcher is closed.
func (d *Dispatcher) Submit(ctx context.Context, req *Request, cb func(Result)) error {
	return d.d.Submit(ctx, req, func(r Result) { cb(d.scrub(r)) })
}

// Do sends req and waits for its Result.
func (d *Dispatcher) Do(ctx context.Context, req *Request) Result { return d.scrub(d.d.Do(ctx, req)) }

// scrub hides any key value an error body or an error carries (an upstream
// gateway may echo the key it was sent): a Result never holds one.
func (d *Dispatcher) scrub(r Result) Result {
	if r.Class != api.ClassOK && len(r.Body) > 0 {
		r.Body = []byte(d.redact(string(r.Body)))
	}
	if r.Err != nil {
		if msg := d.redact(r.Err.Error()); msg != r.Err.Error() {
			r.Err = &redactedError{msg: msg, err: r.Err}
		}
	}
	return r
}

// redactedError is an error whose text had a key value redacted; errors.Is
// and errors.As still see the error it wraps.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Close stops taking requests; those submitted finish. Done is closed once
// Serve has returned.
func (d *Dispatcher) Close() { d.d.Close() }

// Done is closed when Serve has returned.
func (d *Dispatcher) Done() <-chan struct{} { return d.d.Done() }

// Err is why Serve stopped early (for example, no live key left), nil
// otherwise.
func (d *Dispatcher) Err() error { return d.d.Err() }

// Stats are a dispatcher's counters so far.
type Stats struct {
	Submitted, OK, Final, Transport int64
	// Answers retried or given up on, by the attempt's class: 429s, 529s,
	// and failures (5xx answers, lost connections).
	RetriesRateLimited, RetriesOverloaded, RetriesFailed int64
	// Lanes by name: the organization's label and the model pool
	// ("high_prio/sonnet-4"), then "@" and the workspace for a lane of a
	// workspace with limits of its own.
	Lanes map[string]LaneStats
}

// LaneStats counts one lane's attempts.
type LaneStats struct {
	Org         string // the organization's label
	OrgID       string // the organization id the API names
	Workspace   string // the workspace whose lane this is ("": the org's own)
	Pool        api.Pool
	Attempts    int64
	OK          int64
	RateLimited int64
	Overloaded  int64
	Failed      int64
	KeyDead     int64
	// InputTokens counts uncached, cache-write and cache-read input
	// tokens; the prompt cache's parts are also counted apart.
	InputTokens, OutputTokens, CacheReadTokens, CacheWriteTokens int64
}

// Stats reports the counters so far.
func (d *Dispatcher) Stats() Stats {
	s, views := d.d.Snapshot()
	out := Stats{Submitted: s.Submitted, OK: s.OK, Final: s.Final, Transport: s.Transport,
		RetriesRateLimited: s.RetriesRateLimited, RetriesOverloaded: s.RetriesOverloaded, RetriesFailed: s.RetriesFailed,
		Lanes: make(map[string]LaneStats, len(views))}
	for _, v := range views {
		name := v.Org + "/" + string(v.Pool)
		if v.Workspace != "" {
			name += "@" + v.Workspace
		}
		out.Lanes[name] = LaneStats(v.LaneStats)
	}
	return out
}
