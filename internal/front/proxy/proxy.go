// Package proxy is sluice's Anthropic-compatible gateway: an http.Handler
// that serves the Messages API (plain and streaming), count_tokens, models
// and Message Batches over a dispatcher and a key pool, so code written for
// the API gets sluice's lanes, retries and fan-out by changing its base URL.
// See docs/proxy.md.
//
// Callers never hold the real keys: their credential is checked against the
// proxy's token (Config.Token; `sluice proxy` always has one unless
// --no-auth, kept in its state dir: StateToken) and thrown away; every
// upstream call is authenticated by a key of the pool. The state dir has
// one owner (its lock: LockState, or New); request bodies held at once,
// and the time a caller may take to send or read, are bounded
// (bounds.go).
package proxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/keys"
)

// Config configures a Proxy.
type Config struct {
	// Dispatcher sends every Messages call and batch row; the caller runs
	// its Serve. Required.
	Dispatcher *dispatch.Dispatcher
	// Client is the dispatcher's client, used directly for count_tokens and
	// models (which have limits of their own, not the lanes'). Required.
	Client *client.Client
	// Pool holds the keys (required): count_tokens and models use its live
	// keys, and its Redact scrubs any text shown to a caller or logged.
	Pool *keys.Pool
	// Token, when set, must be sent by every caller as x-api-key or
	// Authorization: Bearer, on every path (/metrics and /healthz too,
	// unless MetricsPublic). Empty: any credential is accepted, and web
	// pages are refused (`sluice proxy --no-auth`, loopback only).
	Token string
	// MetricsPublic serves /metrics and /healthz without the token (a
	// scraper on a trusted network).
	MetricsPublic bool
	// MaxWait bounds how long a request may wait for capacity, from its
	// arrival (default 60 s). Past it the caller gets a 429 (or the last
	// upstream 429/529) with retry-after.
	MaxWait time.Duration
	// MaxAttempts bounds the upstream attempts of one caller request
	// (default DefaultMaxAttempts; negative: the dispatcher's retry budgets
	// alone). Past it the caller gets the last upstream answer with a
	// retry-after, so a caller's own retries (an SDK's max_retries) make
	// at most (max_retries + 1) × MaxAttempts upstream attempts.
	MaxAttempts int
	// StreamWriteTimeout bounds one write of a stream's event to its
	// caller (default 60 s). A caller that stops reading would otherwise
	// hold its lane slot for as long as it keeps the connection open: the
	// dispatcher's idle cut counts upstream silence, not a slow reader.
	// Past it the caller is treated as gone: its stream is cut and the
	// slot freed. Zero: 60 s; negative: no bound.
	StreamWriteTimeout time.Duration
	// BodyTimeout bounds how long a request body may take to arrive
	// (default DefaultBodyTimeout; negative: no bound): from when its room
	// in MaxBodyMemory is reserved for a body a handler reads — past it
	// the request ends with a 408 — and from the request's arrival for
	// one no handler reads (net/http drains it after the answer); either
	// way its connection is then closed, so a caller trickling its body
	// cannot hold a connection. A refused caller's body (a wrong token)
	// is never read: its connection closes after the answer.
	BodyTimeout time.Duration
	// WriteTimeout bounds one write of a non-streaming answer to its
	// caller (a message, a batch object, a results download: set before
	// each write, so a slow but moving download goes on); default
	// DefaultWriteTimeout, negative: no bound. Streams have
	// StreamWriteTimeout.
	WriteTimeout time.Duration
	// MaxBodyMemory bounds the request-body bytes held at once (default
	// DefaultMaxBodyMemory; negative: no bound): a request reserves its
	// Content-Length (twice it for a batch create) before its body is
	// read, waiting up to MaxWait for room, else a 429 with retry-after;
	// a body that alone exceeds it gets a 413.
	MaxBodyMemory int64
	// StateDir keeps virtual batches across restarts; empty keeps them in
	// memory only. New takes its lock (one proxy per state dir); Close
	// lets it go.
	StateDir string
	// Lock is the state dir's lock, taken beforehand with LockState on
	// StateDir (by a caller that must own the state dir before it can
	// build the rest of the Config); New takes it over, and Close
	// releases it (if New fails, the caller still holds it). Nil: New
	// takes it itself, waiting as LockWait says.
	Lock *StateLock
	// LockWait is how long New waits for another proxy that holds the
	// state dir while it drains (a restart during its predecessor's
	// drain); zero: no wait. A holder that serves is never waited for.
	// To end the wait early (an interrupt), take the lock with LockState.
	LockWait time.Duration
	// OnLockWait, if set, is told once when New starts waiting for a
	// draining holder, with the holder's status line.
	OnLockWait func(holder string)
	// Cache answers repeated plain Messages calls; nil or Off: no cache.
	Cache *cache.Cache
	// Logger receives the proxy's log; nil discards it. Requests are
	// logged at debug level.
	Logger *slog.Logger
	// Plan routes each virtual batch (route.Planner): it gets the batch's
	// shape and its number of rows, and answers sync, batch or a split;
	// the batch part goes through package batch, with a journal of its
	// own in StateDir. Nil, or no StateDir: every row runs on the sync
	// dispatcher.
	Plan func(s jsonl.Summary, n int) (route.Routing, error)
	// Now reads the clock (default time.Now): batch times and the 29-day
	// archive of their results.
	Now func() time.Time
}

