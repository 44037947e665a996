package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/apimodel"
)

// The model types are apimodel's: the planner reads the same ones.
type (
	// Duration is a time.Duration that reads and writes JSON as "1.5s".
	Duration = apimodel.Duration
	// Limits are per-minute limits of one org × pool.
	Limits = apimodel.Limits
	// LatencyModel is the latency of one pool's answers.
	LatencyModel = apimodel.LatencyModel
	// OutputModel picks each answer's length.
	OutputModel = apimodel.OutputModel
	// BatchModel is how an org's Message Batches queue behaves.
	BatchModel = apimodel.BatchModel
)

// OTPM accounting modes.
const (
	// OTPMActual charges the output tokens a request really produces, as the
	// rate-limits page has said since 2026-04.
	OTPMActual = "actual"
	// OTPMReserveMaxTokens reserves max_tokens at admission and refunds the
	// unused part at the end, as the 2025 docs described.
	OTPMReserveMaxTokens = "reserve_max_tokens"
)

// Key statuses.
const (
	KeyActive    = "active"
	KeyRevoked   = "revoked"   // 401 authentication_error
	KeyForbidden = "forbidden" // 403 permission_error
)

// Config is the whole simulated world. Every duration and per-minute limit is
// in simulated time; TimeScale K turns it into real time (delays ÷ K, rates
// × K). BucketWindow is the exception: see its comment. The zero value is
// not usable: start from a preset or Default.
type Config struct {
	// Seed makes answers, latency jitter and faults reproducible.
	Seed uint64 `json:"seed"`
	// TimeScale divides every latency and delay and multiplies every
	// per-minute limit (so headers report limit × K). 1 is real time.
	TimeScale float64 `json:"time_scale"`
	// OTPMMode is OTPMActual (default) or OTPMReserveMaxTokens.
	OTPMMode string `json:"otpm_mode"`
	// BucketWindow is how much of a per-minute limit a full bucket holds:
	// 60s means a bucket of the whole limit. Smaller windows model "60 RPM
	// might be enforced as 1 request per second". Unlike other durations it
	// is not divided by TimeScale: a full bucket holds the scaled limit ×
	// BucketWindow / 60s, the capacity the headers' limit implies.
	BucketWindow Duration `json:"bucket_window"`
	// BucketsStartEmpty starts every Messages bucket empty instead of full:
	// an organization whose limits were just spent (by a colleague, an
	// earlier job), so a job runs at the refill rate from its first request
	// and its steady state is not hidden by a full bucket's burst.
	BucketsStartEmpty bool `json:"buckets_start_empty,omitempty"`
	// RetryAfterMs adds a retry-after-ms header to 429s (the API is not
	// documented to send it; SDKs read it).
	RetryAfterMs bool `json:"retry_after_ms,omitempty"`
	// OmitHeaders names limiters ("requests", "tokens", "input-tokens",
	// "output-tokens") whose anthropic-ratelimit-<name>-* headers every
	// Messages answer leaves out, as some models and gateways do. The
	// limits are still enforced.
	OmitHeaders []string `json:"omit_headers,omitempty"`
	// CoarseHeaders keeps the K = 1 header precision in a time-scaled
	// world: resets in whole seconds rounded up, retry-after in whole
	// seconds (at least 1), instead of milliseconds.
	CoarseHeaders bool `json:"coarse_headers,omitempty"`
	// ResetRounding is how a whole-second reset is rounded: "up" (the
	// default: the bucket is surely full by then), "down" (truncated, as a
	// plain RFC 3339 formatter does) or "nearest". The docs do not say.
	ResetRounding string `json:"reset_rounding,omitempty"`
	// ClockSkew offsets the server's clock — its Date and its resets —
	// from the real one (a server 30 s ahead: "30s"). Not time-scaled: it
	// is a host's clock.
	ClockSkew Duration `json:"clock_skew,omitempty"`
	// OmitDate leaves the Date header out of every answer.
	OmitDate bool `json:"omit_date,omitempty"`
	// PromptCache enables the prompt-cache model.
	PromptCache bool `json:"prompt_cache"`
	// Pools maps extra model ids to pools, or overrides the catalog.
	Pools map[string]api.Pool `json:"pools,omitempty"`
	// Latency per pool; pools not listed use Latency["default"].
	Latency map[string]LatencyModel `json:"latency"`
	// Output is the deterministic answer-length model.
	Output OutputModel `json:"output"`
	// Verdicts, when enabled, answers judge requests with JSON verdicts.
	Verdicts VerdictModel `json:"verdicts"`
	// Faults injected into Messages calls.
	Faults Faults `json:"faults"`
	// Acceleration, when Enabled, refuses sharp rises of admitted rate.
	Acceleration Acceleration `json:"acceleration"`
	// Batch is the default batch processing model of every org.
	Batch BatchModel  `json:"batch"`
	Orgs  []OrgConfig `json:"orgs"`
	// Colleagues are other users of an org: open-loop load that spends the
	// same lane budgets as sluice's requests.
	Colleagues []Colleague `json:"colleagues,omitempty"`
}

