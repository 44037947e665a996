package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/apimodel"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// Limits are an organization's per-minute rate limits for one model pool.
// Zero means unlimited.
type Limits struct {
	RPM  float64 `json:"rpm"`
	ITPM float64 `json:"itpm"`
	OTPM float64 `json:"otpm"`
}

// Latency is the latency model of one pool: an answer of k output tokens
// takes (TTFT + k ÷ TokensPerSec) · math.Exp(Sigma · z), z standard normal.
type Latency struct {
	TTFT         time.Duration
	TokensPerSec float64
	Sigma        float64
}

// mean is the mean latency, in seconds, of answers averaging out tokens:
// the log-normal factor's mean is math.Exp(σ²/2).
func (l Latency) mean(out float64) float64 {
	return l.median(out) * math.Exp(l.Sigma*l.Sigma/2)
}

// median is the median latency in seconds (the log-normal factor's median
// is 1).
func (l Latency) median(out float64) float64 {
	return l.TTFT.Seconds() + out/l.TokensPerSec
}

// quantile is the latency in seconds at z standard deviations of the
// log-normal factor (z = 2.326 is the 99th percentile).
func (l Latency) quantile(out, z float64) float64 {
	return l.median(out) * math.Exp(l.Sigma*z)
}

// Ramp is the engine's warm-up: a lane's concurrency limit starts at
// Start and doubles every Doubling up to the etiquette cap while the lane
// is full. The engine times it by answers (lane.RampDoublingLatencies
// mean latencies per doubling), so by default so does the model.
type Ramp struct {
	// Start is the first ceiling; 0 means the engine's default,
	// max(4, cap/8).
	Start int
	// Doubling is how often the ceiling doubles; 0 means the engine's:
	// lane.RampDoublingLatencies × the lane's mean latency.
	Doubling time.Duration
}

// doubling is how often the ramp doubles on a lane of mean latency lat
// (seconds).
func (r Ramp) doubling(lat float64) float64 {
	if r.Doubling > 0 {
		return r.Doubling.Seconds()
	}
	return lane.RampDoublingLatencies * lat
}

// start is the first ceiling of a lane with etiquette cap c.
func (r Ramp) start(c int) int {
	s := r.Start
	if s <= 0 {
		s = max(4, c/8)
	}
	return min(s, c)
}

// BatchModel is how one organization's Message Batches queue behaves, as
// the simulator models it (docs/sim.md): a batch of n requests starts
// AdmissionBase + AdmissionPerRequest·n after create, plus StarveFor when
// n > StarveAbove; the org processes ProcessingRate requests per second,
// oldest started batch first; a batch not ended Expiry after create
// expires.
type BatchModel struct {
	AdmissionBase       time.Duration
	AdmissionPerRequest time.Duration
	// ProcessingRate is requests per second, per organization.
	ProcessingRate float64
	// StarveAbove > 0: batches of more requests start StarveFor later.
	StarveAbove int
	StarveFor   time.Duration
	Expiry      time.Duration
}

// admission is the delay, in seconds, from create to start of a batch of n
// requests.
func (b BatchModel) admission(n int) float64 {
	a := b.AdmissionBase.Seconds() + b.AdmissionPerRequest.Seconds()*float64(n)
	if b.StarveAbove > 0 && n > b.StarveAbove {
		a += b.StarveFor.Seconds()
	}
	return a
}

// DocumentedBatchQueue is the processing-queue bound of the lowest tier the
// rate-limits page documents (Tier 1: 100,000 batch requests; Start
// 200,000, Build 300,000, Scale 500,000): what an organization whose queue
// was never seen full is planned with, so a plan never counts on more.
const DocumentedBatchQueue = 100_000

// Org is one organization: every key of an org shares its limits, its
// etiquette caps and its batch queue.
type Org struct {
	Name string
	// Limits per pool; pools not listed use DefaultLimits; a pool with
	// neither is unlimited.
	Limits        map[api.Pool]Limits
	DefaultLimits *Limits
	// BatchQueueCap is the most batch requests that may wait in the org's
	// processing queue (0: unknown, treated as unlimited). For real keys
	// it is what a full queue showed, else DocumentedBatchQueue.
	BatchQueueCap int
	// Batch overrides World.Batch for this org.
	Batch *BatchModel
}

