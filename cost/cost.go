// Package cost prices Anthropic API usage: the exact dollar cost of one
// response from its usage block, a Ledger of totals per organization for
// reports, and estimates for spend caps before a request is sent.
//
// Prices come from the api package's model catalog, in USD per million
// tokens; Message Batches usage is discounted by api.BatchDiscount in every
// category.
package cost

import (
	"github.com/sluice-dev/sluice/api"
)

// Tokens counts tokens by price category. Cache writes are split by TTL
// because a 1-hour write costs more than a 5-minute one.
type Tokens struct {
	Input        int64 `json:"input"`
	CacheWrite5m int64 `json:"cache_write_5m"`
	CacheWrite1h int64 `json:"cache_write_1h"`
	CacheRead    int64 `json:"cache_read"`
	Output       int64 `json:"output"`
}

// TokensOf sorts a usage block into price categories. Cache writes come from
// u.CacheCreation when present; without it, all of
// CacheCreationInputTokens counts as 5-minute writes, the API's default TTL.
func TokensOf(u api.Usage) Tokens {
	t := Tokens{
		Input:        u.InputTokens,
		CacheWrite5m: u.CacheCreationInputTokens,
		CacheRead:    u.CacheReadInputTokens,
		Output:       u.OutputTokens,
	}
	if c := u.CacheCreation; c != nil {
		t.CacheWrite5m, t.CacheWrite1h = c.Ephemeral5m, c.Ephemeral1h
	}
	return t
}

// add adds o to t.
func (t *Tokens) add(o Tokens) {
	t.Input += o.Input
	t.CacheWrite5m += o.CacheWrite5m
	t.CacheWrite1h += o.CacheWrite1h
	t.CacheRead += o.CacheRead
	t.Output += o.Output
}

// Price returns the standard (non-batch) prices of a model id or alias, in
// USD per million tokens, and false for a model the catalog does not know.
func Price(model string) (api.Prices, bool) {
	m, ok := api.LookupModel(model)
	if !ok {
		return api.Prices{}, false
	}
	return m.Prices, true
}

// Cost returns the USD cost of one response's usage: each category of
// TokensOf(u) at its price per million tokens, all discounted by
// api.BatchDiscount when batch is true or u.ServiceTier is "batch". An
// unknown model costs 0 and known is false.
func Cost(model string, u api.Usage, batch bool) (usd float64, known bool) {
	p, ok := Price(model)
	if !ok {
		return 0, false
	}
	return priceTokens(p, TokensOf(u), batch || u.ServiceTier == api.TierBatch), true
}

// TokensCost returns the USD cost of t for model at its catalog prices,
// discounted for batch, and false for a model the catalog does not know.
func TokensCost(model string, t Tokens, batch bool) (usd float64, known bool) {
	p, ok := Price(model)
	if !ok {
		return 0, false
	}
	return priceTokens(p, t, batch), true
}

// priceTokens returns the USD cost of t at prices p, discounted for batch.
func priceTokens(p api.Prices, t Tokens, batch bool) float64 {
	micro := float64(t.Input)*p.Input +
		float64(t.CacheWrite5m)*p.CacheWrite5m +
		float64(t.CacheWrite1h)*p.CacheWrite1h +
		float64(t.CacheRead)*p.CacheRead +
		float64(t.Output)*p.Output
	d := micro / 1e6
	if batch {
		d *= api.BatchDiscount
	}
	return d
}

// maxPrices is the highest price of each category across the catalog.
var maxPrices = func() api.Prices {
	var mp api.Prices
	for _, m := range api.Models() {
		p := m.Prices
		mp.Input = max(mp.Input, p.Input)
		mp.CacheWrite5m = max(mp.CacheWrite5m, p.CacheWrite5m)
		mp.CacheWrite1h = max(mp.CacheWrite1h, p.CacheWrite1h)
		mp.CacheRead = max(mp.CacheRead, p.CacheRead)
		mp.Output = max(mp.Output, p.Output)
	}
	return mp
}()

// Estimate returns the USD cost a request would have if it used inTokens
// input tokens at the base input price and outTokens output tokens (pass
// max_tokens for an upper bound), discounted for batch. It is meant for
// spend caps checked before sending. Prompt caching moves the real input
// cost from 0.1× (reads) to 2× (1-hour writes) of the base price. For a
// model the catalog does not know it uses the highest input and output
// prices in the catalog, so a cap errs on the side of stopping.
func Estimate(model string, inTokens, outTokens int64, batch bool) float64 {
	p, ok := Price(model)
	if !ok {
		p = maxPrices
	}
	return priceTokens(p, Tokens{Input: inTokens, Output: outTokens}, batch)
}

// CacheBreakEven1h is the share of rows that must read a prefix written
// with the 1-hour TTL for caching it to cost less than sending it as
// written: a read is billed 0.1× the input price and a miss writes at 2×,
// so h·0.1 + (1−h)·2 = 1 (the batch discount scales both sides alike).
// The planner warns below it; the batch runner stops adding breakpoints
// on an organization whose rows read below it.
const CacheBreakEven1h = (2.0 - 1) / (2.0 - 0.1)