// DefaultMaxAttempts is Config.MaxAttempts's default: a 529 or 5xx at a
// few percent fails four attempts in a row about once in 10⁵ calls; a
// persistent one is given back to the caller after four.
const DefaultMaxAttempts = 4

// Proxy is the gateway. It is an http.Handler, safe for concurrent use.
// Create it with New; call Drain and then Wait to stop it.
type Proxy struct {
	cfg      Config
	d        *dispatch.Dispatcher
	log      *slog.Logger
	now      func() time.Time
	mux      *http.ServeMux
	draining atomic.Bool
	rr       atomic.Uint64 // round robin over live keys for count_tokens, models
	keyPool  atomic.Pointer[keys.Pool]
	metrics  metrics
	batches  batchSet
	lock     *StateLock // nil without a state dir
	bodies   *bodyBudget

	// life ends (errShutdown) on Drain: virtual batches stop sending.
	life    context.Context
	endLife context.CancelCauseFunc

	// Background work (virtual batches, cache writes) starts only while
	// not drained, under bgMu, so bg.Add never races bg.Wait.
	bgMu      sync.Mutex
	bgStopped bool
	bg        sync.WaitGroup
}

// New returns a Proxy for cfg. With a StateDir it loads the batches kept
// there (a batch that had not ended gets its missing rows as errored).
func New(cfg Config) (*Proxy, error) {
	if cfg.Dispatcher == nil || cfg.Client == nil || cfg.Pool == nil {
		return nil, errors.New("proxy: Config.Dispatcher, Client and Pool are required")
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 60 * time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.StreamWriteTimeout == 0 {
		cfg.StreamWriteTimeout = 60 * time.Second
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MaxBodyMemory == 0 {
		cfg.MaxBodyMemory = DefaultMaxBodyMemory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Proxy{cfg: cfg, d: cfg.Dispatcher, log: cfg.Logger, now: cfg.Now, bodies: newBodyBudget(cfg.MaxBodyMemory)}
	p.keyPool.Store(cfg.Pool)
	p.life, p.endLife = context.WithCancelCause(context.Background())
	p.metrics.init()
	switch {
	case cfg.Lock != nil:
		if cfg.StateDir == "" || filepath.Clean(cfg.Lock.dir) != filepath.Clean(cfg.StateDir) {
			return nil, fmt.Errorf("proxy: Config.Lock is the lock of %s, not of the state dir %q", cfg.Lock.dir, cfg.StateDir)
		}
		p.lock = cfg.Lock
	case cfg.StateDir != "":
		l, err := LockState(context.Background(), cfg.StateDir, cfg.LockWait, cfg.OnLockWait)
		if err != nil {
			return nil, err
		}
		p.lock = l
	}
	if err := p.batches.init(p, cfg.StateDir); err != nil {
		if cfg.Lock == nil {
			p.lock.Release()
		}
		return nil, err
	}
	if err := p.lock.note("serving"); err != nil {
		if cfg.Lock == nil {
			p.lock.Release()
		}
		return nil, fmt.Errorf("proxy: state dir lock: %w", err)
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/messages", p.handleMessages)
	m.HandleFunc("POST /v1/messages/count_tokens", p.handleCountTokens)
	m.HandleFunc("GET /v1/models", p.handleModels)
	m.HandleFunc("GET /v1/models/{id}", p.handleModels)
	m.HandleFunc("POST /v1/messages/batches", p.handleBatchCreate)
	m.HandleFunc("GET /v1/messages/batches", p.handleBatchList)
	m.HandleFunc("GET /v1/messages/batches/{id}", p.handleBatchRetrieve)
	m.HandleFunc("DELETE /v1/messages/batches/{id}", p.handleBatchDelete)
	m.HandleFunc("POST /v1/messages/batches/{id}/cancel", p.handleBatchCancel)
	m.HandleFunc("GET /v1/messages/batches/{id}/results", p.handleBatchResults)
	m.HandleFunc("GET /metrics", p.handleMetrics)
	m.HandleFunc("GET /healthz", p.handleHealth)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p.fail(w, 404, api.ErrNotFound, fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path))
	})
	p.mux = m
	return p, nil
}

// ServeHTTP authenticates API calls and routes them.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, writeTimeout: p.cfg.WriteTimeout}
	endpoint := endpointOf(r)
	defer func() {
		p.metrics.request(endpoint, rec.code())
		p.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.code(),
			"org", rec.Header().Get(api.HeaderOrganizationID), "ms", time.Since(start).Milliseconds())
	}()
	// Every body's time is bounded, read or not: net/http drains a body
	// a handler left unread (up to 256 KiB) after the answer. readBody
	// starts it again once the body has room, and lifts it once read.
	hasBody := r.Body != http.NoBody
	rd := deadliner(w)
	if hasBody {
		p.bodyDeadline(rd)
	}
	// A caller refused is not heard out: its body is never read, and its
	// connection closes after the answer.
	refuse := func(status int, t api.ErrorType, msg string) {
		if hasBody {
			rec.Header().Set("Connection", "close")
			if rd != nil {
				_ = rd.SetReadDeadline(time.Now())
			}
		}
		p.fail(rec, status, t, msg)
	}
	if why := p.refuseOpen(r); why != "" {
		refuse(403, api.ErrPermission, why)
		return
	}
	public := p.cfg.MetricsPublic && (endpoint == "metrics" || endpoint == "healthz")
	if !public && !p.authorized(r) {
		refuse(401, api.ErrAuthentication, "invalid proxy token: send the sluice proxy token (`sluice proxy token`) as x-api-key or Authorization: Bearer")
		return
	}
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		if p.draining.Load() {
			rec.Header().Set(api.HeaderRetryAfter, "1") // another instance, or this one restarted
			p.fail(rec, api.StatusOverloaded, api.ErrOverloaded, "sluice proxy is shutting down")
			return
		}
	}
	p.mux.ServeHTTP(rec, r)
}