// limits returns the org's limits for pool p.
func (o Org) limits(p api.Pool) Limits {
	if l, ok := o.Limits[p]; ok {
		return l
	}
	if o.DefaultLimits != nil {
		return *o.DefaultLimits
	}
	return Limits{}
}

// OutputModel is the answer-length model used when a Job does not give its
// mean output: uniform on the integers [Min, Max], capped by max_tokens
// (the simulator's model).
type OutputModel struct {
	Min, Max int
}

// World is everything the planner knows that is not the job: the
// organizations, the engine's etiquette (caps, reserve, ramp) and the
// latency and batch-queue models. The zero value is not usable: build one
// with FromModel, NewWorld or ReadWorld, then change fields as
// needed. A World is a value; Decide does not modify it.
type World struct {
	// Name labels the world in reports ("three-org", "my-keys").
	Name string
	Orgs []Org
	// Caps are the etiquette caps on concurrent requests per organization,
	// by model family; a family not listed uses DefaultCaps.
	Caps map[api.Family]int
	// Reserve is the fraction of every rate-limit bucket the engine leaves
	// for colleagues, in [0, 1).
	Reserve float64
	// BucketWindow is how much of a per-minute limit a full bucket holds
	// (60 s: the whole limit). A lane bound by a bucket first spends what
	// the bucket holds above the Reserve — at most (1 − Reserve) · limit ·
	// BucketWindow — before it is paced at the refill rate (the burst:
	// docs/plan.md, "The initial burst").
	BucketWindow time.Duration
	// BucketDrained is the fraction of every bucket's depth already spent
	// when the job starts: 0 (the default) is full, an idle organization's
	// state; 1 is empty. A fresh probe's remaining headers, or a re-plan's
	// lanes, measure it. The burst starts from it, gains the refill while
	// the header probe is out and what the ramp leaves unspent, and loses
	// the first wave.
	BucketDrained float64
	// BucketsKnown says BucketWindow and BucketDrained were configured or
	// measured (a simulator's configuration, a limits file giving both,
	// every org's own learned depth and fresh probe, every live lane's
	// learned depth in a re-plan), not assumed. Only then does the
	// central prediction count the burst the buckets hold when a lane's
	// sending first passes their refill (docs/plan.md, "The initial
	// burst"); the low end always counts it, the high end never.
	BucketsKnown bool
	Ramp         Ramp
	// Latency per pool; pools not listed use DefaultLatency.
	Latency        map[api.Pool]Latency
	DefaultLatency Latency
	Output         OutputModel
	// Batch is every org's batch queue model unless the org overrides it.
	Batch BatchModel
	// BatchOverhead is added once to every batch route's wall-clock: the
	// create calls and fetching the last results. (The wait for the poll
	// that sees a batch's end is modelled per batch: Poll.)
	BatchOverhead time.Duration
	// Poll is the batch path's poll schedule of one batch (zero: the
	// defaults).
	Poll Poll
	// Efficiency is the fraction of the modelled sync sending rate the
	// job gets (0: all of it, 1). A re-plan mid-run sets it to the
	// measured rate over the modelled one, so what the model cannot see
	// (a colleague on the keys, 529s, shallow buckets) moves the decision
	// (docs/route.md, "Re-planning mid-run").
	Efficiency float64
}

// Poll is the batch path's poll schedule of one batch: the first poll
// Min after the create, each interval ×1.5 up to Max (batch.Config's
// PollMin and PollMax; route tests check the defaults agree).
type Poll struct {
	Min, Max time.Duration
}

// The batch path's default poll schedule (batch.DefaultPollMin, Max).
const (
	DefaultPollMin = 2 * time.Second
	DefaultPollMax = 60 * time.Second
)

// SeenAtOnce is a poll schedule that sees every end as it happens: the
// queue model alone, without the batch path's polling.
var SeenAtOnce = Poll{Min: -1}

