package plan_test

import (
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

// itpmBound is the three-org preset with every org's Sonnet and Haiku 3.5
// pools bound by an ITPM of 3M (RPM and OTPM far above).
func itpmBound(t *testing.T) plan.World {
	w := preset(t, "three-org")
	for i := range w.Orgs {
		lim := map[api.Pool]plan.Limits{}
		for _, p := range []api.Pool{api.PoolSonnet4, api.PoolHaiku35} {
			lim[p] = plan.Limits{RPM: 100_000, ITPM: 3_000_000, OTPM: 10_000_000}
		}
		w.Orgs[i].Limits, w.Orgs[i].DefaultLimits = lim, nil
	}
	return w
}

// TestCachedPrefixRelievesITPM: a job whose requests share a 3,000-token
// prefix of their 3,300 is charged on ITPM only for its own 300 and the
// writes (one per org), so its ITPM-bound rate rises by about 3,300 ÷ 300
// (here until the concurrency cap binds instead), its cost falls as reads
// at 0.1× and writes at 1.25× say, and the decision says that caching
// changed the binding limit. A model whose reads count toward ITPM (Haiku
// 3.5) keeps its rate; its cost still falls.
func TestCachedPrefixRelievesITPM(t *testing.T) {
	w := itpmBound(t)
	const n = 20_000
	plain := plan.Job{N: n, Model: sonnet, MeanInput: 3300, MaxTokens: 64}
	cached := plain
	cached.Cached = plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 1, BatchShare: 1, BatchTokens: 3000, BatchPrefixes: 1}
	o := plan.Options{Priority: plan.PreferLatency, MinBatch: n + 1} // sync only
	p, c := decide(t, w, plain, o), decide(t, w, cached, o)
	if p.Binding != plan.BindITPM || c.Binding == plan.BindITPM {
		t.Fatalf("binding %s uncached, %s cached; want ITPM, then another", p.Binding, c.Binding)
	}
	if ratio := p.SyncWall.Mid.Seconds() / c.SyncWall.Mid.Seconds(); ratio < 3 {
		t.Errorf("sync wall-clock %s uncached, %s cached: ×%.1f, want several times faster", p.SyncWall.Mid, c.SyncWall.Mid, ratio)
	}
	if !strings.Contains(c.CacheEffect, "binding limit from "+plan.BindITPM) || p.CacheEffect != "" {
		t.Errorf("cache effect %q (uncached %q)", c.CacheEffect, p.CacheEffect)
	}
	// Sync cost: one 5-minute write per org, the rest read.
	orgs := int64(len(w.Orgs))
	out := int64(math.Round(n * c.Job.MeanOutput))
	want, _ := cost.TokensCost(sonnet, cost.Tokens{Input: n * 300, CacheWrite5m: orgs * 3000, CacheRead: (n - orgs) * 3000, Output: out}, false)
	if !near(c.SyncCost, want, 1e-6) {
		t.Errorf("cached sync cost $%.4f, want $%.4f", c.SyncCost, want)
	}
	// Batch cost: rows read at the default 64 %, write 1 h otherwise, at
	// the batch price; one sync primer (max_tokens 0) per org.
	rows, _ := cost.TokensCost(sonnet, cost.Tokens{Input: n * 300, CacheRead: n * 3000 * 64 / 100, CacheWrite1h: n * 3000 * 36 / 100, Output: out}, true)
	primers, _ := cost.TokensCost(sonnet, cost.Tokens{CacheWrite1h: orgs * 3000}, false)
	if !near(c.BatchCost, rows+primers, 1e-6) {
		t.Errorf("cached batch cost $%.4f, want $%.4f", c.BatchCost, rows+primers)
	}
	if c.SyncCost >= p.SyncCost*0.4 {
		t.Errorf("sync cost $%.2f cached, $%.2f uncached", c.SyncCost, p.SyncCost)
	}

	old := plain
	old.Model = "claude-3-5-haiku-20241022"
	oldCached := old
	oldCached.Cached = cached.Cached
	po, co := decide(t, w, old, o), decide(t, w, oldCached, o)
	if co.Binding != plan.BindITPM || !near(co.SyncWall.Mid.Seconds(), po.SyncWall.Mid.Seconds(), 0.01*po.SyncWall.Mid.Seconds()) {
		t.Errorf("Haiku 3.5 (reads count toward ITPM): %s in %s cached, %s in %s uncached; want the same", co.Binding, co.SyncWall.Mid, po.Binding, po.SyncWall.Mid)
	}
	if co.SyncCost >= po.SyncCost || !strings.Contains(co.CacheEffect, "neither") {
		t.Errorf("Haiku 3.5: cost $%.2f cached, $%.2f uncached; effect %q", co.SyncCost, po.SyncCost, co.CacheEffect)
	}
}

