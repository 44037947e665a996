// Package cost prices Anthropic API usage: the exact dollar cost of one
// response from its usage block, a Ledger of totals per organization for
// reports, and estimates for spend caps before a request is sent.
//
// Prices come from the api package's model catalog (docs/models.md), in
// USD per million tokens; Message Batches usage is discounted by the
// model's batch discount in every category, and a request over its model's
// long-context threshold is billed at the rule's multiple of every price.
// A model without a price has an unknown cost, never a number.
package cost

import (
	"math"

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
// USD per million tokens, below any long-context threshold, and false for
// a model the catalog does not know or lists without prices.
func Price(model string) (api.Prices, bool) {
	m, ok := api.LookupModel(model)
	if !ok || !m.Priced {
		return api.Prices{}, false
	}
	return m.Prices, true
}

// rate is how one bucket of usage is priced: the prices and the
// multiplier of every price (the batch discount, the long-context rule's).
type rate struct {
	prices api.Prices
	mult   float64
	known  bool
}

// rateOf returns the rate of model m's usage: batch, and over its
// long-context threshold or not.
func rateOf(m api.ModelInfo, known, batch, long bool) rate {
	if !known || !m.Priced {
		return rate{}
	}
	r := rate{prices: m.Prices, mult: 1, known: true}
	if batch {
		r.mult *= m.Discount()
	}
	if long && m.LongContext != nil {
		r.mult *= m.LongContext.Multiplier
	}
	return r
}

// Cost returns the USD cost of one response's usage: each category of
// TokensOf(u) at its price per million tokens, times the model's
// long-context multiplier when this request's prompt is over its threshold
// (every category, output included), times the model's batch discount
// when batch is true or u.ServiceTier is "batch". A model without a price
// costs 0 and known is false: its cost is unknown, not zero.
func Cost(model string, u api.Usage, batch bool) (usd float64, known bool) {
	m, ok := api.LookupModel(model)
	r := rateOf(m, ok, batch || u.ServiceTier == api.TierBatch, m.LongContext.Over(u))
	if !r.known {
		return 0, false
	}
	return r.price(TokensOf(u)), true
}

// TokensCost returns the USD cost of t for model at its catalog prices,
// discounted for batch, as requests below any long-context threshold, and
// false for a model without a price.
func TokensCost(model string, t Tokens, batch bool) (usd float64, known bool) {
	return BandCost(model, t, batch, false)
}

// BandCost is TokensCost for tokens of requests that are all over the
// model's long-context threshold (long) or all below it.
func BandCost(model string, t Tokens, batch, long bool) (usd float64, known bool) {
	m, ok := api.LookupModel(model)
	r := rateOf(m, ok, batch, long)
	if !r.known {
		return 0, false
	}
	return r.price(t), true
}

// Long reports whether a request of model with prompt tokens (uncached
// input, cache writes, cache reads) and uncached input is over the
// model's long-context threshold.
func Long(model string, prompt, uncached int64) bool {
	m, _ := api.LookupModel(model)
	return m.LongContext.Over(api.Usage{InputTokens: uncached, CacheReadInputTokens: prompt - uncached})
}

// price returns the USD cost of t at r.
func (r rate) price(t Tokens) float64 {
	return priceTokens(r.prices, t, r.mult)
}

// priceTokens returns the USD cost of t at prices p, times mult.
func priceTokens(p api.Prices, t Tokens, mult float64) float64 {
	micro := float64(t.Input)*p.Input +
		float64(t.CacheWrite5m)*p.CacheWrite5m +
		float64(t.CacheWrite1h)*p.CacheWrite1h +
		float64(t.CacheRead)*p.CacheRead +
		float64(t.Output)*p.Output
	return micro / 1e6 * mult
}

// maxRate is the highest price of each category across the catalog, at
// the highest long-context multiplier of the catalog's rules a request of
// inTokens input tokens is over (1 when it is over none; pass 0 for tokens
// of many requests, whose sizes are unknown): what a cap takes for a model
// without a price, so it errs on the side of stopping.
func maxRate(inTokens int64) rate {
	r := rate{mult: 1, known: true}
	for _, m := range api.Models() {
		if !m.Priced {
			continue
		}
		if lc := m.LongContext; lc != nil && inTokens > lc.Threshold {
			r.mult = max(r.mult, lc.Multiplier)
		}
		p := m.Prices
		r.prices.Input = max(r.prices.Input, p.Input)
		r.prices.CacheWrite5m = max(r.prices.CacheWrite5m, p.CacheWrite5m)
		r.prices.CacheWrite1h = max(r.prices.CacheWrite1h, p.CacheWrite1h)
		r.prices.CacheRead = max(r.prices.CacheRead, p.CacheRead)
		r.prices.Output = max(r.prices.Output, p.Output)
	}
	return r
}

// Estimate returns the USD cost one request would have if it used
// inTokens input tokens at the base input price and outTokens output
// tokens (pass max_tokens for an upper bound), discounted for batch and at
// the long-context multiplier when inTokens is over the model's threshold.
// It is meant for spend caps checked before sending. Prompt caching moves
// the real input cost from the model's cache-read price to its 1-hour
// write price. For a model without a price it uses the highest input and
// output prices in the catalog, at the highest long-context multiplier of
// the catalog's rules inTokens is over, so a cap errs on the side of
// stopping.
func Estimate(model string, inTokens, outTokens int64, batch bool) float64 {
	m, ok := api.LookupModel(model)
	long := m.LongContext.Over(api.Usage{InputTokens: inTokens})
	r := rateOf(m, ok, batch, long)
	if !r.known {
		r = maxRate(inTokens)
		if batch {
			r.mult *= api.BatchDiscount
		}
	}
	return r.price(Tokens{Input: inTokens, Output: outTokens})
}

// EstimateN is Estimate for n requests of mean input and output tokens,
// priced together (n × mean, rounded, per category), each in the
// long-context band when the mean input is over the threshold; known is
// false for a model without a price (the figure then takes the highest
// prices: for comparing routes, never to show as a cost).
func EstimateN(model string, n int, meanIn, meanOut float64, batch bool) (usd float64, known bool) {
	if n <= 0 {
		return 0, true
	}
	m, ok := api.LookupModel(model)
	long := m.LongContext.Over(api.Usage{InputTokens: int64(math.Round(meanIn))})
	r := rateOf(m, ok, batch, long)
	if known = r.known; !known {
		r = maxRate(int64(math.Round(meanIn)))
		if batch {
			r.mult *= api.BatchDiscount
		}
	}
	t := Tokens{Input: int64(math.Round(float64(n) * meanIn)), Output: int64(math.Round(float64(n) * meanOut))}
	return r.price(t), known
}

// CacheBreakEven1h is the share of rows that must read a prefix written
// with the 1-hour TTL for caching it to cost less than sending it as
// written, at the standard multipliers: a read billed 0.1× the input
// price and a miss writing at 2×, so h·0.1 + (1−h)·2 = 1 (the batch
// discount scales both sides alike). A model's own figure, from its
// prices, is CacheBreakEven1hOf's.
const CacheBreakEven1h = (2.0 - 1) / (2.0 - 0.1)

// CacheBreakEven1hOf is CacheBreakEven1h for model, from its own prices
// (cache reads are 0.1× on most models, 0.05× or 0.025× on some): h·read
// + (1−h)·write1h = input. A model without a price, or whose 1-hour write
// is not above its input price, gets CacheBreakEven1h. The planner warns
// below it; the batch runner stops adding breakpoints on an organization
// whose rows read below it.
func CacheBreakEven1hOf(model string) float64 {
	m, ok := api.LookupModel(model)
	if !ok || !m.Priced {
		return CacheBreakEven1h
	}
	p := m.Prices
	if p.CacheWrite1h <= p.Input || p.CacheWrite1h <= p.CacheRead {
		return CacheBreakEven1h
	}
	return (p.CacheWrite1h - p.Input) / (p.CacheWrite1h - p.CacheRead)
}
