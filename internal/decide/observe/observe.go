// Package observe keeps what runs saw of each organization × model pool —
// the limits the headers gave, the bucket depth the lanes learned, the
// latency of clean answers, the answer length per max_tokens, the share of
// 429s and 529s — in a small JSON file keyed by organization id, and turns
// it into the planner's World, saying where every figure came from
// (docs/observe.md). Nothing here knows a key's value: observations are
// keyed by organization id, labelled by the org's label.
package observe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
	"github.com/sluice-dev/sluice/internal/store/cachedir"
)

// MaxAge is how long an observation is trusted: older ones are dropped
// when the file is read (an organization's tier, and so its limits, can
// change; a stale limit misleads more than none).
const MaxAge = 30 * 24 * time.Hour

// fileVersion is the schema of the observations file.
const fileVersion = 1

// DefaultPath is $SLUICE_OBSERVATIONS (set and empty: "", observations
// off), else observations.json in the user's cache directory
// (~/.cache/sluice on Linux), beside the response cache.
func DefaultPath() string {
	if p, ok := os.LookupEnv("SLUICE_OBSERVATIONS"); ok {
		return p
	}
	return cachedir.Path("observations.json")
}

// File is the observations file's content.
type File struct {
	Version int `json:"version"`
	// Orgs by organization id.
	Orgs map[string]*Org `json:"orgs"`
}

// Org is one organization's observations.
type Org struct {
	Label string             `json:"label"` // the org's label when last seen (display only)
	Pools map[api.Pool]*Pool `json:"pools"`
	// Batch is the org's Message Batches turnaround (a queue is the
	// org's, whatever the model).
	Batch *Batch `json:"batch,omitempty"`
	// BatchQueue is the bound the org's processing queue showed when a
	// create was refused for a full queue (a named figure over an
	// inferred one; the newest of a kind), and the most requests it was
	// seen to take.
	BatchQueue *BatchQueue `json:"batch_queue,omitempty"`
}

// BatchQueue is a full processing queue's bound: the most batch requests
// it took (batch.QueueBound).
//
// Requests 0: never seen full, only Accepted is known. An inferred bound
// (not Named) is an estimate — colleagues share the queue — that later
// evidence raises: a later refusal at a higher count replaces it, an
// Accepted count above it raises it, and the planner stops using it
// InferredQueueTTL after At (Apply).
type BatchQueue struct {
	Requests int64     `json:"requests"`
	Named    bool      `json:"named,omitempty"` // the 429's message named it
	At       time.Time `json:"at"`              // when Requests was last seen
	// Accepted is the most requests sluice had in unended batches there
	// right after an accepted create, over every run: a window the queue
	// took, in the units of an inferred bound and of the planner's
	// window (the queue itself holds only their unprocessed part).
	Accepted int64 `json:"accepted,omitempty"`
}

// InferredQueueTTL is how long the planner trusts an inferred queue bound:
// it rests on what colleagues had queued at one moment, which a day
// changes. After it the org is planned at the larger of the documented
// figure and the most its queue was seen to take.
const InferredQueueTTL = 24 * time.Hour

// Batch is the last run's ended batches of an organization: how many,
// their mean size and mean create-to-end time by the API's clock.
type Batch struct {
	Batches      int64     `json:"batches"`
	MeanRequests float64   `json:"mean_requests"`
	MeanSeconds  float64   `json:"mean_seconds"`
	At           time.Time `json:"at"`
}

// Pool is what was seen of one organization × model pool. Every part
// carries the time it was seen; a nil part was never seen (or aged out).
type Pool struct {
	Limits  *Limits            `json:"limits,omitempty"`
	Latency *Latency           `json:"latency,omitempty"`
	Output  map[string]*Output `json:"output,omitempty"` // by max_tokens, in decimal
	Answers *Answers           `json:"answers,omitempty"`
	// ProbeFailed is the last probe that read no limits: the org is not
	// probed again for ProbeRetryAfter (a gateway that strips the headers
	// would otherwise be paid for on every plan).
	ProbeFailed *ProbeFailure `json:"probe_failed,omitempty"`
}

// ProbeFailure is a probe that read no limits, and why.
type ProbeFailure struct {
	Why string    `json:"why"`
	At  time.Time `json:"at"`
}

// ProbeRetryAfter is how long a failed probe is not repeated.
const ProbeRetryAfter = 24 * time.Hour