// TestCachedPrefixCanChangeTheRoute: under the cost priority an
// ITPM-bound job whose prefix is cached may stay on batch or not, but the
// decision always compares against the uncached job and says whether the
// route changed.
func TestCachedPrefixSaysTheRoute(t *testing.T) {
	w := itpmBound(t)
	j := plan.Job{N: 200_000, Model: sonnet, MeanInput: 3300, MaxTokens: 64, Cached: plan.CachedPrefix{Share: 0.9, Tokens: 3000, Prefixes: 2}}
	for _, prio := range []plan.Priority{plan.PreferLatency, plan.PreferBalanced, plan.PreferCost} {
		d := decide(t, w, j, plan.Options{Priority: prio})
		plain := j
		plain.Cached = plan.CachedPrefix{}
		u := decide(t, w, plain, plan.Options{Priority: prio})
		changed := d.Route != u.Route || d.BatchN != u.BatchN
		if changed != strings.Contains(d.CacheEffect, "the route from") {
			t.Errorf("%s: route %s (%d batch) cached, %s (%d) uncached; effect %q", prio, d.Route, d.BatchN, u.Route, u.BatchN, d.CacheEffect)
		}
	}
}

// TestBatchBreakEven: at BatchBreakEven the cached batch job costs what
// the uncached one does; above it less, below it more.
func TestBatchBreakEven(t *testing.T) {
	w := itpmBound(t)
	o := plan.Options{Priority: plan.PreferCost}
	plain := plan.Job{N: 50_000, Model: sonnet, MeanInput: 3300, MaxTokens: 64}
	u := decide(t, w, plain, o)
	costAt := func(h float64) float64 {
		j := plain
		j.Cached = plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 1, BatchHitRate: h, BatchShare: 1, BatchTokens: 3000, BatchPrefixes: 1}
		return decide(t, w, j, o).BatchCost
	}
	primers, _ := cost.TokensCost(sonnet, cost.Tokens{CacheWrite1h: int64(len(w.Orgs)) * 3000}, false)
	if at := costAt(plan.BatchBreakEven); !near(at-primers, u.BatchCost, 0.01) {
		t.Errorf("at the break-even %.3f: $%.4f (less primers), uncached $%.4f", plan.BatchBreakEven, at-primers, u.BatchCost)
	}
	if costAt(0.3) <= u.BatchCost || costAt(0.9) >= u.BatchCost {
		t.Errorf("30 %%: $%.2f, 90 %%: $%.2f, uncached $%.2f", costAt(0.3), costAt(0.9), u.BatchCost)
	}
}

// TestCachedPrefixUnknownModel: a model the catalog does not know has no
// known prices nor cache rules: it is planned as written, with no relief.
func TestCachedPrefixUnknownModel(t *testing.T) {
	w := itpmBound(t)
	j := plan.Job{N: 1000, Model: "claude-future-9", MeanInput: 3300, MaxTokens: 64}
	plain := decide(t, w, j, plan.Options{})
	j.Cached = plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 1, BatchShare: 1, BatchTokens: 3000, BatchPrefixes: 1}
	d := decide(t, w, j, plan.Options{})
	if d.Cost != plain.Cost || d.Cost <= 0 || d.CacheEffect != "" || d.SyncWall != plain.SyncWall {
		t.Errorf("unknown model: cost $%.2f (plain $%.2f), effect %q", d.Cost, plain.Cost, d.CacheEffect)
	}
}