// seenAfter returns how long after its create a batch that ends x seconds
// after it is seen ended: the first poll at or after x.
func (p Poll) seenAfter(x float64) float64 {
	lo, hi := p.Min.Seconds(), p.Max.Seconds()
	if lo < 0 {
		return x // SeenAtOnce
	}
	hi = max(hi, lo)
	t, d := 0.0, lo
	for t < x {
		if d >= hi {
			// Every hi from here: jump to the poll at or after x.
			return t + math.Ceil((x-t)/hi)*hi
		}
		t += d
		d = min(d*1.5, hi)
	}
	return t
}

// poll is w.Poll with the defaults filled in.
func (w World) poll() Poll {
	p := w.Poll
	if p.Min < 0 {
		return p // SeenAtOnce
	}
	if p.Min == 0 {
		p.Min = DefaultPollMin
	}
	if p.Max <= 0 {
		p.Max = DefaultPollMax
	}
	return p
}

// DefaultCaps are the engine's etiquette caps (dispatch.DefaultCaps): at
// most this many requests in flight per organization and model family.
var DefaultCaps = map[api.Family]int{
	api.FamilySonnet: 100, api.FamilyHaiku: 120, api.FamilyOpus: 40, api.FamilyFable: 40, api.FamilyUnknown: 40,
}

// Defaults of the engine and the batch path that a World starts from.
const (
	DefaultReserve       = 0.15
	DefaultBucketWindow  = time.Minute
	DefaultBatchOverhead = 5 * time.Second
)

// cap returns the etiquette cap of family f.
func (w World) cap(f api.Family) int {
	if c, ok := w.Caps[f]; ok && c > 0 {
		return c
	}
	if c, ok := DefaultCaps[f]; ok {
		return c
	}
	return DefaultCaps[api.FamilyUnknown]
}

func (w World) latency(p api.Pool) Latency {
	if l, ok := w.Latency[p]; ok {
		return l
	}
	return w.DefaultLatency
}

func (w World) batchModel(o Org) BatchModel {
	if o.Batch != nil {
		return *o.Batch
	}
	return w.Batch
}

// NewWorld returns a world of the given organizations with the engine's
// defaults (DefaultCaps, DefaultReserve, DefaultBucketWindow, the ramp
// max(4, cap/8) doubling every 5 s) and the calibrated latency, output and
// batch-queue models (apimodel.Default; docs/plan.md gives their
// provenance).
func NewWorld(name string, orgs ...Org) World {
	w := FromModel(apimodel.Default(), nil)
	w.Name = name
	w.BucketsKnown = false // the default model's buckets are an assumption about these orgs
	w.Orgs = append([]Org(nil), orgs...)
	return w
}