// Limits are the per-minute limits the headers gave (0: that dimension's
// headers never came) and the bucket depth the lanes learned, in seconds
// of refill (0: not learned).
type Limits struct {
	RPM          float64 `json:"rpm"`
	ITPM         float64 `json:"itpm"`
	OTPM         float64 `json:"otpm"`
	DepthSeconds float64 `json:"depth_seconds,omitempty"`
	// RemainingSeconds is what a probe's answer said was left, in seconds
	// of refill of the emptiest dimension (0 with Source not a probe): how
	// full the buckets are when a plan follows the probe at once.
	RemainingSeconds float64   `json:"remaining_seconds,omitempty"`
	Source           string    `json:"source"` // SourceHeaders or SourceProbe
	At               time.Time `json:"at"`
}

// Where limits came from.
const (
	SourceHeaders = "headers" // a run's answers
	SourceNamed   = "429s"    // some only from 429s' messages (the headers never showed them)
	SourceProbe   = "probe"   // a max_tokens 1 probe
)

// Latency is the whole-answer latency of clean answers: the lane's recent
// mean (an average weighted toward the last twenty or so answers, as the
// run ended), with N the clean answers the lane had seen.
type Latency struct {
	MeanSeconds float64 `json:"mean_seconds"`
	// MeanOutput is the mean output tokens of the answers it averages
	// (what the latency is the latency of).
	MeanOutput float64   `json:"mean_output"`
	N          int64     `json:"n"`
	At         time.Time `json:"at"`
}

// Output is the mean output tokens of answers at one max_tokens.
type Output struct {
	Mean float64   `json:"mean"`
	N    int64     `json:"n"`
	At   time.Time `json:"at"`
}

// Answers counts attempts and their 429s and 529s.
type Answers struct {
	Attempts    int64     `json:"attempts"`
	RateLimited int64     `json:"rate_limited"`
	Overloaded  int64     `json:"overloaded"`
	At          time.Time `json:"at"`
}

// Sample is one lane's observations from one run (or a probe).
type Sample struct {
	OrgID, Label string
	Pool         api.Pool
	Limits       *Limits // nil: no header gave a limit
	// Clean answers' mean latency and output; N 0: none.
	LatencySeconds, MeanOutput float64
	N                          int64
	MaxTokens                  int // the requests' max_tokens (0: unknown; the output is then not kept)
	Attempts                   int64
	RateLimited, Overloaded    int64
	ProbeFailed                *ProbeFailure // a probe that read no limits
	At                         time.Time
}

// FromLanes turns a dispatcher's lane views (Dispatcher.Snapshot, at the
// end of a run) into samples, one per lane that got an answer. maxTokens
// is the run's mean max_tokens (0 if unknown).
func FromLanes(views []dispatch.LaneView, maxTokens int, now time.Time) []Sample {
	var out []Sample
	for _, v := range views {
		if v.OrgID == "" || v.Attempts == 0 {
			continue
		}
		s := Sample{OrgID: v.OrgID, Label: v.Org, Pool: v.Pool, MaxTokens: maxTokens, At: now,
			Attempts: v.Attempts, RateLimited: v.RateLimited, Overloaded: v.Overloaded}
		b := v.State.Buckets
		if b[budget.Requests].Known || b[budget.InputTokens].Known || b[budget.OutputTokens].Known {
			l := &Limits{Source: SourceHeaders, At: now}
			if b[budget.Requests].Known {
				l.RPM = b[budget.Requests].Limit
				if l.RPM > 0 {
					l.DepthSeconds = b[budget.Requests].Depth / l.RPM * 60
				}
			}
			if b[budget.InputTokens].Known {
				l.ITPM = b[budget.InputTokens].Limit
			}
			if b[budget.OutputTokens].Known {
				l.OTPM = b[budget.OutputTokens].Limit
			}
			for _, d := range []budget.Dim{budget.Requests, budget.InputTokens, budget.OutputTokens} {
				if v.State.Named[d] && !v.State.Visible[d] {
					l.Source = SourceNamed
				}
			}
			s.Limits = l
		}
		if v.OK > 0 && v.State.Latency > 0 {
			s.N = v.OK
			s.LatencySeconds = v.State.Latency.Seconds()
			s.MeanOutput = float64(v.OutputTokens) / float64(v.OK)
		}
		out = append(out, s)
	}
	return out
}

