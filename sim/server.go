package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Server is the simulated Anthropic API. It serves Messages, count_tokens,
// models and Message Batches for the organizations of its Config, enforces
// their rate limits, and answers every request deterministically.
//
// A Server is safe for concurrent use. Its state lives in a world that
// POST /_sim/reset replaces whole, so a reset never races a request: a
// request finishes in the world it started in.
type Server struct {
	cfg   Config
	now   func() time.Time
	w     atomic.Pointer[world]
	mux   *http.ServeMux
	httpS *http.Server
}

// Option configures a Server.
type Option func(*Server)

// WithClock replaces time.Now. Under testing/synctest the real clock is
// already fake, so most tests need no option.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New validates cfg and returns a Server for it.
func New(cfg Config, opts ...Option) (*Server, error) {
	if cfg.OTPMMode == "" {
		cfg.OTPMMode = OTPMActual
	}
	if cfg.Faults.SlowFactor <= 0 {
		cfg.Faults.SlowFactor = 20
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	s.w.Store(newWorld(&s.cfg, s.now()))
	s.routes()
	s.httpS = &http.Server{Handler: s.mux, ReadHeaderTimeout: 30 * time.Second}
	return s, nil
}

// Config returns the effective configuration.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve answers on l until Shutdown. It returns http.ErrServerClosed after
// a Shutdown, like http.Server.Serve.
func (s *Server) Serve(l net.Listener) error { return s.httpS.Serve(l) }

// Shutdown stops Serve gracefully.
func (s *Server) Shutdown(ctx context.Context) error { return s.httpS.Shutdown(ctx) }

// ServeUntil answers on l until ctx ends, then shuts down, giving open
// requests up to grace to finish; it returns Serve's error if Serve ended
// first, else Shutdown's (nil after a clean stop).
func (s *Server) ServeUntil(ctx context.Context, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := s.Shutdown(sctx)
		if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
		}
		return err
	}
}

// Close stops Serve at once, dropping open connections.
func (s *Server) Close() error { return s.httpS.Close() }

// Reset replaces the world with a fresh one: full buckets, no batches, zero
// stats, key statuses as configured.
func (s *Server) Reset() { s.w.Store(newWorld(&s.cfg, s.now())) }

// SetKeyStatus changes a key's status (active, revoked, forbidden) by label,
// for tests of a key dying mid-run.
func (s *Server) SetKeyStatus(label, status string) error {
	switch status {
	case KeyActive, KeyRevoked, KeyForbidden:
	default:
		return fmt.Errorf("sim: unknown key status %q", status)
	}
	for _, k := range s.w.Load().keys {
		if k.label == label {
			k.status.Store(status)
			return nil
		}
	}
	return fmt.Errorf("sim: no key labelled %q", label)
}

// world is everything a reset throws away.
type world struct {
	cfg     *Config
	started time.Time
	rng     *rng
	ids     atomic.Uint64
	orgs    []*org
	byName  map[string]*org
	keys    map[string]*keyEntry
	bodies  bodyLedger
}

type keyEntry struct {
	label     string
	org       *org
	workspace string       // the workspace a workspace-scoped key belongs to
	status    atomic.Value // string
	used      atomic.Int64
	denied    atomic.Int64
}

func newWorld(cfg *Config, now time.Time) *world {
	w := &world{cfg: cfg, started: now, rng: newRNG(cfg.Seed), byName: map[string]*org{}, keys: map[string]*keyEntry{}}
	w.bodies.seen = map[uint64]uint32{}
	for i := range cfg.Orgs {
		o := newOrg(w, &cfg.Orgs[i], now)
		w.orgs = append(w.orgs, o)
		w.byName[o.cfg.Name] = o
		for _, k := range o.cfg.Keys {
			e := &keyEntry{label: k.Label, org: o, workspace: k.Workspace}
			st := k.Status
			if st == "" {
				st = KeyActive
			}
			e.status.Store(st)
			w.keys[k.Key] = e
		}
	}
	return w
}

