package sim

import (
	"maps"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// What the simulator bills, by model and price class: the exact-ledger
// check (docs/models.md) prices these counts at the list prices and
// compares them with what sluice's ledger says. The simulator decides each
// request's long-context band itself, from its own token count and the
// model table's threshold, so the check tests sluice's per-request rule
// against an independent reading of it.

// Billed counts the tokens of one price class.
type Billed struct {
	Requests     int64 `json:"requests"`
	Input        int64 `json:"input"`
	CacheWrite5m int64 `json:"cache_write_5m"`
	CacheWrite1h int64 `json:"cache_write_1h"`
	CacheRead    int64 `json:"cache_read"`
	Output       int64 `json:"output"`
}

// ModelBill is one model's billed tokens, below its long-context
// threshold (Standard) and over it (Long).
type ModelBill struct {
	Standard Billed `json:"standard"`
	Long     Billed `json:"long"`
}

// Bills is ModelBill by model id (as the request named it).
type Bills map[string]ModelBill

// longBand reports whether a request of model with prompt tokens in all
// (uncached, written, read) and uncached of them uncached is over the
// model's long-context threshold.
func longBand(model string, prompt, uncached int64) bool {
	m, ok := api.LookupModel(model)
	if !ok || m.LongContext == nil {
		return false
	}
	n := prompt
	if m.LongContext.Measure == api.MeasureInput {
		n = uncached
	}
	return n > m.LongContext.Threshold
}

// add bills one request of model: uncached input, cache writes (ttl's),
// cache reads and output.
func (b *Bills) add(model string, uncached, write int64, ttl time.Duration, read, output int64) {
	if *b == nil {
		*b = Bills{}
	}
	mb := (*b)[model]
	band := &mb.Standard
	if longBand(model, uncached+write+read, uncached) {
		band = &mb.Long
	}
	band.Requests++
	band.Input += uncached
	if ttl == time.Hour {
		band.CacheWrite1h += write
	} else {
		band.CacheWrite5m += write
	}
	band.CacheRead += read
	band.Output += output
	(*b)[model] = mb
}

// bill adds one answer's usage to the lane's bills.
func (s *LaneStats) billModel(model string, u api.Usage) {
	ttl := 5 * time.Minute
	if u.CacheCreation != nil && u.CacheCreation.Ephemeral1h > 0 {
		ttl = time.Hour
	}
	s.Billed.add(model, u.InputTokens, u.CacheCreationInputTokens, ttl, u.CacheReadInputTokens, u.OutputTokens)
}

// clone returns a copy that shares nothing with b.
func (b Bills) clone() Bills { return maps.Clone(b) }