// Load reads the observations file at path, dropping what is older than
// MaxAge at now. A missing file is an empty one. A file that cannot be
// parsed is an error (the caller warns and plans without it; the next
// Record replaces it).
func Load(path string, now time.Time) (*File, error) {
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("observe: %w", err)
	}
	if err := json.Unmarshal(b, f); err != nil {
		return &File{Version: fileVersion, Orgs: map[string]*Org{}}, fmt.Errorf("observe: %s is not an observations file: %w", path, err)
	}
	if f.Version != fileVersion {
		return &File{Version: fileVersion, Orgs: map[string]*Org{}}, fmt.Errorf("observe: %s has version %d, want %d", path, f.Version, fileVersion)
	}
	if f.Orgs == nil {
		f.Orgs = map[string]*Org{}
	}
	f.age(now)
	return f, nil
}

// age drops every observation older than MaxAge at now, and every one
// whose figures no run could have seen (negative, not finite, absurd): a
// hand-edited or damaged file must not stop a plan.
func (f *File) age(now time.Time) {
	stale := func(t time.Time) bool { return now.Sub(t) > MaxAge }
	bad := func(vs ...float64) bool {
		for _, v := range vs {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e12 {
				return true
			}
		}
		return false
	}
	for id, o := range f.Orgs {
		if o == nil {
			delete(f.Orgs, id)
			continue
		}
		for p, po := range o.Pools {
			if po == nil {
				delete(o.Pools, p)
				continue
			}
			if l := po.Limits; l != nil && (stale(l.At) || bad(l.RPM, l.ITPM, l.OTPM, l.DepthSeconds)) {
				po.Limits = nil
			}
			if l := po.Latency; l != nil && (stale(l.At) || bad(l.MeanSeconds, l.MeanOutput) || l.MeanSeconds > 3600) {
				po.Latency = nil
			}
			if po.Answers != nil && stale(po.Answers.At) {
				po.Answers = nil
			}
			if po.ProbeFailed != nil && now.Sub(po.ProbeFailed.At) > ProbeRetryAfter {
				po.ProbeFailed = nil
			}
			for k, out := range po.Output {
				if out == nil || stale(out.At) || bad(out.Mean) || out.Mean > 1e7 {
					delete(po.Output, k)
				}
			}
			if po.Limits == nil && po.Latency == nil && po.Answers == nil && po.ProbeFailed == nil && len(po.Output) == 0 {
				delete(o.Pools, p)
			}
		}
		if b := o.Batch; b != nil && (stale(b.At) || bad(b.MeanRequests, b.MeanSeconds) || b.Batches <= 0 || b.MeanRequests < 1 || b.MeanSeconds <= 0) {
			o.Batch = nil
		}
		if len(o.Pools) == 0 && o.Batch == nil {
			delete(f.Orgs, id)
		}
	}
}

// Add merges samples into f: a sample's limits replace the older ones
// (the newest headers are the truth); latency, output and answer counts
// are replaced too — a run's averages over its whole length are better
// evidence of the organization as it is now than a blend with last
// month's.
func (f *File) Add(samples ...Sample) {
	for _, s := range samples {
		o := f.Orgs[s.OrgID]
		if o == nil {
			o = &Org{Pools: map[api.Pool]*Pool{}}
			f.Orgs[s.OrgID] = o
		}
		if s.Label != "" {
			o.Label = s.Label
		}
		p := o.Pools[s.Pool]
		if p == nil {
			p = &Pool{}
			o.Pools[s.Pool] = p
		}
		if s.ProbeFailed != nil {
			p.ProbeFailed = s.ProbeFailed
		}
		if s.Limits != nil {
			p.ProbeFailed = nil
			l := *s.Limits
			if l.DepthSeconds == 0 && p.Limits != nil && p.Limits.RPM == l.RPM {
				l.DepthSeconds = p.Limits.DepthSeconds // a probe learns no depth
			}
			p.Limits = &l
		}
		if s.N > 0 {
			p.Latency = &Latency{MeanSeconds: s.LatencySeconds, MeanOutput: s.MeanOutput, N: s.N, At: s.At}
			if s.MaxTokens > 0 {
				if p.Output == nil {
					p.Output = map[string]*Output{}
				}
				p.Output[strconv.Itoa(s.MaxTokens)] = &Output{Mean: s.MeanOutput, N: s.N, At: s.At}
			}
		}
		if s.Attempts > 0 {
			p.Answers = &Answers{Attempts: s.Attempts, RateLimited: s.RateLimited, Overloaded: s.Overloaded, At: s.At}
		}
	}
}

