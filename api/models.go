package api

import (
	"sort"
	"strings"
)

// Pool names a rate-limit pool: models in one pool share an organization's
// RPM / ITPM / OTPM limits (rate-limits page, 2026-09: "Sonnet 4.x" is one
// pool, "Opus 4.x" another, Haiku 4.5 its own, Opus 5 and Sonnet 5
// separate). A model the catalog does not know is a pool of its own, named
// by its id (PoolOf).
type Pool string

// The pools of the built-in catalog that code names; the catalog file
// (models.json) is the authority on which model is in which.
const (
	PoolSonnet4 Pool = "sonnet-4"
	PoolOpus4   Pool = "opus-4"
	PoolHaiku45 Pool = "haiku-4-5"
	PoolSonnet5 Pool = "sonnet-5"
	PoolOpus5   Pool = "opus-5"
	PoolFable5  Pool = "fable-5"
	PoolHaiku35 Pool = "haiku-3-5"
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

// Families lists the families a catalog entry may name.
var Families = []Family{FamilySonnet, FamilyHaiku, FamilyOpus, FamilyFable, FamilyUnknown}

// Prices are USD per million tokens at standard (non-batch) rates, below
// any long-context threshold.
type Prices struct {
	Input        float64 `json:"input"`
	CacheWrite5m float64 `json:"cache_write_5m"`
	CacheWrite1h float64 `json:"cache_write_1h"`
	CacheRead    float64 `json:"cache_read"`
	Output       float64 `json:"output"`
}

// BatchDiscount is the default Message Batches multiplier of every price
// category ("All usage is charged at 50% of the standard API prices").
const BatchDiscount = 0.5

// Long-context measures: what counts toward a LongContext threshold.
const (
	// MeasurePrompt counts the whole prompt: uncached input, cache writes
	// and cache reads (the 2025 long-context rule's reading, the default).
	MeasurePrompt = "prompt"
	// MeasureInput counts uncached input tokens only.
	MeasureInput = "input"
)

// LongContext is a pricing rule: a request whose prompt is over Threshold
// tokens (by Measure) is billed at Multiplier × every price, output
// included, on every token of that request.
type LongContext struct {
	Threshold  int64   `json:"threshold"`
	Multiplier float64 `json:"multiplier"`
	Measure    string  `json:"measure,omitempty"`
}

// Over reports whether a request with this usage is over the threshold.
// A nil rule is never over.
func (lc *LongContext) Over(u Usage) bool {
	if lc == nil || lc.Threshold <= 0 {
		return false
	}
	n := u.InputTokens
	if lc.Measure != MeasureInput {
		n += u.CacheCreationInputTokens + u.CacheReadInputTokens
	}
	return n > lc.Threshold
}

// Sampling says which sampling parameters (temperature, top_p, top_k) a
// request may carry.
type Sampling string

// Sampling rules, from the mildest.
const (
	// SamplingAny: any valid value.
	SamplingAny Sampling = "any"
	// SamplingDefaultOnly: only at the defaults — temperature 1, top_p 1
	// (a reading: the docs give top_p no default), no top_k.
	SamplingDefaultOnly Sampling = "default_only"
	// SamplingRefused: refused when present at all, even at a default.
	SamplingRefused Sampling = "refused"
)

func (s Sampling) rank() int {
	switch s {
	case SamplingDefaultOnly:
		return 1
	case SamplingRefused:
		return 2
	}
	return 0
}

// ModelInfo is what sluice knows about one model id.
type ModelInfo struct {
	ID          string
	Aliases     []string
	DisplayName string
	Pool        Pool
	Family      Family
	// Prices are the standard prices; Priced is false for a model the
	// catalog lists without prices (its cost is unknown, like a model it
	// does not know).
	Prices Prices
	Priced bool
	// LongContext, when set, bills a request over its threshold at a
	// multiple of every price.
	LongContext *LongContext
	// BatchDiscount multiplies every price for Message Batches usage.
	BatchDiscount float64
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
	// Sampling is the model's own sampling rule by API version ("*": every
	// version); Catalog.Rules combines it with the version's.
	Sampling map[string]Sampling
	// Source and Read say where the entry was read and when; Origin is
	// "built-in" or the overlay file that last changed it; Note says why a
	// figure is what it is.
	Source, Read, Origin, Note string
}

// DefaultMinCacheable is the minimum cacheable prefix taken for a model
// whose minimum is not known: the smallest the docs give a current model
// besides the newest, so a breakpoint is not withheld (one on a prefix
// too short is silently not cached and costs nothing).
const DefaultMinCacheable = 1024

// CacheReliefMinimum is the shortest prefix the planner counts as cached:
// the larger of the readings (MinCacheable, MinCacheableSeen), or for a
// model whose minimum is not known the largest minimum any current model
// has, 4,096, so its relief is never overstated.
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

// CacheMinimum is m.MinCacheable, or DefaultMinCacheable when unset.
func (m ModelInfo) CacheMinimum() int {
	if m.MinCacheable > 0 {
		return m.MinCacheable
	}
	return DefaultMinCacheable
}

// Discount is m's batch multiplier (BatchDiscount when unset).
func (m ModelInfo) Discount() float64 {
	if m.BatchDiscount > 0 {
		return m.BatchDiscount
	}
	return BatchDiscount
}

// LookupModel returns the current catalog's entry for a model id or alias.
func LookupModel(name string) (ModelInfo, bool) { return Current().Lookup(name) }

// Models returns every entry of the current catalog, in its order. The
// slice is a copy.
func Models() []ModelInfo { return Current().Models() }

// PoolOf returns the rate-limit pool of a model id or alias: the catalog's,
// or, for a model it does not know, a pool of its own named by the id, so
// its limits are learned from its own headers and it never shares a lane
// with another model's limits.
func PoolOf(model string) Pool {
	if m, ok := LookupModel(model); ok {
		return m.Pool
	}
	return Pool(model)
}

// FamilyOf returns the family of a model by catalog entry, else by the first
// family name found in the lower-cased id (a new "claude-sonnet-…" is a
// Sonnet for its etiquette cap), else FamilyUnknown.
func FamilyOf(model string) Family {
	if m, ok := LookupModel(model); ok {
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

// FamilyOfPool returns the family of the models in pool p: the catalog's
// for one of its pools, else (a pool of one unknown model, named by its
// id) the family its name shows.
func FamilyOfPool(p Pool) Family {
	c := Current()
	for i := range c.models {
		if c.models[i].Pool == p {
			return c.models[i].Family
		}
	}
	return FamilyOf(string(p))
}

// KnownPool reports whether p is a pool of the current catalog.
func KnownPool(p Pool) bool {
	c := Current()
	for i := range c.models {
		if c.models[i].Pool == p {
			return true
		}
	}
	return false
}

// PoolModels returns the catalog ids in pool p, sorted.
func PoolModels(p Pool) []string {
	var ids []string
	for _, m := range Current().models {
		if m.Pool == p {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	return ids
}