// TestCachedSplitWritesOncePerOrg: the sync share of a split still pays
// one write per organization and prefix, however few requests it has.
func TestCachedSplitWritesOncePerOrg(t *testing.T) {
	w := itpmBound(t)
	orgs := int64(len(w.Orgs))
	j := plan.Job{N: 1_000_000, Model: sonnet, MeanInput: 3300, MeanOutput: 50, MaxTokens: 64, Cached: plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 1, BatchShare: 1, BatchTokens: 3000, BatchPrefixes: 1}}
	d := decide(t, w, j, plan.Options{Priority: plan.PreferLatency})
	if d.Route != plan.RouteSplit {
		t.Skipf("route %s: no split to check", d.Route)
	}
	s := int64(d.SyncN)
	syncPart, _ := cost.TokensCost(sonnet, cost.Tokens{Input: s * 300, CacheWrite5m: orgs * 3000, CacheRead: (s - orgs) * 3000, Output: s * 50}, false)
	b := int64(d.BatchN)
	rows, _ := cost.TokensCost(sonnet, cost.Tokens{Input: b * 300, CacheRead: b * 3000 * 64 / 100, CacheWrite1h: b * 3000 * 36 / 100, Output: b * 50}, true)
	primers, _ := cost.TokensCost(sonnet, cost.Tokens{CacheWrite1h: orgs * 3000}, false)
	if !near(d.Cost, syncPart+rows+primers, 1e-3) {
		t.Errorf("split cost $%.4f, want $%.4f", d.Cost, syncPart+rows+primers)
	}
}

// TestBatchShareBelowThreshold: groups too small for the batch route's
// threshold are priced on batch as written, as the engine sends them.
func TestBatchShareBelowThreshold(t *testing.T) {
	w := itpmBound(t)
	j := plan.Job{N: 300, Model: sonnet, MeanInput: 3300, MaxTokens: 64}
	plain := decide(t, w, j, plan.Options{Priority: plan.PreferCost})
	j.Cached = plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 20} // no batch share
	d := decide(t, w, j, plan.Options{Priority: plan.PreferCost})
	if !near(d.BatchCost, plain.BatchCost, 1e-9) || d.SyncCost >= plain.SyncCost {
		t.Errorf("batch $%.4f (as written $%.4f), sync $%.4f (as written $%.4f)", d.BatchCost, plain.BatchCost, d.SyncCost, plain.SyncCost)
	}
	if n := plan.BatchSharers(3); n != 57 {
		t.Errorf("BatchSharers(3) = %d, want 19 per org at 64 %%", n)
	}
}