// BatchSample is one organization's ended batches in one run, and the
// bound its full processing queue showed, if it did.
type BatchSample struct {
	OrgID, Label string
	batch.Turnaround
	Queue *batch.QueueBound
	At    time.Time
}

// FromBatch turns a batch path's Stats (at the end of a run) into samples,
// one per organization whose batches ended or whose queue was full.
func FromBatch(s batch.Stats, now time.Time) []BatchSample {
	var out []BatchSample
	for label, t := range s.Turnaround {
		if t.OrgID == "" || t.Batches == 0 {
			continue
		}
		bs := BatchSample{OrgID: t.OrgID, Label: label, Turnaround: t, At: now}
		if q, ok := s.QueueBound[label]; ok {
			bs.Queue = &q
		}
		out = append(out, bs)
	}
	for label, q := range s.QueueBound {
		if _, ok := s.Turnaround[label]; ok || q.OrgID == "" {
			continue
		}
		out = append(out, BatchSample{OrgID: q.OrgID, Label: label, Queue: &q, At: now})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].OrgID < out[j].OrgID })
	return out
}

// AddBatch merges batch samples into f: the newest run's replace the
// older (the queue as it is now).
func (f *File) AddBatch(samples ...BatchSample) {
	for _, s := range samples {
		ended := s.Batches > 0 && s.Requests > 0
		if !ended && s.Queue == nil {
			continue
		}
		o := f.Orgs[s.OrgID]
		if o == nil {
			o = &Org{Pools: map[api.Pool]*Pool{}}
			f.Orgs[s.OrgID] = o
		}
		if s.Label != "" {
			o.Label = s.Label
		}
		if ended {
			o.Batch = &Batch{Batches: s.Batches, MeanRequests: float64(s.Requests) / float64(s.Batches),
				MeanSeconds: s.Seconds / float64(s.Batches), At: s.At}
		}
		if q := s.Queue; q != nil {
			o.BatchQueue = mergeQueue(o.BatchQueue, q, s.At)
		}
	}
}

// mergeQueue is the org's queue record after one run's evidence q: a
// named figure replaces any earlier record (the tier's, a newer one a
// tier change); an inferred one replaces an inferred one (the newest
// refusal, not the smallest: colleagues' load moved it); the largest
// window ever accepted raises an inferred bound it exceeds, never lowers
// one. A run without a refusal adds only its accepted window.
func mergeQueue(old *BatchQueue, q *batch.QueueBound, at time.Time) *BatchQueue {
	acc := q.Accepted
	if old != nil {
		acc = max(acc, old.Accepted)
	}
	var n BatchQueue
	switch {
	case q.Requests > 0 && (q.Named || old == nil || !old.Named || old.Requests == 0):
		n = BatchQueue{Requests: q.Requests, Named: q.Named, At: at}
	case old != nil:
		n = *old
	case acc == 0:
		return nil
	default:
		n = BatchQueue{At: at}
	}
	n.Accepted = acc
	if !n.Named && n.Requests > 0 && n.Requests < acc {
		// The queue took a larger window than the inferred bound says:
		// colleagues' batches left it, or the tier moved. (A named
		// figure counts the queue's unprocessed requests, a window
		// counts requests in unended batches, processed ones included:
		// a window above it contradicts nothing.)
		n.Requests, n.At = acc, at
	}
	return &n
}

// Pool returns what is known of org × pool, or nil.
func (f *File) Pool(orgID string, pool api.Pool) *Pool {
	if o := f.Orgs[orgID]; o != nil {
		return o.Pools[pool]
	}
	return nil
}

// Write writes f to path whole (a temporary file, then a rename).
func (f *File) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	return atomicfile.Write(path, 0o600, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(f)
	})
}

// Record merges samples into the file at path (read, merge, write). A
// file that could not be parsed is replaced; the error of that read is
// returned with a nil error of the write, so the caller may warn.
func Record(path string, now time.Time, samples ...Sample) (readErr, err error) {
	return RecordRun(path, now, samples, nil)
}

// RecordRun is Record for a run's end: its lanes' samples and its batch
// path's turnaround.
func RecordRun(path string, now time.Time, lanes []Sample, batches []BatchSample) (readErr, err error) {
	if path == "" || len(lanes)+len(batches) == 0 { // "": observations off
		return nil, nil
	}
	f, readErr := Load(path, now)
	f.Add(lanes...)
	f.AddBatch(batches...)
	return readErr, f.Write(path)
}