// refuseOpen says why a request must be refused when the proxy has no
// token (it then listens on loopback only, open to every local program —
// but not to web pages): a browser's cross-origin request (an Origin
// header, or Sec-Fetch-Site: cross-site), or a Host that is not a
// loopback name (DNS rebinding: a page whose name now points to
// 127.0.0.1). "" lets it through.
func (p *Proxy) refuseOpen(r *http.Request) string {
	if p.cfg.Token != "" {
		return ""
	}
	if r.Header.Get("Origin") != "" || strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
		return "sluice proxy: requests from web pages are refused unless the proxy has a token (SLUICE_PROXY_TOKEN)"
	}
	if !loopbackHost(r.Host) {
		return fmt.Sprintf("sluice proxy: Host %q is not a loopback name; without a token the proxy answers only localhost and loopback addresses", r.Host)
	}
	return ""
}

// loopbackHost reports whether a Host header names this machine:
// localhost or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorized checks the caller's credential against the token. The
// credential is never kept, logged or forwarded.
func (p *Proxy) authorized(r *http.Request) bool {
	if p.cfg.Token == "" {
		return true
	}
	got := r.Header.Get(api.HeaderAPIKey)
	if got == "" {
		// The scheme's case does not matter (RFC 7235): bearer, Bearer.
		if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = cred
		}
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(p.cfg.Token)) == 1
}

