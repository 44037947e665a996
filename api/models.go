package api

import (
	"sort"
	"strings"
)

// Pool names a rate-limit pool: models in one pool share an organization's
// RPM / ITPM / OTPM limits (rate-limits page, 2026-09: "Sonnet 4.x" is one
// pool, "Opus 4.x" another, Haiku 4.5 its own, Opus 5 and Sonnet 5 separate).
type Pool string

// The pools of the current public model line-up.
const (
	PoolSonnet4 Pool = "sonnet-4"
	PoolOpus4   Pool = "opus-4"
	PoolHaiku45 Pool = "haiku-4-5"
	PoolSonnet5 Pool = "sonnet-5"
	PoolOpus5   Pool = "opus-5"
	PoolFable5  Pool = "fable-5"
	PoolHaiku35 Pool = "haiku-3-5"
	PoolUnknown Pool = "unknown"
)

// Family is the coarse model family that sluice's etiquette caps are set by
// (Sonnet 100, Haiku 120, Opus 40, anything else 40 concurrent per key).
type Family string

// Model families.
const (
	FamilySonnet  Family = "sonnet"
	FamilyHaiku   Family = "haiku"
	FamilyOpus    Family = "opus"
	FamilyFable   Family = "fable"
	FamilyUnknown Family = "unknown"
)

// Prices are USD per million tokens at standard (non-batch) rates.
type Prices struct {
	Input, CacheWrite5m, CacheWrite1h, CacheRead, Output float64
}

// BatchDiscount multiplies every price category for Message Batches usage.
const BatchDiscount = 0.5

// ModelInfo is what sluice knows about one model id.
type ModelInfo struct {
	ID          string
	Aliases     []string
	DisplayName string
	Pool        Pool
	Family      Family
	Prices      Prices
	// MinCacheable is the shortest prefix, in tokens, that prompt caching
	// stores; shorter prefixes are silently not cached.
	MinCacheable int
	// MinCacheableSeen, when larger, is the minimum other sources give or
	// users measured (anthropic-api.md §6: about 2,048 for Sonnet 4.6,
	// 4,096 in copies for Opus 4.7): a breakpoint is added at MinCacheable
	// (too short costs nothing), relief is counted only above this.
	MinCacheableSeen int
	// MaxOutput is the largest max_tokens the model accepts.
	MaxOutput int
	// CreatedAt is the RFC 3339 release date reported by GET /v1/models.
	CreatedAt string
	// CacheReadsCountITPM is true for the few models whose cache reads count
	// toward ITPM (Haiku 3.5 in current docs).
	CacheReadsCountITPM bool
}

// DefaultMinCacheable is the minimum cacheable prefix taken for a model
// whose minimum is not known: the smallest the docs give a current model
// besides the newest, so a breakpoint is not withheld (one on a prefix
// too short is silently not cached and costs nothing).
const DefaultMinCacheable = 1024

// CacheReliefMinimum is the shortest prefix the planner counts as cached:
// the larger of the readings (MinCacheable, MinCacheableSeen), or for a
// model the catalog does not know the largest minimum any current model
// has, 4,096, so an unknown model's relief is never overstated.
func (m ModelInfo) CacheReliefMinimum() int {
	if m.MinCacheable == 0 {
		return 4096
	}
	return max(m.MinCacheable, m.MinCacheableSeen)
}

// CacheMinimums are the model's minimum cacheable prefix as documented
// (where a breakpoint is added) and at the larger reading (where relief is
// counted), for a model id or alias; an unknown model gets the defaults.
func CacheMinimums(model string) (min, relief int64) {
	m, _ := LookupModel(model)
	return int64(m.CacheMinimum()), int64(m.CacheReliefMinimum())
}

// CacheMinimum is m.MinCacheable, or DefaultMinCacheable when unset (a
// model the catalog does not know).
func (m ModelInfo) CacheMinimum() int {
	if m.MinCacheable > 0 {
		return m.MinCacheable
	}
	return DefaultMinCacheable
}

var (
	pricesSonnet4 = Prices{3, 3.75, 6, 0.30, 15}
	pricesOpus45  = Prices{5, 6.25, 10, 0.50, 25}
	pricesOpus41  = Prices{15, 18.75, 30, 1.50, 75}
	pricesHaiku45 = Prices{1, 1.25, 2, 0.10, 5}
)

