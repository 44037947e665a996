package sim

import (
	"encoding/json"
	"maps"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// LaneStats counts what happened in one org × pool.
type LaneStats struct {
	Admitted    int64            `json:"admitted"`
	RateLimited int64            `json:"rate_limited"`
	LimitedBy   map[string]int64 `json:"limited_by"` // requests, input_tokens, output_tokens, acceleration
	SpendCapped int64            `json:"spend_capped"`
	// ServerErrors are injected 500s; Overloaded are 529s (injected or over
	// capacity); Resets are admitted calls whose connection was dropped.
	ServerErrors int64 `json:"server_errors"`
	Overloaded   int64 `json:"overloaded"`
	Resets       int64 `json:"resets"`
	Slow         int64 `json:"slow"`
	// Tokens billed for admitted calls.
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Billed is the same by model and price class (billing.go).
	Billed          Bills `json:"billed,omitempty"`
	PeakConcurrency int   `json:"peak_concurrency"`
	InFlight        int   `json:"in_flight"`
	// AdmittedPerSecond[i] counts admissions in real second i since the
	// lane was created (its first request, or the world's start for a lane
	// with colleagues).
	AdmittedPerSecond []int64 `json:"admitted_per_second"`
	// Colleague traffic (Config.Colleagues), counted only here: arrivals
	// admitted into the lane's buckets, and arrivals refused and dropped.
	ColleagueAdmitted int64 `json:"colleague_admitted"`
	ColleagueLimited  int64 `json:"colleague_limited"`
	// Levels are the buckets' levels at the stats' time.
	Levels *Levels `json:"levels,omitempty"`
}

func (s *LaneStats) bill(u api.Usage) {
	s.InputTokens += u.InputTokens
	s.OutputTokens += u.OutputTokens
	s.CacheReadTokens += u.CacheReadInputTokens
	s.CacheWriteTokens += u.CacheCreationInputTokens
}

// Levels are a lane's bucket levels at the stats' time (unrounded; 0 for
// an unlimited dimension): a benchmark subtracts what a job spent of a
// bucket's initial level from the rate it measured, so a burst is not
// taken for pacing.
type Levels struct {
	Requests     float64 `json:"requests"`
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
}

// OrgCounters are org-level counts outside the Messages lanes.
type OrgCounters struct {
	TokenCountLimited int64 `json:"token_count_limited"`
	// Versions counts authenticated calls by anthropic-version, and
	// Workspaces by the anthropic-workspace-id they sent ("" : none).
	Versions   map[string]int64 `json:"versions,omitempty"`
	Workspaces map[string]int64 `json:"workspaces,omitempty"`
	// OrgLimited counts the calls the organization's limit across all
	// pools refused, by limiter (orglimit.go).
	OrgLimited map[string]int64 `json:"org_limited,omitempty"`
}

// BatchCounters count an org's Message Batches activity.
type BatchCounters struct {
	Created   int64 `json:"created"`
	Requests  int64 `json:"requests"`
	QueueFull int64 `json:"queue_full"`
	// CreateLost counts creates whose batch exists but whose answer was
	// lost (faults.pcreate_lost); they are in Created too.
	CreateLost     int64 `json:"create_lost"`
	RateLimited    int64 `json:"rate_limited"`
	CancelRequests int64 `json:"cancel_requests"`
	Ended          int64 `json:"ended"`
	Succeeded      int64 `json:"succeeded"`
	Errored        int64 `json:"errored"`
	Canceled       int64 `json:"canceled"`
	Expired        int64 `json:"expired"`
	// InputTokens are the succeeded rows' uncached input tokens;
	// CacheReadTokens and CacheWriteTokens their prompt-cache input.
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Billed is the succeeded rows' tokens by model and price class
	// (billing.go).
	Billed Bills `json:"billed,omitempty"`
	// Queued is the number of requests waiting in the processing queue.
	Queued int64 `json:"queued"`
}

// KeyStats counts one key's use.
type KeyStats struct {
	Status string `json:"status"`
	Calls  int64  `json:"calls"`  // authenticated calls
	Denied int64  `json:"denied"` // 401/403 for a revoked or forbidden key
}

// OrgStats is one organization's part of Stats.
type OrgStats struct {
	ID       string                 `json:"id"`
	Pools    map[api.Pool]LaneStats `json:"pools"`
	Keys     map[string]KeyStats    `json:"keys"` // by label, never by key
	Batches  BatchCounters          `json:"batches"`
	Counters OrgCounters            `json:"counters"`
}

// BodyStats tells whether any request was answered twice.
type BodyStats struct {
	// DistinctAnswered is the number of distinct request bodies answered
	// successfully (Messages 200s and succeeded batch rows).
	DistinctAnswered int64 `json:"distinct_answered"`
	// AnsweredMoreThanOnce is how many of those were answered again.
	AnsweredMoreThanOnce int64 `json:"answered_more_than_once"`
	// ExtraAnswers sums the answers beyond each body's first.
	ExtraAnswers int64 `json:"extra_answers"`
}

// Stats is the body of GET /_sim/stats.
type Stats struct {
	StartedAt time.Time           `json:"started_at"`
	Now       time.Time           `json:"now"`
	TimeScale float64             `json:"time_scale"`
	Orgs      map[string]OrgStats `json:"orgs"` // by org name
	Bodies    BodyStats           `json:"bodies"`
}

// Stats returns a snapshot of the current world's statistics.
func (s *Server) Stats() Stats {
	w := s.w.Load()
	now := s.now()
	st := Stats{StartedAt: w.started.UTC(), Now: now.UTC(), TimeScale: s.cfg.TimeScale, Orgs: map[string]OrgStats{}}
	for _, o := range w.orgs {
		os := OrgStats{ID: o.cfg.ID, Pools: map[api.Pool]LaneStats{}, Keys: map[string]KeyStats{}}
		o.mu.Lock()
		lanes := make([]*lane, 0, len(o.lanes))
		for _, l := range o.lanes {
			lanes = append(lanes, l)
		}
		os.Counters = o.counters
		os.Counters.Versions = maps.Clone(o.counters.Versions)
		os.Counters.Workspaces = maps.Clone(o.counters.Workspaces)
		os.Counters.OrgLimited = o.orgWideStats()
		o.mu.Unlock()
		for _, l := range lanes {
			l.mu.Lock()
			l.catchUp(now) // colleagues spend whether or not sluice calls
			ls := l.stats
			ls.InFlight = l.inFlight
			ls.LimitedBy = make(map[string]int64, len(l.stats.LimitedBy))
			for k, v := range l.stats.LimitedBy {
				ls.LimitedBy[k] = v
			}
			ls.AdmittedPerSecond = append([]int64(nil), l.stats.AdmittedPerSecond...)
			ls.Billed = l.stats.Billed.clone()
			ls.Levels = &Levels{Requests: l.req.levelAt(now), InputTokens: l.in.levelAt(now), OutputTokens: l.out.levelAt(now)}
			l.mu.Unlock()
			os.Pools[l.pool] = ls
		}
		q := &o.batches
		q.mu.Lock()
		q.advance(now)
		os.Batches = q.counters
		os.Batches.Billed = q.counters.Billed.clone()
		os.Batches.Queued = q.queued()
		q.mu.Unlock()
		st.Orgs[o.cfg.Name] = os
	}
	for _, k := range w.keys {
		os := st.Orgs[k.org.cfg.Name]
		os.Keys[k.label] = KeyStats{Status: k.status.Load().(string), Calls: k.used.Load(), Denied: k.denied.Load()}
	}
	w.bodies.mu.Lock()
	st.Bodies = BodyStats{DistinctAnswered: w.bodies.distinct, AnsweredMoreThanOnce: w.bodies.repeated, ExtraAnswers: w.bodies.extra}
	w.bodies.mu.Unlock()
	return st
}

// Control endpoints: unauthenticated, for tests and benchmarks on loopback.

func (s *Server) handleStats(rw http.ResponseWriter, r *http.Request) {
	writeControl(rw, s.Stats())
}

func (s *Server) handleReset(rw http.ResponseWriter, r *http.Request) {
	s.Reset()
	writeControl(rw, map[string]string{"status": "reset"})
}

func (s *Server) handleConfig(rw http.ResponseWriter, r *http.Request) {
	writeControl(rw, s.cfg)
}

// handleKeyStatus sets a key's status: {"label": "batch", "status": "revoked"}.
func (s *Server) handleKeyStatus(rw http.ResponseWriter, r *http.Request) {
	var in struct{ Label, Status string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeControlStatus(rw, 400, map[string]string{"error": "body must be {\"label\":…, \"status\":…}"})
		return
	}
	if err := s.SetKeyStatus(in.Label, in.Status); err != nil {
		writeControlStatus(rw, 400, map[string]string{"error": err.Error()})
		return
	}
	writeControl(rw, map[string]string{"label": in.Label, "status": in.Status})
}

func writeControl(rw http.ResponseWriter, v any) { writeControlStatus(rw, 200, v) }

func writeControlStatus(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