// Colleague is open-loop traffic from another user of an org into one
// org × pool lane: Poisson arrivals at Share × the lane's configured RPM,
// each charged 1 request, InputTokens toward ITPM and OutputTokens toward
// OTPM at admission, or refused (and dropped: no retry) when it does not
// fit, as a 429 would refuse it.
type Colleague struct {
	Org          string  `json:"org"`   // org name
	Model        string  `json:"model"` // a model id; its pool is the lane
	Share        float64 `json:"share"` // in (0, 1]: requests per minute = Share × RPM
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	// Start delays the first arrival by this much of the world's time
	// (unscaled: TimeScale 10 makes 100 s 10 s of wall time); 0: at once.
	Start Duration `json:"start,omitempty"`
}

// Model is the API-facing part of the world c (its organizations'
// limits, queue caps and batch models, the latency, output and batch
// models, the time scale): what a sluice run meets, and what the planner
// predicts from. It shares nothing with c: maps and pointed-to values are
// copied.
func (c Config) Model() apimodel.Model {
	m := apimodel.Model{TimeScale: c.TimeScale, BucketWindow: c.BucketWindow, BucketsStartEmpty: c.BucketsStartEmpty,
		Latency: maps.Clone(c.Latency), Output: c.Output, Batch: c.Batch}
	for _, o := range c.Orgs {
		mo := apimodel.Org{Name: o.Name, Limits: maps.Clone(o.Limits), BatchQueueCap: o.BatchQueueCap}
		if o.DefaultLimits != nil {
			d := *o.DefaultLimits
			mo.DefaultLimits = &d
		}
		if o.Batch != nil {
			b := *o.Batch
			mo.Batch = &b
		}
		if o.OrgLimits != nil {
			w := *o.OrgLimits
			mo.OrgLimits = &w
		}
		m.Orgs = append(m.Orgs, mo)
	}
	return m
}

// OrgConfig is one organization: its keys, limits and batch model.
type OrgConfig struct {
	Name string      `json:"name"` // a label for stats and logs
	ID   string      `json:"id"`   // anthropic-organization-id
	Keys []KeyConfig `json:"keys"`
	// Limits per pool; pools not listed use DefaultLimits; a pool with
	// neither is unlimited.
	Limits        map[api.Pool]Limits `json:"limits"`
	DefaultLimits *Limits             `json:"default_limits"`
	// OrgLimits, when set, limit the organization's usage across all
	// pools (the rate-limits page's "Organization (all API usage)"): a
	// call must fit them and its pool's limits (orglimit.go).
	OrgLimits *Limits `json:"org_limits,omitempty"`
	// Workspaces are the org's workspaces with limits of their own
	// (workspace.go).
	Workspaces []WorkspaceConfig `json:"workspaces,omitempty"`
	// Capacity is the org's server capacity in concurrent Messages calls;
	// beyond it calls get 529 overloaded_error. 0 is unlimited.
	Capacity int `json:"capacity,omitempty"`
	// SpendCapReached makes every call a 429 with
	// enforced_spend_limit_reached and no retry-after.
	SpendCapReached bool `json:"spend_cap_reached,omitempty"`
	// TokenCountRPM limits count_tokens, separately from Messages.
	TokenCountRPM int64 `json:"token_count_rpm"`
	// BatchRPM limits all batch endpoints together.
	BatchRPM int64 `json:"batch_rpm"`
	// BatchQueueCap is the most batch requests that may wait in the
	// processing queue; a create beyond it gets 429.
	BatchQueueCap int64 `json:"batch_queue_cap"`
	// Batch overrides Config.Batch for this org.
	Batch *BatchModel `json:"batch"`
}

