// Package apimodel is the calibrated model of the Anthropic API that the
// simulator serves and the planner predicts from: per-minute limits, the
// latency and answer-length models, the Message Batches queue, and Model,
// the API-facing description of a world (its organizations and their
// limits, its time scale). sim builds its worlds from these types
// (sim.Config.Model gives one back) and plan turns a Model into its own
// World, so neither imports the other and the numbers have one owner.
package apimodel

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Duration is a time.Duration that reads and writes JSON as "1.5s", "24h".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d in time.Duration's string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts "1.5s"-style strings or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("bad duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("a duration must be a string like \"2s\" or a number of seconds, got %s", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// Limits are per-minute limits of one org × pool.
type Limits struct {
	RPM  int64 `json:"rpm"`
	ITPM int64 `json:"itpm"`
	OTPM int64 `json:"otpm"`
}

// LatencyModel: time to first token plus output tokens ÷ TokensPerSec, times
// a log-normal jitter exp(Sigma·N(0,1)).
type LatencyModel struct {
	TTFT         Duration `json:"ttft"`
	TokensPerSec float64  `json:"tokens_per_sec"`
	Sigma        float64  `json:"sigma"`
}

// OutputModel picks each answer's length, uniformly in [Min, Max] tokens,
// as a function of the request body (so it repeats), capped by max_tokens.
type OutputModel struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// BatchModel is how an org's Message Batches queue behaves.
type BatchModel struct {
	// A batch starts AdmissionBase + AdmissionPerRequest × n after create.
	AdmissionBase       Duration `json:"admission_base"`
	AdmissionPerRequest Duration `json:"admission_per_request"`
	// ProcessingRate is requests per second the org's queue processes,
	// oldest started batch first.
	ProcessingRate float64 `json:"processing_rate"`
	// StarveAbove > 0: batches with more requests than this start
	// StarveFor later (the 8,000-request starvation the old system hit).
	StarveAbove int      `json:"starve_above,omitempty"`
	StarveFor   Duration `json:"starve_for,omitempty"`
	// ReadAfterWrite: a batch answers 404 for this long after create.
	ReadAfterWrite Duration `json:"read_after_write,omitempty"`
	// CancelDelay is how long a canceling batch keeps processing.
	CancelDelay Duration `json:"cancel_delay"`
	// Expiry is the batch lifetime (24h in the API).
	Expiry Duration `json:"expiry"`
	// ErrorRate is the probability a processed row is errored (api_error).
	ErrorRate float64 `json:"error_rate,omitempty"`
	// CacheHit is the probability that a row whose prompt-cache prefix an
	// earlier batch left warm on the org (when its batch begins
	// processing) reads it; PrimeHit the same for a prefix only sync
	// requests wrote (a primer). Hits in Message Batches are best effort
	// ("typically 30 % to 98 %"); users measured a batch after a warm
	// batch at 100 % and one after a sync pre-warm at 0–16 %, so the two
	// readings are apart. A row that does not read writes; a batch's rows
	// never read what rows of the same batch wrote (they run together),
	// so a cold batch reads nothing. 0: never. (An org's batch override
	// replaces the whole model: give both there.)
	CacheHit float64 `json:"cache_hit"`
	PrimeHit float64 `json:"prime_hit"`
}

// DefaultBatch reproduces what the old system observed: 500-request
// batches done in about 5 minutes (3.5 min admission + 100 s processing),
// batches above 5,000 requests not starting for 8 hours.
func DefaultBatch() BatchModel {
	return BatchModel{
		AdmissionBase:       Duration(60 * time.Second),
		AdmissionPerRequest: Duration(300 * time.Millisecond),
		ProcessingRate:      5,
		StarveAbove:         5000,
		StarveFor:           Duration(8 * time.Hour),
		ReadAfterWrite:      Duration(2 * time.Second),
		CancelDelay:         Duration(10 * time.Second),
		Expiry:              Duration(api.BatchLifetime),
		CacheHit:            0.8,
		PrimeHit:            0.8,
	}
}

// DefaultLatency: Sonnet fits the old system's Phase 1 runs (max_tokens 64:
// p50 ≈ 1.5 s, p95 ≈ 2.3 s); Haiku and Opus follow the third-party priors in
// anthropic-api.md §8.
func DefaultLatency() map[string]LatencyModel {
	return map[string]LatencyModel{
		"default":               {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 64, Sigma: 0.25},
		string(api.PoolSonnet4): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 64, Sigma: 0.25},
		string(api.PoolSonnet5): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 70, Sigma: 0.25},
		string(api.PoolHaiku45): {TTFT: Duration(400 * time.Millisecond), TokensPerSec: 110, Sigma: 0.25},
		string(api.PoolHaiku35): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 68, Sigma: 0.25},
		string(api.PoolOpus4):   {TTFT: Duration(1200 * time.Millisecond), TokensPerSec: 45, Sigma: 0.3},
		string(api.PoolOpus5):   {TTFT: Duration(1200 * time.Millisecond), TokensPerSec: 45, Sigma: 0.3},
		string(api.PoolFable5):  {TTFT: Duration(2000 * time.Millisecond), TokensPerSec: 35, Sigma: 0.3},
	}
}

// DefaultOutput is the answer-length model of every preset: uniform in
// 32-256 tokens (a judge's verdict), 144 on average.
func DefaultOutput() OutputModel { return OutputModel{Min: 32, Max: 256} }

// DefaultBucketWindow is how many seconds of its limit a simulated bucket
// holds when full: a minute, the rate-limits page's "up to the limit".
const DefaultBucketWindow = Duration(time.Minute)

// Org is one organization as the planner sees it: its per-pool limits
// (pools not listed use DefaultLimits), how many batch requests may wait
// in its queue, and its batch queue model when it differs from the
// world's.
type Org struct {
	Name          string
	Limits        map[api.Pool]Limits
	DefaultLimits *Limits
	// OrgLimits, when set, limit the organization's usage across all
	// pools: a job of one model is bound by the smaller of each.
	OrgLimits     *Limits
	BatchQueueCap int64
	Batch         *BatchModel
}

// Within returns l bounded by the organization-wide limits w (nil: l);
// 0 is unlimited on either side.
func (l Limits) Within(w *Limits) Limits {
	if w == nil {
		return l
	}
	lo := func(a, b int64) int64 {
		switch {
		case a <= 0:
			return b
		case b <= 0:
			return a
		}
		return min(a, b)
	}
	return Limits{RPM: lo(l.RPM, w.RPM), ITPM: lo(l.ITPM, w.ITPM), OTPM: lo(l.OTPM, w.OTPM)}
}

// Model is a world's API-facing description, in simulated time: every
// per-minute limit and processing rate is per simulated minute, every
// duration a simulated one, and TimeScale (K ≥ 1) how many simulated
// seconds pass per real second.
type Model struct {
	TimeScale    float64
	BucketWindow Duration
	// BucketsStartEmpty: every bucket is drained when the job starts (as
	// by a colleague's or an earlier job's use), not full.
	BucketsStartEmpty bool
	Latency           map[string]LatencyModel // per pool; "default" for the rest
	Output            OutputModel
	Batch             BatchModel
	Orgs              []Org
}

// Default is the calibrated model with no organizations, at time scale 1.
func Default() Model {
	return Model{TimeScale: 1, BucketWindow: DefaultBucketWindow, Latency: DefaultLatency(), Output: DefaultOutput(), Batch: DefaultBatch()}
}