// catalog lists the models, newest first within a family. Prices: pricing
// page ~2026-09; pools: rate-limits page 2026-09; cache minimums: prompt
// caching page 2026.
var catalog = []ModelInfo{
	{ID: "claude-sonnet-4-5-20250929", Aliases: []string{"claude-sonnet-4-5"}, DisplayName: "Claude Sonnet 4.5", Pool: PoolSonnet4, Family: FamilySonnet, Prices: pricesSonnet4, MinCacheable: 1024, MaxOutput: 64000, CreatedAt: "2025-09-29T00:00:00Z"},
	{ID: "claude-sonnet-4-6", DisplayName: "Claude Sonnet 4.6", Pool: PoolSonnet4, Family: FamilySonnet, Prices: pricesSonnet4, MinCacheable: 1024, MinCacheableSeen: 2048, MaxOutput: 64000, CreatedAt: "2026-02-17T00:00:00Z"},
	{ID: "claude-sonnet-4-20250514", Aliases: []string{"claude-sonnet-4-0"}, DisplayName: "Claude Sonnet 4", Pool: PoolSonnet4, Family: FamilySonnet, Prices: pricesSonnet4, MinCacheable: 1024, MaxOutput: 64000, CreatedAt: "2025-05-14T00:00:00Z"},
	{ID: "claude-haiku-4-5-20251001", Aliases: []string{"claude-haiku-4-5"}, DisplayName: "Claude Haiku 4.5", Pool: PoolHaiku45, Family: FamilyHaiku, Prices: pricesHaiku45, MinCacheable: 4096, MaxOutput: 64000, CreatedAt: "2025-10-01T00:00:00Z"},
	{ID: "claude-opus-4-8", DisplayName: "Claude Opus 4.8", Pool: PoolOpus4, Family: FamilyOpus, Prices: pricesOpus45, MinCacheable: 1024, MaxOutput: 64000, CreatedAt: "2026-06-01T00:00:00Z"},
	{ID: "claude-opus-4-7", DisplayName: "Claude Opus 4.7", Pool: PoolOpus4, Family: FamilyOpus, Prices: pricesOpus45, MinCacheable: 2048, MinCacheableSeen: 4096, MaxOutput: 64000, CreatedAt: "2026-04-01T00:00:00Z"},
	{ID: "claude-opus-4-6", DisplayName: "Claude Opus 4.6", Pool: PoolOpus4, Family: FamilyOpus, Prices: pricesOpus45, MinCacheable: 4096, MaxOutput: 64000, CreatedAt: "2026-02-05T00:00:00Z"},
	{ID: "claude-opus-4-5-20251101", Aliases: []string{"claude-opus-4-5"}, DisplayName: "Claude Opus 4.5", Pool: PoolOpus4, Family: FamilyOpus, Prices: pricesOpus45, MinCacheable: 4096, MaxOutput: 64000, CreatedAt: "2025-11-24T00:00:00Z"},
	{ID: "claude-opus-4-1-20250805", Aliases: []string{"claude-opus-4-1"}, DisplayName: "Claude Opus 4.1", Pool: PoolOpus4, Family: FamilyOpus, Prices: pricesOpus41, MinCacheable: 1024, MaxOutput: 32000, CreatedAt: "2025-08-05T00:00:00Z"},
	{ID: "claude-sonnet-5", DisplayName: "Claude Sonnet 5", Pool: PoolSonnet5, Family: FamilySonnet, Prices: Prices{2, 2.5, 4, 0.2, 10}, MinCacheable: 1024, MaxOutput: 64000, CreatedAt: "2026-06-09T00:00:00Z"},
	{ID: "claude-opus-5", DisplayName: "Claude Opus 5", Pool: PoolOpus5, Family: FamilyOpus, Prices: pricesOpus45, MinCacheable: 512, MaxOutput: 64000, CreatedAt: "2026-08-01T00:00:00Z"},
	{ID: "claude-fable-5", DisplayName: "Claude Fable 5", Pool: PoolFable5, Family: FamilyFable, Prices: Prices{10, 12.5, 20, 1, 50}, MinCacheable: 512, MaxOutput: 64000, CreatedAt: "2026-06-09T00:00:00Z"},
	{ID: "claude-3-5-haiku-20241022", Aliases: []string{"claude-3-5-haiku-latest"}, DisplayName: "Claude Haiku 3.5", Pool: PoolHaiku35, Family: FamilyHaiku, Prices: Prices{0.8, 1, 1.6, 0.08, 4}, MinCacheable: 2048, MaxOutput: 8192, CreatedAt: "2024-10-22T00:00:00Z", CacheReadsCountITPM: true},
}

var byName = func() map[string]*ModelInfo {
	m := make(map[string]*ModelInfo, 2*len(catalog))
	for i := range catalog {
		m[catalog[i].ID] = &catalog[i]
		for _, a := range catalog[i].Aliases {
			m[a] = &catalog[i]
		}
	}
	return m
}()

// LookupModel returns the catalog entry for a model id or alias.
func LookupModel(name string) (ModelInfo, bool) {
	m, ok := byName[name]
	if !ok {
		return ModelInfo{}, false
	}
	return *m, true
}

// Models returns every catalog entry, in catalog order. The slice is a copy.
func Models() []ModelInfo {
	return append([]ModelInfo(nil), catalog...)
}

// PoolOf returns the rate-limit pool of a model id or alias. Unknown names
// fall back on their family substring ("…sonnet…" → the Sonnet 4 pool and so
// on), else PoolUnknown.
func PoolOf(model string) Pool {
	if m, ok := byName[model]; ok {
		return m.Pool
	}
	switch FamilyOf(model) {
	case FamilySonnet:
		return PoolSonnet4
	case FamilyHaiku:
		return PoolHaiku45
	case FamilyOpus:
		return PoolOpus4
	case FamilyFable:
		return PoolFable5
	}
	return PoolUnknown
}

// FamilyOf returns the family of a model by catalog entry, else by the first
// family name found in the lower-cased id.
func FamilyOf(model string) Family {
	if m, ok := byName[model]; ok {
		return m.Family
	}
	low := strings.ToLower(model)
	for _, f := range []Family{FamilySonnet, FamilyHaiku, FamilyOpus, FamilyFable} {
		if strings.Contains(low, string(f)) {
			return f
		}
	}
	return FamilyUnknown
}

// PoolModels returns the catalog ids in pool p, sorted.
func PoolModels(p Pool) []string {
	var ids []string
	for _, m := range catalog {
		if m.Pool == p {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	return ids
}