// KeyConfig is one API key of an org.
type KeyConfig struct {
	Label  string `json:"label"`
	Key    string `json:"key"`
	Status string `json:"status,omitempty"` // active (default), revoked, forbidden
	// Workspace is the workspace a workspace-scoped key belongs to ("":
	// a key that spans the org's workspaces, charged to the one its
	// anthropic-workspace-id names, else the default one).
	Workspace string `json:"workspace,omitempty"`
}

// VerdictModel makes the simulator a judge. When Enabled, a request whose
// system prompt asks for the default rubric's JSON verdict (see
// VerdictPrompt) is answered with a deterministic verdict,
// {"reasoning": "sim-<16 hex> …", "aligned": <0-100>, "coherent": <0-100>},
// instead of filler words; its length follows Output and max_tokens cuts it
// (then the JSON is cut too). Off by default, so requests that carry the
// rubric keep answers that start with AnswerTag.
type VerdictModel struct {
	Enabled bool `json:"enabled"`
	// RefusalRate is the fraction of judge requests answered with
	// stop_reason refusal and empty content (a pure function of the body and
	// the seed, so a re-issue of the same body is refused again).
	RefusalRate float64 `json:"refusal_rate,omitempty"`
}

// Faults are probabilities per Messages call.
type Faults struct {
	P500   float64 `json:"p500"`   // 500 api_error
	P529   float64 `json:"p529"`   // 529 overloaded_error
	PReset float64 `json:"preset"` // admitted and billed, then the connection drops with no answer
	PSlow  float64 `json:"pslow"`  // latency multiplied by SlowFactor
	// PCreateLost: a batch create succeeds (the batch exists and runs),
	// then its answer is lost — half the time the connection drops, half
	// the time a 500 api_error comes back instead of the batch. What the
	// caller must reconcile through the list, or pay twice.
	PCreateLost float64 `json:"pcreate_lost"`
	// SlowFactor multiplies the latency of a slow answer (default 20).
	SlowFactor float64 `json:"slow_factor"`
	// Storms are windows of extra 529s.
	Storms []Storm `json:"storms,omitempty"`
}

// Storm is a window of overload: from Start to Start+Length after the world
// started (simulated time), a Messages call that escaped the other faults
// gets 529 overloaded_error with probability P529, before admission.
type Storm struct {
	Start  Duration `json:"start"`
	Length Duration `json:"length"`
	P529   float64  `json:"p529"`
}

// Acceleration refuses an org × pool whose admitted rate over Window rises
// above Factor × its rate over the last LongWindows × Window, once past
// FloorRPM. The docs publish no figure for any of these, so worlds vary
// all four.
type Acceleration struct {
	Enabled  bool     `json:"enabled"`
	Window   Duration `json:"window"`
	Factor   float64  `json:"factor"`
	FloorRPM float64  `json:"floor_rpm"`
	// LongWindows is the long window as a multiple of Window (default 6;
	// it must exceed 1).
	LongWindows float64 `json:"long_windows,omitempty"`
}

// longWindows is LongWindows or its default.
func (a Acceleration) longWindows() float64 {
	if a.LongWindows == 0 {
		return 6
	}
	return a.LongWindows
}