// org is one organization's server-side state.
type org struct {
	w     *world
	cfg   *OrgConfig
	batch BatchModel

	inFlight atomic.Int64 // Messages calls in flight, for Capacity

	mu         sync.Mutex // guards lanes, tokenCount, batchRPM
	lanes      map[api.Pool]*lane
	tokenCount bucket
	batchRPM   bucket
	counters   OrgCounters
	// wide is the organization's limit across all pools (orglimit.go),
	// nil without one.
	wide *orgLimit
	// wsLimits are the workspaces' own limits, by workspace and pool
	// (workspace.go).
	wsLimits map[string]*orgLimit

	cacheMu sync.Mutex
	cache   map[uint64]cacheEntry // prompt-cache prefix (per model: the key hashes it) → entry

	batches batchQueue
}

func newOrg(w *world, cfg *OrgConfig, now time.Time) *org {
	k := w.cfg.TimeScale
	o := &org{w: w, cfg: cfg, batch: w.cfg.Batch, lanes: map[api.Pool]*lane{}, cache: map[uint64]cacheEntry{}}
	if cfg.Batch != nil {
		o.batch = *cfg.Batch
	}
	perMin := func(n int64) bucket {
		r := float64(scaleLimit(n, k))
		return newBucket(r, r/60, now)
	}
	o.tokenCount, o.batchRPM = perMin(cfg.TokenCountRPM), perMin(cfg.BatchRPM)
	o.wide = newOrgLimit(cfg.OrgLimits, w.cfg, now)
	o.newWorkspaceLimits(w.cfg, now)
	o.batches.init(o, now)
	// A colleague's lane exists from the world's start, so it spends before
	// sluice's first request and GET /_sim/stats advances it.
	for i := range w.cfg.Colleagues {
		cl := &w.cfg.Colleagues[i]
		if cl.Org != cfg.Name {
			continue
		}
		p, _ := w.cfg.poolOf(cl.Model)
		o.lane(p, now).addColleague(cl, colleagueRNG(w.cfg.Seed, i), now)
	}
	return o
}

// colleagueRNG is colleague i's own random source, derived from the seed:
// its arrival times depend on the seed alone, not on how sluice's requests
// interleave with it, and drawing them does not shift the world's draws.
func colleagueRNG(seed uint64, i int) *rng {
	return newRNG(mix(seed^0x636f6c6c65616775) + uint64(i)*0x9e3779b97f4a7c15)
}

// stormP529 is the probability that a Messages call at now is a storm's
// 529: 1 − Π(1 − p529) over the storms whose window, ÷ K from the world's
// start, holds now. 0 outside every storm.
func (w *world) stormP529(now time.Time) float64 {
	storms := w.cfg.Faults.Storms
	if len(storms) == 0 {
		return 0
	}
	k := w.cfg.TimeScale
	el := float64(now.Sub(w.started))
	pass := 1.0
	for _, st := range storms {
		from := float64(st.Start) / k
		to := (float64(st.Start) + float64(st.Length)) / k
		if el >= from && el < to {
			pass *= 1 - st.P529
		}
	}
	return 1 - pass
}

// lane returns the org's lane for pool p, creating it on first use.
func (o *org) lane(p api.Pool, now time.Time) *lane {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.lanes[p]; ok {
		return l
	}
	l := newLane(o, p, o.cfg.limitsFor(p), o.w.cfg, now)
	o.lanes[p] = l
	return l
}

// takeSurface charges one call to a per-minute surface bucket (count_tokens
// or batch endpoints) and reports how long to wait if it does not fit.
func (o *org) takeSurface(b *bucket, now time.Time) (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !b.fits(1, now) {
		return b.wait(1, now), false
	}
	b.take(1, now)
	return 0, true
}