// FromModel returns the world a sluice run would meet against an API
// described by m (sim.Config.Model gives the simulator's), with etiquette
// caps caps (nil or missing families: DefaultCaps). The time scale K is
// applied as the simulator applies it: limits and processing rates × K,
// latencies and batch delays ÷ K, so predictions are in real time. The
// bucket window is not scaled (the simulator's buckets hold the same
// number of real seconds of refill at any K). The engine's ramp is timed
// by its latency, so it follows K.
func FromModel(m apimodel.Model, caps map[api.Family]int) World {
	k := m.TimeScale
	if k <= 0 {
		k = 1
	}
	scaleD := func(d apimodel.Duration) time.Duration { return time.Duration(float64(d) / k) }
	scaleL := func(l apimodel.Limits) Limits {
		return Limits{RPM: float64(l.RPM) * k, ITPM: float64(l.ITPM) * k, OTPM: float64(l.OTPM) * k}
	}
	batch := func(b apimodel.BatchModel) BatchModel {
		return BatchModel{
			AdmissionBase:       scaleD(b.AdmissionBase),
			AdmissionPerRequest: scaleD(b.AdmissionPerRequest),
			ProcessingRate:      b.ProcessingRate * k,
			StarveAbove:         b.StarveAbove,
			StarveFor:           scaleD(b.StarveFor),
			Expiry:              scaleD(b.Expiry),
		}
	}
	lat := func(l apimodel.LatencyModel) Latency {
		return Latency{TTFT: scaleD(l.TTFT), TokensPerSec: l.TokensPerSec * k, Sigma: l.Sigma}
	}
	w := World{
		Caps:          maps.Clone(DefaultCaps),
		Reserve:       DefaultReserve,
		BucketWindow:  m.BucketWindow.D(),
		BucketDrained: drainedIf(m.BucketsStartEmpty),
		BucketsKnown:  true, // the simulator's configuration says both
		Latency:       map[api.Pool]Latency{},
		Output:        OutputModel{Min: m.Output.Min, Max: m.Output.Max},
		Batch:         batch(m.Batch),
		BatchOverhead: time.Duration(float64(DefaultBatchOverhead) / k),
		Poll:          Poll{Min: time.Duration(float64(DefaultPollMin) / k), Max: time.Duration(float64(DefaultPollMax) / k)},
	}
	maps.Copy(w.Caps, caps)
	if w.BucketWindow <= 0 {
		w.BucketWindow = DefaultBucketWindow
	}
	for name, l := range m.Latency {
		if name == "default" {
			w.DefaultLatency = lat(l)
			continue
		}
		w.Latency[api.Pool(name)] = lat(l)
	}
	for _, o := range m.Orgs {
		po := Org{Name: o.Name, Limits: map[api.Pool]Limits{}, BatchQueueCap: int(o.BatchQueueCap)}
		// A limit on the organization's usage across all pools bounds a
		// one-model job's pool too.
		for p, l := range o.Limits {
			po.Limits[p] = scaleL(l.Within(o.OrgLimits))
		}
		switch {
		case o.DefaultLimits != nil:
			d := scaleL(o.DefaultLimits.Within(o.OrgLimits))
			po.DefaultLimits = &d
		case o.OrgLimits != nil:
			d := scaleL(*o.OrgLimits)
			po.DefaultLimits = &d
		}
		if o.Batch != nil {
			b := batch(*o.Batch)
			po.Batch = &b
		}
		w.Orgs = append(w.Orgs, po)
	}
	return w
}

// drainedIf is World.BucketDrained of a model whose buckets start empty or
// full.
func drainedIf(empty bool) float64 {
	if empty {
		return 1
	}
	return 0
}