// LoadConfig reads a JSON config file. Fields left out keep the values of
// base, so a file can override only what it names.
func LoadConfig(path string, base Config) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("sim: %w", err)
	}
	cfg := base
	// The maps are the base's: decoding merges into them, so copy them
	// first, or the caller's base would change too.
	cfg.Latency = maps.Clone(base.Latency)
	cfg.Pools = maps.Clone(base.Pools)
	// Lists are replaced whole: decoding into a slice would otherwise keep
	// the base's fields in elements the file only partly spells out.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Config{}, fmt.Errorf("sim: config %s: %w", path, err)
	}
	if _, ok := top["orgs"]; ok {
		cfg.Orgs = nil
	}
	if _, ok := top["colleagues"]; ok {
		cfg.Colleagues = nil
	}
	if raw, ok := top["faults"]; ok {
		var faults map[string]json.RawMessage
		if json.Unmarshal(raw, &faults) == nil {
			if _, ok := faults["storms"]; ok {
				cfg.Faults.Storms = nil
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("sim: config %s: %w", path, err)
	}
	return cfg, cfg.Validate()
}

// Validate reports the first problem that would make the world ill-defined.
func (c *Config) Validate() error {
	if c.TimeScale <= 0 {
		return fmt.Errorf("sim: time_scale must be > 0, got %v", c.TimeScale)
	}
	switch c.OTPMMode {
	case "", OTPMActual, OTPMReserveMaxTokens:
	default:
		return fmt.Errorf("sim: otpm_mode must be %q or %q, got %q", OTPMActual, OTPMReserveMaxTokens, c.OTPMMode)
	}
	switch c.ResetRounding {
	case "", "up", "down", "nearest":
	default:
		return fmt.Errorf(`sim: reset_rounding must be "up", "down" or "nearest", got %q`, c.ResetRounding)
	}
	if c.BucketWindow <= 0 || c.BucketWindow.D() > time.Minute {
		return fmt.Errorf("sim: bucket_window must be in (0, 1m], got %v", c.BucketWindow.D())
	}
	if c.Output.Min < 1 || c.Output.Max < c.Output.Min {
		return fmt.Errorf("sim: output needs 1 <= min <= max, got [%d, %d]", c.Output.Min, c.Output.Max)
	}
	if _, ok := c.Latency["default"]; !ok {
		return errors.New(`sim: latency needs a "default" entry`)
	}
	for name, l := range c.Latency {
		if l.TokensPerSec <= 0 || l.TTFT < 0 || l.Sigma < 0 {
			return fmt.Errorf("sim: latency %q needs tokens_per_sec > 0, ttft >= 0, sigma >= 0", name)
		}
	}
	f := c.Faults
	for _, p := range []float64{f.P500, f.P529, f.PReset, f.PSlow, f.PCreateLost} {
		if p < 0 || p > 1 {
			return fmt.Errorf("sim: fault probabilities must be in [0,1]")
		}
	}
	if f.P500+f.P529 > 1 {
		return fmt.Errorf("sim: p500 + p529 must not exceed 1")
	}
	for i, st := range f.Storms {
		if !(st.P529 >= 0 && st.P529 <= 1) || st.Length <= 0 || st.Start < 0 {
			return fmt.Errorf("sim: faults.storms[%d] needs p529 in [0,1], length > 0, start >= 0", i)
		}
	}
	for _, name := range c.OmitHeaders {
		if !knownLimiter(name) {
			return fmt.Errorf("sim: omit_headers: unknown limiter %q (want requests, tokens, input-tokens or output-tokens)", name)
		}
	}
	if r := c.Verdicts.RefusalRate; r < 0 || r > 1 {
		return fmt.Errorf("sim: verdicts.refusal_rate must be in [0,1], got %v", r)
	}
	if c.Acceleration.Enabled && (c.Acceleration.Window <= 0 || c.Acceleration.Factor <= 1 || c.Acceleration.longWindows() <= 1) {
		return fmt.Errorf("sim: acceleration needs window > 0, factor > 1 and long_windows > 1")
	}
	if len(c.Orgs) == 0 {
		return errors.New("sim: no organizations configured")
	}
	if err := validateBatch(c.Batch, "batch"); err != nil {
		return err
	}
	seenKey := map[string]bool{}
	seenOrg := map[string]bool{}
	for _, o := range c.Orgs {
		if o.Name == "" || o.ID == "" {
			return errors.New("sim: every org needs a name and an id")
		}
		if seenOrg[o.Name] || seenOrg[o.ID] {
			return fmt.Errorf("sim: org %q defined twice", o.Name)
		}
		seenOrg[o.Name], seenOrg[o.ID] = true, true
		if len(o.Keys) == 0 {
			return fmt.Errorf("sim: org %q has no keys", o.Name)
		}
		for _, k := range o.Keys {
			if k.Key == "" || k.Label == "" {
				return fmt.Errorf("sim: org %q has a key without label or value", o.Name)
			}
			if seenKey[k.Key] {
				// Never echo the key itself.
				return fmt.Errorf("sim: key %q of org %q is used twice", k.Label, o.Name)
			}
			seenKey[k.Key] = true
			switch k.Status {
			case "", KeyActive, KeyRevoked, KeyForbidden:
			default:
				return fmt.Errorf("sim: key %q has unknown status %q", k.Label, k.Status)
			}
		}
		if o.Batch != nil {
			if err := validateBatch(*o.Batch, "org "+o.Name+" batch"); err != nil {
				return err
			}
		}
		if l := o.OrgLimits; l != nil && (l.RPM < 0 || l.ITPM < 0 || l.OTPM < 0) {
			return fmt.Errorf("sim: org %q: org_limits must not be negative", o.Name)
		}
		wss := map[string]bool{}
		for _, w := range o.Workspaces {
			if !strings.HasPrefix(w.ID, "wrkspc_") || wss[w.ID] {
				return fmt.Errorf("sim: org %q: workspace %q: ids start with wrkspc_ and are unique", o.Name, w.ID)
			}
			wss[w.ID] = true
		}
		for _, k := range o.Keys {
			if k.Workspace != "" && !wss[k.Workspace] {
				return fmt.Errorf("sim: key %q of org %q: workspace %q is not one of the org's workspaces", k.Label, o.Name, k.Workspace)
			}
		}
	}
	for i, cl := range c.Colleagues {
		where := fmt.Sprintf("sim: colleagues[%d]", i)
		var o *OrgConfig
		for j := range c.Orgs {
			if c.Orgs[j].Name == cl.Org {
				o = &c.Orgs[j]
			}
		}
		if o == nil {
			return fmt.Errorf("%s: no org named %q", where, cl.Org)
		}
		p, ok := c.poolOf(cl.Model)
		if !ok {
			return fmt.Errorf("%s: unknown model %q", where, cl.Model)
		}
		if !(cl.Share > 0 && cl.Share <= 1) {
			return fmt.Errorf("%s: share must be in (0, 1], got %v", where, cl.Share)
		}
		if cl.InputTokens < 0 || cl.OutputTokens < 0 {
			return fmt.Errorf("%s: input_tokens and output_tokens must be >= 0", where)
		}
		if cl.Start < 0 {
			return fmt.Errorf("%s: start must be >= 0", where)
		}
		if o.limitsFor(p).RPM <= 0 {
			return fmt.Errorf("%s: org %q has no RPM limit for pool %s, so share has nothing to be a share of", where, cl.Org, p)
		}
	}
	return nil
}

// knownLimiter reports whether name is one of api.Limiters.
func knownLimiter(name string) bool {
	for _, l := range api.Limiters {
		if string(l) == name {
			return true
		}
	}
	return false
}

// limitsFor returns the org's limits for pool p: its own entry, else
// DefaultLimits, else none (unlimited).
func (o *OrgConfig) limitsFor(p api.Pool) Limits {
	if lim, ok := o.Limits[p]; ok {
		return lim
	}
	if o.DefaultLimits != nil {
		return *o.DefaultLimits
	}
	return Limits{}
}

func validateBatch(b BatchModel, where string) error {
	if b.ProcessingRate <= 0 {
		return fmt.Errorf("sim: %s: processing_rate must be > 0", where)
	}
	if b.Expiry <= 0 {
		return fmt.Errorf("sim: %s: expiry must be > 0", where)
	}
	if b.ErrorRate < 0 || b.ErrorRate > 1 {
		return fmt.Errorf("sim: %s: error_rate must be in [0,1]", where)
	}
	if b.CacheHit < 0 || b.CacheHit > 1 || b.PrimeHit < 0 || b.PrimeHit > 1 {
		return fmt.Errorf("sim: %s: cache_hit and prime_hit must be in [0,1]", where)
	}
	return nil
}

// latencyFor returns the latency model of pool p.
func (c *Config) latencyFor(p api.Pool) LatencyModel {
	if l, ok := c.Latency[string(p)]; ok {
		return l
	}
	return c.Latency["default"]
}

// poolOf maps a model to its pool, config overrides first. ok is false for a
// model neither the catalog nor the config knows: the API answers 404.
func (c *Config) poolOf(model string) (api.Pool, bool) {
	if p, ok := c.Pools[model]; ok {
		return p, true
	}
	if m, ok := api.LookupModel(model); ok {
		return m.Pool, true
	}
	return "", false
}
