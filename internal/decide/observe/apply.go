package observe

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
)

// OrgRef names an organization a run may use: its id (what observations
// are keyed by) and its label.
type OrgRef struct {
	ID, Label string
}

// Provenance says where each figure of an applied world came from, one
// line per figure, for `sluice plan` and the run's log.
type Provenance []string

func (p Provenance) String() string { return strings.Join(p, "\n") }

// minTTFT is the least time to first token Apply infers: an observed mean
// latency shorter than the default model's token time for the observed
// output speeds the tokens up instead.
const minTTFT = 50 * time.Millisecond

// Apply sets w's organizations to orgs with what f knows of model's pool
// at now:
// each org's limits for pool (an org with none keeps no limits, so the
// etiquette caps bound it, and is listed in unknown), the pool's latency
// (the most-answered org's: the TTFT that makes the world's latency model
// match the observed mean at the observed output length), and the answer
// length at maxTokens when an org observed it. Every figure is named in
// the provenance, with its age.
func Apply(w *plan.World, f *File, orgs []OrgRef, model string, maxTokens int, now time.Time) (prov Provenance, unknown []OrgRef) {
	pool := api.PoolOf(model)
	ago := func(t time.Time) string {
		if d := now.Sub(t); d >= time.Minute {
			return d.Round(time.Minute).String() + " ago"
		}
		return "just now"
	}
	w.Orgs = w.Orgs[:0:0]
	var lat *Latency
	var latOrg string
	var out *Output
	var depth time.Duration // the shallowest learned bucket depth
	for _, o := range orgs {
		po := f.Pool(o.ID, pool)
		org := plan.Org{Name: o.Label, Limits: map[api.Pool]plan.Limits{}}
		switch {
		case po != nil && po.Limits != nil:
			l := po.Limits
			// A dimension whose headers never came is 0: no limit.
			org.Limits[pool] = plan.Limits{RPM: l.RPM, ITPM: l.ITPM, OTPM: l.OTPM}
			prov = append(prov, fmt.Sprintf("%s %s: limits %s (%s, %s)", o.Label, pool, limitsText(l), l.Source, ago(l.At)))
			if d := time.Duration(l.DepthSeconds * float64(time.Second)); d > 0 && (depth == 0 || d < depth) {
				depth = d
			}
		default:
			unknown = append(unknown, o)
			prov = append(prov, fmt.Sprintf("%s %s: limits unknown — bounded by the etiquette cap (%d)", o.Label, pool, w.Caps[api.FamilyOf(model)]))
		}
		if po != nil && po.Latency != nil && (lat == nil || po.Latency.N > lat.N) {
			lat, latOrg = po.Latency, o.Label
		}
		if po != nil && maxTokens > 0 {
			if ob := po.Output[strconv.Itoa(maxTokens)]; ob != nil && (out == nil || ob.N > out.N) {
				out = ob
			}
		}
		if fo := f.Orgs[o.ID]; fo != nil && fo.Batch != nil {
			b := fo.Batch
			m, k := fitBatch(w.Batch, b.MeanRequests, b.MeanSeconds)
			org.Batch = &m
			prov = append(prov, fmt.Sprintf("%s batch queue: observed mean turnaround %s for %.0f-request batches over %d batch(es) (%s): the model's queue ×%.2f",
				o.Label, time.Duration(b.MeanSeconds*float64(time.Second)).Round(time.Second), b.MeanRequests, b.Batches, ago(b.At), k))
		}
		qcap, line := queueCap(o.Label, f.Orgs[o.ID], now, ago)
		org.BatchQueueCap = int(qcap)
		prov = append(prov, line)
		w.Orgs = append(w.Orgs, org)
	}
	if depth > 0 {
		w.BucketWindow = depth
		prov = append(prov, fmt.Sprintf("bucket depth: %.0f s of refill (the shallowest the lanes learned)", depth.Seconds()))
	} else {
		prov = append(prov, fmt.Sprintf("bucket depth: %.0f s of refill (default: not learned)", w.BucketWindow.Seconds()))
	}
	// A probe sent just now says how full the buckets are: the plan that
	// follows starts from that, not from full. Older, they have refilled.
	drained, probed := 0.0, false
	// The central prediction counts the buckets' burst only when every
	// org with limits had both its depth and its level read, not assumed
	// (one org's learned depth and another's probe are not a bucket).
	known, limited := true, 0
	for _, o := range orgs {
		po := f.Pool(o.ID, pool)
		if po == nil || po.Limits == nil {
			continue
		}
		limited++
		if po.Limits.Source != SourceProbe || now.Sub(po.Limits.At) > FreshProbe || w.BucketWindow <= 0 {
			known = false
			continue
		}
		probed = true
		known = known && po.Limits.DepthSeconds > 0
		full := po.Limits.RemainingSeconds / w.BucketWindow.Seconds()
		drained = math.Max(drained, 1-math.Min(full, 1))
	}
	w.BucketsKnown = known && limited > 0 && depth > 0
	if probed {
		w.BucketDrained = drained
		prov = append(prov, fmt.Sprintf("buckets at the start: %.0f %% drained (the probes' remaining headers, the emptiest org)", 100*drained))
	} else {
		prov = append(prov, "buckets at the start: full (an idle organization's; no fresh probe)")
	}
	base := w.DefaultLatency
	if l, ok := w.Latency[pool]; ok {
		base = l
	}
	if lat != nil && lat.MeanSeconds > 0 {
		w.Latency[pool] = fitLatency(base, lat.MeanSeconds, lat.MeanOutput)
		prov = append(prov, fmt.Sprintf("%s latency: recent mean %.2f s at %.0f output tokens (observed on %s, %d clean answers, %s)", pool, lat.MeanSeconds, lat.MeanOutput, latOrg, lat.N, ago(lat.At)))
	} else {
		prov = append(prov, fmt.Sprintf("%s latency: the calibrated default (TTFT %v, %.0f tokens/s)", pool, base.TTFT, base.TokensPerSec))
	}
	if out != nil {
		m := int(math.Round(out.Mean))
		w.Output = plan.OutputModel{Min: m, Max: m}
		prov = append(prov, fmt.Sprintf("answer length at max_tokens %d: mean %.0f tokens (observed over %d answers, %s)", maxTokens, out.Mean, out.N, ago(out.At)))
	} else {
		prov = append(prov, fmt.Sprintf("answer length: the default model (uniform %d-%d tokens, capped by max_tokens)", w.Output.Min, w.Output.Max))
	}
	return prov, unknown
}