// Drain starts a shutdown: /healthz turns 503, new API calls get 529,
// answers are no longer written to the cache, and virtual batches stop
// sending rows (their unsent rows are sent after a restart; batches
// already created upstream are adopted then: see docs/proxy.md). Requests
// in flight carry on.
func (p *Proxy) Drain() {
	p.bgMu.Lock()
	p.bgStopped = true
	p.bgMu.Unlock()
	if !p.draining.Swap(true) {
		// A restart that finds the lock held waits for a draining holder.
		if err := p.lock.note("draining"); err != nil {
			p.log.Warn("state dir lock: the drain not noted", "err", err)
		}
	}
	p.endLife(errShutdown)
}

// Wait waits for the proxy's background work: virtual batches and cache
// writes. Call it after Drain, once the dispatcher has delivered every
// result (its Serve returned), and before closing the cache.
func (p *Proxy) Wait() { p.bg.Wait() }

// Close lets the state dir's lock go, after Wait, once the server has
// stopped calling the proxy: another proxy may then take the state dir.
// Calling it again does nothing. A process that exits without it lets the
// lock go too (the kernel's).
func (p *Proxy) Close() error { return p.lock.Release() }

// goBackground runs each f as background work Wait waits for, unless the
// proxy is draining (then it runs none and says so). first, if set, runs
// under the same lock before any f starts: it sees the same answer.
func (p *Proxy) goBackground(first func(), fs ...func()) bool {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.bgStopped {
		return false
	}
	if first != nil {
		first()
	}
	p.bg.Add(len(fs))
	for _, f := range fs {
		go func() {
			defer p.bg.Done()
			f()
		}()
	}
	return true
}

func (p *Proxy) handleHealth(w http.ResponseWriter, _ *http.Request) {
	live := len(p.pool().Live())
	status, code := "ok", 200
	switch {
	case p.draining.Load():
		status, code = "draining", 503
	case live == 0:
		status, code = "no_live_key", 503
	}
	_, lanes := p.d.Snapshot()
	writeJSON(w, code, map[string]any{"status": status, "live_keys": live, "lanes": len(lanes)})
}

// --- responses ---

// newRequestID returns an id for an answer sluice makes itself.
func newRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return "req_sluice" + hex.EncodeToString(b[:])
}

// fail writes an API error body of sluice's own, with a request id.
func (p *Proxy) fail(w http.ResponseWriter, status int, t api.ErrorType, msg string) {
	id := newRequestID()
	w.Header().Set(api.HeaderRequestID, id)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(api.NewErrorBody(t, id, "%s", p.pool().Redact(msg)).Marshal())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get(api.HeaderRequestID) == "" {
		w.Header().Set(api.HeaderRequestID, newRequestID())
	}
	w.WriteHeader(status)
	w.Write(b)
}