// surfaceHeaders writes the requests-* headers of a surface bucket.
func (o *org) surfaceHeaders(h http.Header, b *bucket, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b.unlimited() {
		return
	}
	fine := o.w.cfg.TimeScale != 1 && !o.w.cfg.CoarseHeaders
	h.Set(api.LimitHeaderName(api.LimiterRequests, "limit"), strconv.FormatInt(int64(b.capacity), 10))
	h.Set(api.LimitHeaderName(api.LimiterRequests, "remaining"), strconv.FormatInt(b.remaining(now), 10))
	h.Set(api.LimitHeaderName(api.LimiterRequests, "reset"), serverClock{skew: o.w.cfg.ClockSkew.D(), rounding: o.w.cfg.ResetRounding}.formatReset(b.resetAt(now), fine))
}

// cacheEntry is one org's prompt-cache entry for a prefix.
type cacheEntry struct {
	visible time.Time // the first writer's answer has begun: later requests read it
	expires time.Time
	// batchAt is when a batch first ended having written or read it
	// since it was written (zero: only sync requests have). A batch that
	// began after then reads it at batch.cache_hit; a later batch's end
	// does not move it (the entry was batch-warm all along).
	batchAt time.Time
}

// cacheLookup applies the prompt-cache model: a prefix whose entry is
// visible and not expired is read; otherwise it is written. An entry
// becomes visible only when its writer's answer begins — ttft after the
// write (the documented "a cache entry only becomes available after the
// first response begins") — so requests sent together before then all
// miss and all pay the write. Nothing changes until cacheCommit: a
// request the rate limits refuse neither writes nor refreshes an entry.
func (o *org) cacheLookup(p *prompt, now time.Time) (read, write int64) {
	if p.cachePrefix == 0 {
		return 0, 0
	}
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	if e, ok := o.cache[p.cacheKey]; ok && !now.Before(e.visible) && now.Before(e.expires) {
		return p.cachePrefix, 0
	}
	return 0, p.cachePrefix
}

// cacheCommit records an admitted request's read (the TTL refreshed) or
// write (a new entry visible ttft from now; an entry already being written
// keeps its first writer's visibility).
func (o *org) cacheCommit(p *prompt, now time.Time, scale float64, ttft time.Duration, read int64) {
	if p.cachePrefix == 0 {
		return
	}
	ttl := time.Duration(float64(p.cacheTTL) / scale)
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	e, ok := o.cache[p.cacheKey]
	switch {
	case read > 0:
		e.expires = now.Add(ttl)
	case !ok || !now.Before(e.expires): // absent or expired: this request writes it
		e.visible = now.Add(ttft)
		e.expires = e.visible.Add(ttl)
		e.batchAt = time.Time{}
	default: // being written by an earlier request, not yet visible
		if later := e.visible.Add(ttl); later.After(e.expires) {
			e.expires = later
		}
	}
	o.cache[p.cacheKey] = e
}

// bodyLedger counts how often each distinct request body was answered.
type bodyLedger struct {
	mu       sync.Mutex
	seen     map[uint64]uint32
	distinct int64
	repeated int64 // bodies answered more than once
	extra    int64 // answers beyond the first, summed
}

func (b *bodyLedger) answered(hash uint64) {
	b.mu.Lock()
	n := b.seen[hash]
	b.seen[hash] = n + 1
	switch n {
	case 0:
		b.distinct++
	case 1:
		b.repeated++
		b.extra++
	default:
		b.extra++
	}
	b.mu.Unlock()
}

// newRequestID returns a unique "req_…" id.
func (w *world) newRequestID() string {
	n := w.ids.Add(1)
	return "req_011" + strconv.FormatUint(mix(n^w.cfg.Seed<<32)|1<<63, 36)[1:]
}

// newID returns an id with the given prefix ("msg_", "msgbatch_").
func (w *world) newID(prefix string) string {
	n := w.ids.Add(1)
	return prefix + "01" + strconv.FormatUint(mix(n+w.cfg.Seed)|1<<63, 36)[1:]
}