// fitBatch scales base so that one batch of n requests, alone in its
// queue, takes secs from create to end — admission and processing
// stretched alike, the model's shape kept (one size observed cannot
// separate them) — and returns the scale.
func fitBatch(base plan.BatchModel, n, secs float64) (plan.BatchModel, float64) {
	model := base.AdmissionBase.Seconds() + base.AdmissionPerRequest.Seconds()*n + n/base.ProcessingRate
	if base.StarveAbove > 0 && n > float64(base.StarveAbove) {
		model += base.StarveFor.Seconds()
	}
	if model <= 0 || secs <= 0 {
		return base, 1
	}
	k := secs / model
	m := base
	m.AdmissionBase = time.Duration(float64(base.AdmissionBase) * k)
	m.AdmissionPerRequest = time.Duration(float64(base.AdmissionPerRequest) * k)
	m.StarveFor = time.Duration(float64(base.StarveFor) * k)
	m.ProcessingRate = base.ProcessingRate / k
	return m, k
}

// FreshProbe is how long a probe's remaining headers describe the
// buckets: within it a plan starts from them, after it from full (an
// idle bucket refills within a minute).
const FreshProbe = 2 * time.Minute

// fitLatency returns base with the TTFT that makes its mean latency
// meanSec at meanOut output tokens; when that TTFT would be under
// minTTFT, the token rate is raised instead.
func fitLatency(base plan.Latency, meanSec, meanOut float64) plan.Latency {
	median := meanSec / math.Exp(base.Sigma*base.Sigma/2)
	l := base
	tokens := 0.0
	if base.TokensPerSec > 0 {
		tokens = meanOut / base.TokensPerSec
	}
	if ttft := median - tokens; ttft >= minTTFT.Seconds() {
		l.TTFT = time.Duration(ttft * float64(time.Second))
		return l
	}
	l.TTFT = minTTFT
	if rest := median - minTTFT.Seconds(); rest > 0 && meanOut > 0 {
		l.TokensPerSec = meanOut / rest
	} else {
		l.TTFT = time.Duration(math.Max(median, 0.001) * float64(time.Second))
	}
	return l
}

func limitsText(l *Limits) string {
	dim := func(name string, v float64) string {
		if v <= 0 {
			return name + " not shown"
		}
		return fmt.Sprintf("%s %s", name, strconv.FormatFloat(v, 'f', -1, 64))
	}
	s := dim("RPM", l.RPM) + ", " + dim("ITPM", l.ITPM) + ", " + dim("OTPM", l.OTPM)
	if l.DepthSeconds > 0 {
		s += fmt.Sprintf(", buckets %.0f s deep", l.DepthSeconds)
	}
	return s
}

// queueCap is the batch queue bound the planner plans an organization at,
// and the provenance line saying why: a named figure; an inferred one
// younger than InferredQueueTTL; else the documented figure of the lowest
// tier — each never below the most requests the queue was seen to take.
func queueCap(label string, fo *Org, now time.Time, ago func(time.Time) string) (int64, string) {
	var q BatchQueue
	if fo != nil && fo.BatchQueue != nil {
		q = *fo.BatchQueue
	}
	took := ""
	if q.Accepted > 0 {
		took = fmt.Sprintf("; it took %d at most", q.Accepted)
	}
	switch {
	case q.Requests > 0 && q.Named:
		return q.Requests, fmt.Sprintf("%s batch queue bound: %d requests (the figure a create's 429 named, %s)", label, q.Requests, ago(q.At))
	case q.Requests > 0 && now.Sub(q.At) <= InferredQueueTTL:
		return q.Requests, fmt.Sprintf("%s batch queue bound: %d requests (inferred from the requests in flight when a create was refused for a full queue, %s%s)", label, q.Requests, ago(q.At), took)
	case q.Requests > 0:
		c := max(plan.DocumentedBatchQueue, q.Accepted)
		return c, fmt.Sprintf("%s batch queue bound: %d requests (an inferred bound of %d from %s is older than %s: the lowest documented tier's%s)", label, c, q.Requests, ago(q.At), InferredQueueTTL, took)
	}
	if q.Accepted > plan.DocumentedBatchQueue {
		return q.Accepted, fmt.Sprintf("%s batch queue bound: %d requests (the most the queue took, above the lowest documented tier's; never observed full)", label, q.Accepted)
	}
	return plan.DocumentedBatchQueue, fmt.Sprintf("%s batch queue bound: %d requests (the lowest documented tier's; never observed full%s)", label, plan.DocumentedBatchQueue, took)
}