// passHeaders are the upstream response headers a caller gets, in
// canonical form (a map lookup each, no name built per answer).
var passHeaders = canonical(
	api.HeaderRequestID, api.HeaderOrganizationID, api.HeaderWorkspaceID,
	api.HeaderRetryAfter, api.HeaderRetryAfterMs, api.HeaderShouldRetry,
	"Content-Type", "Cache-Control",
)

// forwarded are the caller's request headers sent upstream, canonical.
var forwarded = canonical(api.HeaderVersion, api.HeaderBeta)

func canonical(names ...string) []string {
	for i, n := range names {
		names[i] = http.CanonicalHeaderKey(n)
	}
	return names
}

const rateLimitPrefix = "anthropic-ratelimit-"

// copyHeaders copies the headers a caller gets from an upstream answer:
// ids, retry hints, content type and the rate-limit family. The value
// slices are shared, not copied: src is one answer's header, which
// nothing writes once it has been read.
func copyHeaders(dst, src http.Header) {
	for _, name := range passHeaders {
		if v := src[name]; len(v) > 0 {
			dst[name] = v
		}
	}
	for name, v := range src {
		if len(name) >= len(rateLimitPrefix) && strings.EqualFold(name[:len(rateLimitPrefix)], rateLimitPrefix) {
			dst[name] = v
		}
	}
}

// forwardHeaders are the caller's request headers sent upstream. The
// value slices are the request's own (read-only from here on).
func forwardHeaders(h http.Header) http.Header {
	out := make(http.Header, len(forwarded))
	for _, name := range forwarded {
		if v := h[name]; len(v) > 0 {
			out[name] = v
		}
	}
	return out
}

// recorder notes the status a handler wrote, passes Flush on, and sets a
// write deadline of writeTimeout before each write (net/http lifts it
// once the answer is finished), unless the answer streams (streamSink
// sets its own, per event).
type recorder struct {
	http.ResponseWriter
	status       int
	writeTimeout time.Duration // ≤ 0: none
	streaming    bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	d, ok := r.ResponseWriter.(interface{ SetWriteDeadline(time.Time) error })
	if r.writeTimeout <= 0 || r.streaming || !ok {
		return r.ResponseWriter.Write(b)
	}
	// The deadline bounds a write that does not move, not a large answer
	// to a caller that reads it: one per chunk.
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), writeChunk)]
		_ = d.SetWriteDeadline(time.Now().Add(r.writeTimeout))
		m, err := r.ResponseWriter.Write(chunk)
		n += m
		if err != nil {
			return n, err
		}
		b = b[len(chunk):]
	}
	return n, nil
}

// writeChunk is the most a recorder writes under one write deadline.
const writeChunk = 256 << 10

// streams marks w's answer as a stream: its writes set their own
// deadlines.
func streams(w http.ResponseWriter) {
	if r, ok := w.(*recorder); ok {
		r.streaming = true
	}
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() string {
	if r.status == 0 {
		return "0" // the caller left before an answer
	}
	return strconv.Itoa(r.status)
}

// endpointOf names r's endpoint for metrics, without ids.
func endpointOf(r *http.Request) string {
	p := r.URL.Path
	switch {
	case p == "/v1/messages":
		return "messages"
	case p == "/v1/messages/count_tokens":
		return "count_tokens"
	case strings.HasPrefix(p, "/v1/models"):
		return "models"
	case strings.HasPrefix(p, "/v1/messages/batches"):
		return "batches"
	case p == "/metrics", p == "/healthz":
		return strings.TrimPrefix(p, "/")
	}
	return "other"
}

// SetPool replaces the key pool after a rotation (keys.Pool.Rotated): the
// pass-through endpoints, new virtual batches, redaction and /healthz use
// it from then on. The dispatcher takes its keys through
// dispatch.Rotator.
func (p *Proxy) SetPool(pool *keys.Pool) { p.keyPool.Store(pool) }

// pool is the key pool in use.
func (p *Proxy) pool() *keys.Pool { return p.keyPool.Load() }