// Validate reports the first problem that would make predictions
// meaningless.
func (w World) Validate() error {
	if len(w.Orgs) == 0 {
		return errors.New("plan: the world has no organizations")
	}
	if w.Reserve < 0 || w.Reserve >= 1 {
		return fmt.Errorf("plan: reserve must be in [0, 1), got %v", w.Reserve)
	}
	if w.BucketWindow < 0 {
		return fmt.Errorf("plan: bucket window must be >= 0, got %v", w.BucketWindow)
	}
	if w.BucketDrained < 0 || w.BucketDrained > 1 || math.IsNaN(w.BucketDrained) {
		return fmt.Errorf("plan: bucket drained must be in [0, 1], got %v", w.BucketDrained)
	}
	if w.Efficiency < 0 || math.IsNaN(w.Efficiency) || math.IsInf(w.Efficiency, 0) {
		return fmt.Errorf("plan: efficiency must be >= 0 (0: 1), got %v", w.Efficiency)
	}
	if w.Ramp.Doubling < 0 {
		return fmt.Errorf("plan: ramp doubling must be >= 0 (0: the engine's, by latency), got %v", w.Ramp.Doubling)
	}
	if w.Output.Min < 0 || w.Output.Max < w.Output.Min {
		return fmt.Errorf("plan: output model needs 0 <= min <= max, got [%d, %d]", w.Output.Min, w.Output.Max)
	}
	check := func(where string, l Latency) error {
		if l.TokensPerSec <= 0 || l.TTFT < 0 || l.Sigma < 0 {
			return fmt.Errorf("plan: latency %s needs tokens/s > 0, ttft >= 0, sigma >= 0", where)
		}
		return nil
	}
	if err := check("default", w.DefaultLatency); err != nil {
		return err
	}
	for p, l := range w.Latency {
		if err := check(string(p), l); err != nil {
			return err
		}
	}
	if err := w.Batch.validate("batch"); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, o := range w.Orgs {
		if o.Name == "" {
			return errors.New("plan: every organization needs a name")
		}
		if seen[o.Name] {
			return fmt.Errorf("plan: organization %q listed twice", o.Name)
		}
		seen[o.Name] = true
		all := []Limits{}
		for _, l := range o.Limits {
			all = append(all, l)
		}
		if o.DefaultLimits != nil {
			all = append(all, *o.DefaultLimits)
		}
		for _, l := range all {
			if l.RPM < 0 || l.ITPM < 0 || l.OTPM < 0 {
				return fmt.Errorf("plan: organization %q has a negative limit", o.Name)
			}
		}
		if o.BatchQueueCap < 0 {
			return fmt.Errorf("plan: organization %q has a negative batch queue cap", o.Name)
		}
		if o.Batch != nil {
			if err := o.Batch.validate("organization " + o.Name + " batch"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b BatchModel) validate(where string) error {
	if b.ProcessingRate <= 0 {
		return fmt.Errorf("plan: %s: processing rate must be > 0", where)
	}
	if b.Expiry <= 0 {
		return fmt.Errorf("plan: %s: expiry must be > 0", where)
	}
	if b.AdmissionBase < 0 || b.AdmissionPerRequest < 0 || b.StarveFor < 0 || b.StarveAbove < 0 {
		return fmt.Errorf("plan: %s: delays and the starvation size must be >= 0", where)
	}
	return nil
}

// The limits file (sluice plan --limits-file): organizations and their
// limits, plus optional overrides of the defaults NewWorld starts from.
// Durations are strings like "90s" or numbers of seconds.
type worldFile struct {
	Name           string                   `json:"name"`
	Orgs           []orgFile                `json:"orgs"`
	Caps           map[api.Family]int       `json:"caps"`
	Reserve        *float64                 `json:"reserve"`
	BucketWindow   *apimodel.Duration       `json:"bucket_window"`
	BucketDrained  *float64                 `json:"bucket_drained"`
	Ramp           *rampFile                `json:"ramp"`
	Latency        map[api.Pool]latencyFile `json:"latency"`
	DefaultLatency *latencyFile             `json:"default_latency"`
	Output         *OutputModel             `json:"output"`
	Batch          *batchFile               `json:"batch"`
	BatchOverhead  *apimodel.Duration       `json:"batch_overhead"`
	PollMin        *apimodel.Duration       `json:"poll_min"`
	PollMax        *apimodel.Duration       `json:"poll_max"`
}

type orgFile struct {
	Name          string              `json:"name"`
	Limits        map[api.Pool]Limits `json:"limits"`
	DefaultLimits *Limits             `json:"default_limits"`
	BatchQueueCap int                 `json:"batch_queue_cap"`
	Batch         *batchFile          `json:"batch"`
}

type rampFile struct {
	Start    int               `json:"start"`
	Doubling apimodel.Duration `json:"doubling"`
}

type latencyFile struct {
	TTFT         apimodel.Duration `json:"ttft"`
	TokensPerSec float64           `json:"tokens_per_sec"`
	Sigma        float64           `json:"sigma"`
}

func (l latencyFile) latency() Latency {
	return Latency{TTFT: l.TTFT.D(), TokensPerSec: l.TokensPerSec, Sigma: l.Sigma}
}

// batchFile fields left out keep the default model's values.
type batchFile struct {
	AdmissionBase       *apimodel.Duration `json:"admission_base"`
	AdmissionPerRequest *apimodel.Duration `json:"admission_per_request"`
	ProcessingRate      *float64           `json:"processing_rate"`
	StarveAbove         *int               `json:"starve_above"`
	StarveFor           *apimodel.Duration `json:"starve_for"`
	Expiry              *apimodel.Duration `json:"expiry"`
}

func (f batchFile) over(b BatchModel) BatchModel {
	if f.AdmissionBase != nil {
		b.AdmissionBase = f.AdmissionBase.D()
	}
	if f.AdmissionPerRequest != nil {
		b.AdmissionPerRequest = f.AdmissionPerRequest.D()
	}
	if f.ProcessingRate != nil {
		b.ProcessingRate = *f.ProcessingRate
	}
	if f.StarveAbove != nil {
		b.StarveAbove = *f.StarveAbove
	}
	if f.StarveFor != nil {
		b.StarveFor = f.StarveFor.D()
	}
	if f.Expiry != nil {
		b.Expiry = f.Expiry.D()
	}
	return b
}

// ReadWorld reads a limits file: JSON naming the organizations and their
// per-minute limits per pool (as `sluice keys --limits` shows them), for
// example
//
//	{"name": "lab", "orgs": [
//	  {"name": "high_prio", "limits": {"sonnet-4": {"rpm": 30000, "itpm": 10000000, "otpm": 1000000}},
//	   "batch_queue_cap": 500000}]}
//
// Optional top-level fields override NewWorld's defaults: "caps" (by
// family), "reserve", "bucket_window", "bucket_drained" (0 full, 1
// empty at the start; with both given the buckets are taken as measured,
// World.BucketsKnown), "ramp" {"start", "doubling"},
// "latency" (by pool) and "default_latency" {"ttft", "tokens_per_sec",
// "sigma"}, "output" {"min", "max"}, "batch" (and per org "batch")
// {"admission_base", "admission_per_request", "processing_rate",
// "starve_above", "starve_for", "expiry"}, "batch_overhead", "poll_min",
// "poll_max" (the batch path's poll schedule). Unknown fields are an error.
func ReadWorld(r io.Reader) (World, error) {
	var f worldFile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return World{}, fmt.Errorf("plan: limits file: %w", err)
	}
	w := NewWorld(f.Name)
	if w.Name == "" {
		w.Name = "limits file"
	}
	maps.Copy(w.Caps, f.Caps)
	if f.Reserve != nil {
		w.Reserve = *f.Reserve
	}
	if f.BucketWindow != nil {
		w.BucketWindow = f.BucketWindow.D()
	}
	if f.BucketDrained != nil {
		w.BucketDrained = *f.BucketDrained
	}
	// A file that states both the depth and the start state describes
	// buckets someone measured; one that leaves either out, an assumption.
	w.BucketsKnown = f.BucketWindow != nil && f.BucketDrained != nil
	if f.Ramp != nil {
		w.Ramp = Ramp{Start: f.Ramp.Start, Doubling: f.Ramp.Doubling.D()}
	}
	for p, l := range f.Latency {
		w.Latency[p] = l.latency()
	}
	if f.DefaultLatency != nil {
		w.DefaultLatency = f.DefaultLatency.latency()
	}
	if f.Output != nil {
		w.Output = *f.Output
	}
	if f.Batch != nil {
		w.Batch = f.Batch.over(w.Batch)
	}
	if f.BatchOverhead != nil {
		w.BatchOverhead = f.BatchOverhead.D()
	}
	if f.PollMin != nil {
		if w.Poll.Min = f.PollMin.D(); w.Poll.Min <= 0 {
			return World{}, fmt.Errorf("plan: limits file: poll_min must be > 0, got %v", w.Poll.Min)
		}
	}
	if f.PollMax != nil {
		if w.Poll.Max = f.PollMax.D(); w.Poll.Max < w.Poll.Min {
			return World{}, fmt.Errorf("plan: limits file: poll_max must be ≥ poll_min, got %v", w.Poll.Max)
		}
	}
	for _, of := range f.Orgs {
		o := Org{Name: of.Name, Limits: of.Limits, DefaultLimits: of.DefaultLimits, BatchQueueCap: of.BatchQueueCap}
		if of.Batch != nil {
			b := of.Batch.over(w.Batch)
			o.Batch = &b
		}
		w.Orgs = append(w.Orgs, o)
	}
	return w, w.Validate()
}