// --- HTTP plumbing shared by every handler ---

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/messages", s.handleMessages)
	m.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	m.HandleFunc("GET /v1/models", s.handleModels)
	m.HandleFunc("GET /v1/models/{id}", s.handleModel)
	m.HandleFunc("POST /v1/messages/batches", s.handleBatchCreate)
	m.HandleFunc("GET /v1/messages/batches", s.handleBatchList)
	m.HandleFunc("GET /v1/messages/batches/{id}", s.handleBatchRetrieve)
	m.HandleFunc("DELETE /v1/messages/batches/{id}", s.handleBatchDelete)
	m.HandleFunc("POST /v1/messages/batches/{id}/cancel", s.handleBatchCancel)
	m.HandleFunc("GET /v1/messages/batches/{id}/results", s.handleBatchResults)
	m.HandleFunc("GET /_sim/stats", s.handleStats)
	m.HandleFunc("POST /_sim/reset", s.handleReset)
	m.HandleFunc("POST /_sim/keys", s.handleKeyStatus)
	m.HandleFunc("GET /_sim/config", s.handleConfig)
	m.HandleFunc("/", s.handleNotFound)
	s.mux = m
}

// call is one authenticated API call in progress.
type call struct {
	s     *Server
	w     *world
	rw    http.ResponseWriter
	r     *http.Request
	reqID string
	key   *keyEntry
	org   *org
	now   time.Time
	// version is the request's anthropic-version (version.go); workspace
	// the workspace it is charged to (workspace.go).
	version, workspace string
}

// begin authenticates r and checks its version. On failure it has already
// written the error and returns nil.
func (s *Server) begin(rw http.ResponseWriter, r *http.Request) *call {
	w := s.w.Load()
	if s.cfg.OmitDate || s.cfg.ClockSkew != 0 {
		rw = &dateWriter{ResponseWriter: rw, now: s.now, skew: s.cfg.ClockSkew.D(), omit: s.cfg.OmitDate}
	}
	c := &call{s: s, w: w, rw: rw, r: r, reqID: w.newRequestID(), now: s.now()}
	rw.Header()["Request-Id"] = []string{c.reqID}
	key := r.Header.Get(api.HeaderAPIKey)
	if key == "" {
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			key = strings.TrimSpace(a[len("Bearer "):])
		}
	}
	if key == "" {
		c.fail(&requestError{401, api.ErrAuthentication, "x-api-key header is required"})
		return nil
	}
	e, ok := w.keys[key]
	if !ok {
		c.fail(&requestError{401, api.ErrAuthentication, "invalid x-api-key"})
		return nil
	}
	c.key, c.org = e, e.org
	rw.Header()["Anthropic-Organization-Id"] = []string{e.org.cfg.ID}
	switch e.status.Load().(string) {
	case KeyRevoked:
		e.denied.Add(1)
		c.fail(&requestError{401, api.ErrAuthentication, "invalid x-api-key"})
		return nil
	case KeyForbidden:
		e.denied.Add(1)
		c.fail(&requestError{403, api.ErrPermission, "Your API key does not have permission to use the specified resource."})
		return nil
	}
	ws, rerr := e.org.workspaceOf(e, r.Header.Get(api.HeaderWorkspaceID))
	if rerr != nil {
		c.fail(rerr)
		return nil
	}
	c.workspace = ws
	rw.Header()["Anthropic-Workspace-Id"] = []string{ws}
	switch v := r.Header.Get(api.HeaderVersion); v {
	case api.Version20230601, api.Version20261021:
		c.version = v
		c.org.saw(v, r.Header.Get(api.HeaderWorkspaceID))
	case "":
		c.fail(badRequest("anthropic-version: header is required"))
		return nil
	default:
		c.fail(badRequest("anthropic-version: %q is not a valid version", v))
		return nil
	}
	e.used.Add(1)
	return c
}