func TestCachedPrefixInvalid(t *testing.T) {
	w := itpmBound(t)
	for _, c := range []plan.CachedPrefix{{Share: 1.5, Tokens: 10}, {Share: 1, Tokens: 5000}, {Share: 0.5, Tokens: 10, BatchHitRate: 2}} {
		if _, err := plan.Decide(w, plan.Job{N: 10, Model: sonnet, MeanInput: 3300, MaxTokens: 64, Cached: c}, plan.Options{}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestSeedTurnaroundOnBatchWall: where the batch route caches a prefix,
// each organization's chunks of it wait for a one-request seed batch
// (internal/engine/batch/seed.go), so the batch wall-clock is one small batch's
// turnaround longer; a job sent to batch as written waits for none.
func TestSeedTurnaroundOnBatchWall(t *testing.T) {
	w := itpmBound(t)
	o := plan.Options{Priority: plan.PreferCost}
	j := plan.Job{N: 20_000, Model: sonnet, MeanInput: 3300, MaxTokens: 64,
		Cached: plan.CachedPrefix{Share: 1, Tokens: 3000, Prefixes: 1}}
	asWritten := decide(t, w, j, o)
	j.Cached.BatchShare, j.Cached.BatchTokens, j.Cached.BatchPrefixes = 1, 3000, 1
	seeded := decide(t, w, j, o)
	one := decide(t, w, plan.Job{N: 1, Model: sonnet, MeanInput: 3300, MaxTokens: 64}, plan.Options{Priority: plan.PreferCost, MinBatch: 1})
	seed := one.BatchWall.Mid - w.BatchOverhead
	if seed <= 0 {
		t.Fatalf("a one-request batch: %+v", one.BatchWall)
	}
	if got := seeded.BatchWall.Mid - asWritten.BatchWall.Mid; got != seed {
		t.Errorf("seeded batch wall %v, as written %v: %v more, want the seed's %v", seeded.BatchWall.Mid, asWritten.BatchWall.Mid, got, seed)
	}
}

// TestBatchAsWrittenPerRequestBand: batch rows sent as written (a cached
// prefix on sync only) are each billed in their own long-context band,
// read from one request's prompt, never from the job's total tokens: 300
// Haiku 5.5 requests of 5,000 tokens are all far below its 100k threshold.
func TestBatchAsWrittenPerRequestBand(t *testing.T) {
	const haiku55 = "claude-haiku-5-5"
	m, ok := api.LookupModel(haiku55)
	if !ok || m.LongContext == nil || 300*5000 <= m.LongContext.Threshold {
		t.Fatalf("the test needs %s with a long-context threshold below the job's total: %+v", haiku55, m.LongContext)
	}
	w := itpmBound(t)
	j := plan.Job{N: 300, Model: haiku55, MeanInput: 5000, MeanOutput: 50, MaxTokens: 64,
		Cached: plan.CachedPrefix{Share: 1, Tokens: 4000, Prefixes: 1}}
	d := decide(t, w, j, plan.Options{Priority: plan.PreferCost})
	want, _ := cost.TokensCost(haiku55, cost.Tokens{Input: 300 * 5000, Output: 300 * 50}, true)
	if !near(d.BatchCost, want, 1e-9) {
		t.Errorf("batch cost $%.4f, want $%.4f (each request below the threshold)", d.BatchCost, want)
	}
}

// TestLongLinesPricedInTheirBand: a job whose few long lines are over the
// model's long-context threshold, though its mean is far below, pays the
// multiple on those lines (sluice plan --input knows them line by line).
func TestLongLinesPricedInTheirBand(t *testing.T) {
	const haiku55 = "claude-haiku-5-5"
	m, ok := api.LookupModel(haiku55)
	if !ok || m.LongContext == nil || m.LongContext.Threshold >= 150_000 {
		t.Fatalf("the test needs %s with a long-context threshold below 150,000: %+v", haiku55, m.LongContext)
	}
	w := itpmBound(t)
	// 90 lines of 1,000 tokens and 10 of 150,000: a mean of 15,900.
	j := plan.Job{N: 100, Model: haiku55, MeanInput: 15_900, MeanOutput: 50, MaxTokens: 64,
		Long: plan.LongPart{Share: 0.1, MeanInput: 150_000}}
	d := decide(t, w, j, plan.Options{})
	short, _ := cost.BandCost(haiku55, cost.Tokens{Input: 90 * 1000, Output: 90 * 50}, false, false)
	long, _ := cost.BandCost(haiku55, cost.Tokens{Input: 10 * 150_000, Output: 10 * 50}, false, true)
	if !near(d.SyncCost, short+long, 1e-9) {
		t.Errorf("sync cost $%.4f, want $%.4f (the 10 long lines at the multiple)", d.SyncCost, short+long)
	}
	j.Long = plan.LongPart{}
	if flat := decide(t, w, j, plan.Options{}); flat.SyncCost >= d.SyncCost {
		t.Errorf("without the long lines known: $%.4f, not below $%.4f", flat.SyncCost, d.SyncCost)
	}
}
