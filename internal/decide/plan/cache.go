package plan

import (
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

// The prompt cache's relief (docs/caching.md, "Prediction"). A job whose
// requests share a long prefix that sluice caches (--cache-prefix auto)
// reads it at a tenth of the input price and, for current models, without
// charging it to ITPM; each organization writes each prefix once (1.25×
// for the sync route's 5-minute TTL, 2× for the batch route's 1 hour,
// where a sync primer writes it before the batches) before reads repay it.
// On sync sluice's warming makes that one write per organization; in
// Message Batches hits are best effort — "typically 30 % to 98 %" — so the
// batch rows' hit rate is taken as DefaultBatchHitRate unless given. The
// reading matters: a row that misses writes at 2× (1 h), so below
// BatchBreakEven the cache costs a batch job more than it saves, and the
// decision says so.

// DefaultBatchHitRate is the share of batch rows taken to read a primed
// prefix: the middle of the documented 30–98 % (users measured a batch
// primed by a sync request at 0–16 % and one after a warm batch at 100 %:
// anthropic-api.md §10). The engine adds batch breakpoints by the same
// figure (BatchSharers), so what is predicted is what is sent; below
// BatchBreakEven the lever costs a batch job money, which the decision
// and the run's report say.
const DefaultBatchHitRate = 0.64

// BatchBreakEven is the batch hit rate above which caching a prefix with
// the 1 h TTL costs less than sending it uncached, at the standard
// multipliers: h·0.1 + (1−h)·2 = 1. A model's own figure, from its prices
// (its cache reads may be 0.05× or 0.025×), is cost.CacheBreakEven1hOf's,
// which the decision and the batch runner use (one owner: the cost
// package).
const BatchBreakEven = cost.CacheBreakEven1h

// BatchSharers is how many pending requests must share a prefix before a
// breakpoint is added for it on the batch route, over orgs organizations:
// each organization's write is a sync primer at 2× the input price, and a
// batch row that reads at DefaultBatchHitRate saves 0.5 − (0.05·h +
// (1 − h)) of it against sending it uncached, so a prefix needs
// 2 ÷ (0.95·h − 0.5) rows per organization (19 at 64 %).
func BatchSharers(orgs int) int {
	h := DefaultBatchHitRate
	perOrg := int(math.Ceil(2 / (0.95*h - 0.5)))
	return max(8, perOrg*max(orgs, 1))
}

// CachedPrefix is what the job's shared prompt prefixes let the cache
// spare: zero for none (or --cache-prefix off).
type CachedPrefix struct {
	// Share is the fraction of the requests whose breakpoint ends a
	// shared prefix at least the larger reading of the model's minimum
	// cacheable length (api.ModelInfo.CacheReliefMinimum).
	Share float64
	// Tokens is those requests' mean prefix tokens: part of MeanInput.
	Tokens float64
	// Prefixes is how many distinct prefixes they are (at least 1 when
	// Share > 0).
	Prefixes int
	// BatchHitRate is the batch rows' expected hit rate
	// (DefaultBatchHitRate when 0).
	BatchHitRate float64
	// BatchShare, BatchTokens and BatchPrefixes are Share, Tokens and
	// Prefixes for the batch route, whose breakpoints need more sharers
	// (BatchSharers): a smaller group is sent to batch as written.
	BatchShare, BatchTokens float64
	BatchPrefixes           int
}

func (c CachedPrefix) active() bool { return c.Share > 0 && c.Tokens > 0 }

// batchActive reports whether the batch route adds breakpoints: then each
// organization's first batch of a prefix is a seed (internal/engine/batch/seed.go).
func (c CachedPrefix) batchActive() bool { return c.active() && c.BatchShare > 0 && c.BatchTokens > 0 }

// seedTurnaround is the latency the batch runner's seeds add: each
// organization creates one small batch holding a request of each prefix
// and holds its chunks of them until it has ended, so the job's batches
// start one small batch's turnaround later however many prefixes it has.
func seedTurnaround(w World, window int) Range {
	in := layout(1, 1, window, batchOrgs(w), w.poll())
	return Range{
		Low:  in.simulate(1/batchSpread, batchSpread).End,
		Mid:  in.simulate(1, 1).End,
		High: in.simulate(batchSpread, 1/batchSpread).End,
	}
}

func (c CachedPrefix) batchHitRate() float64 {
	if c.BatchHitRate > 0 {
		return math.Min(c.BatchHitRate, 1)
	}
	return DefaultBatchHitRate
}

// validate reports a CachedPrefix no job can have.
func (c CachedPrefix) validate(meanInput float64) error {
	switch {
	case c.Share < 0 || c.Share > 1:
		return fmt.Errorf("plan: the cached share must be in [0, 1], got %v", c.Share)
	case c.Tokens < 0 || c.BatchHitRate < 0 || c.BatchHitRate > 1 || c.Prefixes < 0:
		return fmt.Errorf("plan: cached prefix %+v out of range", c)
	case c.BatchShare < 0 || c.BatchShare > c.Share || c.BatchTokens < 0 || c.BatchPrefixes < 0:
		return fmt.Errorf("plan: the batch route's cached prefix %+v out of range", c)
	case c.Share*c.Tokens > meanInput+0.5:
		return fmt.Errorf("plan: the cached prefix (%.0f tokens on %.0f %% of requests) exceeds the mean input %.0f", c.Tokens, 100*c.Share, meanInput)
	}
	return nil
}

// syncHits is the requests of n of the job's on the sync route that read
// the cache: those with a prefix, less one write per organization and
// prefix (however few of the job's requests go to sync).
func (j Job) syncHits(n, orgs int) float64 {
	c := j.Cached
	if !c.active() {
		return 0
	}
	cached := float64(n) * c.Share
	return math.Max(0, cached-float64(max(c.Prefixes, 1)*orgs))
}

// itpmInput is the input tokens per request a sync lane's ITPM is charged
// with: MeanInput less the prefix tokens read from the cache, for a model
// whose cache reads are not charged (all current ones but Haiku 3.5);
// cache writes are charged, so the requests that write are not relieved.
func (j Job) itpmInput(orgs int) float64 {
	if !j.Cached.active() {
		return j.MeanInput
	}
	if m, ok := api.LookupModel(j.Model); ok && m.CacheReadsCountITPM {
		return j.MeanInput
	}
	return math.Max(1, j.MeanInput-j.syncHits(j.N, orgs)*j.Cached.Tokens/float64(j.N))
}

// cachedCost is the cost of n requests of the job's shape with the
// prompt cache: on sync the job's writes (one per organization and prefix,
// 5-minute TTL) spread over its requests and the rest read; on batch the
// rows read at the batch hit rate and write (1 h) otherwise, plus one sync
// primer per organization and prefix.
func (p *planner) cachedCost(n int, batch bool) float64 {
	j, c := p.j, p.j.Cached
	orgs := len(p.w.Orgs)
	cached := float64(n) * c.Share
	round := func(x float64) int64 { return int64(math.Round(x)) }
	t := cost.Tokens{Input: round(math.Max(0, float64(n)*j.MeanInput-cached*c.Tokens)), Output: round(float64(n) * j.MeanOutput)}
	// A request's band (a long-context rule) from the mean prompt, all of
	// it and its uncached part.
	long := cost.Long(j.Model, round(j.MeanInput), round(math.Max(0, j.MeanInput-c.Share*c.Tokens)))
	if !batch {
		reads := j.syncHits(n, orgs)
		t.CacheRead, t.CacheWrite5m = round(reads*c.Tokens), round((cached-reads)*c.Tokens)
		usd, _ := cost.BandCost(j.Model, t, false, long)
		return usd
	}
	if c.BatchShare <= 0 || c.BatchTokens <= 0 {
		// As written: each request in its own band (a long-context rule
		// reads one request's prompt, never the job's total).
		usd, _ := cost.EstimateN(j.Model, n, j.MeanInput, j.MeanOutput, true)
		return usd
	}
	cached = float64(n) * c.BatchShare
	t.Input = round(math.Max(0, float64(n)*j.MeanInput-cached*c.BatchTokens))
	hit := c.batchHitRate()
	t.CacheRead, t.CacheWrite1h = round(cached*hit*c.BatchTokens), round(cached*(1-hit)*c.BatchTokens)
	usd, _ := cost.BandCost(j.Model, t, true, long)
	// One primer (max_tokens 0) per organization and prefix.
	primers := cost.Tokens{CacheWrite1h: round(float64(max(c.BatchPrefixes, 1)*orgs) * c.BatchTokens)}
	pusd, _ := cost.TokensCost(j.Model, primers, false)
	return usd + pusd
}

// cacheEffect says whether the prompt cache changes the route or the
// binding limit: d against the same job decided without it.
func cacheEffect(d, uncached Decision) string {
	var parts []string
	if d.Route != uncached.Route || d.BatchN != uncached.BatchN {
		parts = append(parts, fmt.Sprintf("the route from %s to %s", routeText(uncached), routeText(d)))
	}
	if d.Binding != uncached.Binding {
		parts = append(parts, fmt.Sprintf("the binding limit from %s to %s", uncached.Binding, d.Binding))
	}
	saving := fmt.Sprintf("wall-clock %s → %s, cost %s → %s", fmtDuration(uncached.Wall.Mid), fmtDuration(d.Wall.Mid), d.FormatCost(uncached.Cost), d.FormatCost(d.Cost))
	var s string
	switch len(parts) {
	case 0:
		s = "prompt caching changes neither the route nor the binding limit (" + saving + ")"
	case 1:
		s = "prompt caching changes " + parts[0] + " (" + saving + ")"
	default:
		s = "prompt caching changes " + parts[0] + " and " + parts[1] + " (" + saving + ")"
	}
	if d.BatchN > 0 && d.Job.Cached.BatchShare > 0 {
		s += fmt.Sprintf("; on batch it assumes %.0f %% of rows read the primed prefix, and costs more than it saves below %.0f %% (then --cache-prefix off)",
			100*d.Job.Cached.batchHitRate(), 100*cost.CacheBreakEven1hOf(d.Job.Model))
	}
	return s
}

func routeText(d Decision) string {
	if d.Route == RouteSplit {
		return fmt.Sprintf("split (%s on batch)", fmtInt(d.BatchN))
	}
	return string(d.Route)
}