// readBody reads at most limit bytes of the request body; a larger body is
// a 413 request_too_large, as the API's front end answers.
func (c *call) readBody(limit int64) ([]byte, bool) {
	if c.r.ContentLength > limit {
		c.fail(&requestError{413, api.ErrRequestTooLarge, fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", limit)})
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(c.r.Body, limit+1))
	if err != nil {
		c.fail(badRequest("could not read request body: %v", err))
		return nil, false
	}
	if int64(len(b)) > limit {
		c.fail(&requestError{413, api.ErrRequestTooLarge, fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", limit)})
		return nil, false
	}
	return b, true
}

// fail writes an API error body.
func (c *call) fail(e *requestError) {
	c.failWith(e.status, api.NewErrorBody(e.typ, c.reqID, "%s", e.msg))
}

func (c *call) failWith(status int, body api.ErrorBody) {
	body.RequestID = c.reqID
	h := c.rw.Header()
	h["Content-Type"] = []string{"application/json"}
	c.rw.WriteHeader(status)
	c.rw.Write(body.Marshal())
}

// rateLimited writes a 429 with retry-after: whole seconds, at least 1, at
// K = 1 or with CoarseHeaders; milliseconds when time-scaled.
func (c *call) rateLimited(wait time.Duration, msg string) {
	h := c.rw.Header()
	if k := c.s.cfg.TimeScale; k == 1 || c.s.cfg.CoarseHeaders {
		// Whole seconds, at least 1, as the API sends.
		h["Retry-After"] = []string{strconv.FormatInt(max(1, int64((wait+time.Second-1)/time.Second)), 10)}
	} else {
		// Time-scaled: whole seconds would stretch every pause K-fold, so
		// send fractional seconds (rounded up to the millisecond), at least
		// one simulated second.
		ms := max(int64((wait+time.Millisecond-1)/time.Millisecond), int64(math.Ceil(1000/k)))
		h["Retry-After"] = []string{strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64)}
	}
	if c.s.cfg.RetryAfterMs {
		// Rounded up: a client that waits exactly this long must fit.
		h["Retry-After-Ms"] = []string{strconv.FormatInt(max(1, int64((wait+time.Millisecond-1)/time.Millisecond)), 10)}
	}
	c.fail(&requestError{429, api.ErrRateLimit, msg})
}

// writeJSON writes a 200 with v as JSON.
func (c *call) writeJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.fail(&requestError{500, api.ErrAPI, "internal error"})
		return
	}
	c.rw.Header()["Content-Type"] = []string{"application/json"}
	c.rw.Write(b)
}

// sleep waits d or until the client goes away.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) handleNotFound(rw http.ResponseWriter, r *http.Request) {
	w := s.w.Load()
	c := &call{s: s, w: w, rw: rw, r: r, reqID: w.newRequestID()}
	rw.Header()["Request-Id"] = []string{c.reqID}
	c.fail(&requestError{404, api.ErrNotFound, fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path)})
}

// dateWriter sets the Date header when the answer's headers are written
// (as net/http does, so it is the server's time of the answer), on the
// server's skewed clock, or leaves it out.
type dateWriter struct {
	http.ResponseWriter
	now     func() time.Time
	skew    time.Duration
	omit    bool
	written bool
}

func (d *dateWriter) stamp() {
	if d.written {
		return
	}
	d.written = true
	if d.omit {
		d.Header()["Date"] = nil // nil suppresses net/http's own
		return
	}
	d.Header()["Date"] = []string{d.now().Add(d.skew).UTC().Format(http.TimeFormat)}
}

func (d *dateWriter) WriteHeader(code int) {
	d.stamp()
	d.ResponseWriter.WriteHeader(code)
}

func (d *dateWriter) Write(b []byte) (int, error) {
	d.stamp()
	return d.ResponseWriter.Write(b)
}

// Flush passes streams through.
func (d *dateWriter) Flush() {
	d.stamp()
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (d *dateWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
