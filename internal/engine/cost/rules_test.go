package cost

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// The pricing rules beyond a flat price per token (issue 39), against the
// figures the pricing and model pages print, per million tokens.

const haiku55 = "claude-haiku-5-5"

// TestLongContextPageFigures: a Haiku 5.5 request whose prompt is over
// 100,000 tokens pays the page's upper figure in every class, output
// included ($0.50 input, $0.625 5-minute write, $1 1-hour write, $0.05
// read, $2.50 output); one at or under it the lower ($0.10, $0.125, $0.20,
// $0.01, $0.50).
func TestLongContextPageFigures(t *testing.T) {
	const mtok = 1e6
	for _, tc := range []struct {
		name string
		u    api.Usage
		want float64
	}{
		{"input, under", api.Usage{InputTokens: 100_000}, 100_000 * 0.10 / mtok},
		{"input, over", api.Usage{InputTokens: 150_000}, 150_000 * 0.50 / mtok},
		{"output, under", api.Usage{InputTokens: 100_000, OutputTokens: 2_000}, (100_000*0.10 + 2_000*0.50) / mtok},
		{"output, over", api.Usage{InputTokens: 100_001, OutputTokens: 2_000}, (100_001*0.50 + 2_000*2.50) / mtok},
		{"5-minute write, over", api.Usage{InputTokens: 10, CacheCreationInputTokens: 120_000, CacheCreation: &api.CacheCreation{Ephemeral5m: 120_000}}, (10*0.50 + 120_000*0.625) / mtok},
		{"1-hour write, over", api.Usage{InputTokens: 10, CacheCreationInputTokens: 120_000, CacheCreation: &api.CacheCreation{Ephemeral1h: 120_000}}, (10*0.50 + 120_000*1.00) / mtok},
		{"cache read, over", api.Usage{InputTokens: 10, CacheReadInputTokens: 200_000}, (10*0.50 + 200_000*0.05) / mtok},
		{"cache read, under", api.Usage{InputTokens: 10, CacheReadInputTokens: 90_000}, (10*0.10 + 90_000*0.01) / mtok},
		// Cache reads count toward the prompt (the default reading).
		{"reads push it over", api.Usage{InputTokens: 50_000, CacheReadInputTokens: 50_001, OutputTokens: 100}, (50_000*0.50 + 50_001*0.05 + 100*2.50) / mtok},
	} {
		got, known := Cost(haiku55, tc.u, false)
		if !known || !near(got, tc.want) {
			t.Errorf("%s: Cost = %v (%v), want %v", tc.name, got, known, tc.want)
		}
		// The batch discount stacks with the multiplier.
		if b, _ := Cost(haiku55, tc.u, true); !near(b, tc.want/2) {
			t.Errorf("%s, batch: Cost = %v, want %v", tc.name, b, tc.want/2)
		}
	}
}

// TestCacheReadMultipliers: cache reads at the model's own price — 0.1×
// (Sonnet 4.5, $0.30), 0.05× (Opus 5.5, $0.20; Sonnet 5.5, $0.10) and
// 0.025× (Fable 5.1, $0.25) of input.
func TestCacheReadMultipliers(t *testing.T) {
	for model, want := range map[string]float64{"claude-sonnet-4-5": 0.30, "claude-opus-5-5": 0.20, "claude-sonnet-5-5": 0.10, "claude-fable-5-1": 0.25, "claude-mythos-5-1": 0.25, "claude-fable-5": 1} {
		got, known := Cost(model, api.Usage{CacheReadInputTokens: 1_000_000}, false)
		if !known || !near(got, want) {
			t.Errorf("%s: a million cache reads cost %v, want %v", model, got, want)
		}
	}
}

// TestLongContextMeasureReadings: the docs leave open what counts toward
// the threshold; an overlay that says "input" counts uncached input only.
func TestLongContextMeasureReadings(t *testing.T) {
	u := api.Usage{InputTokens: 40_000, CacheReadInputTokens: 70_000}
	prompt, _ := Cost(haiku55, u, false)
	if want := (40_000*0.50 + 70_000*0.05) / 1e6; !near(prompt, want) {
		t.Errorf("prompt reading: %v want %v", prompt, want)
	}
	p := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(p, []byte(`{"schema":1,"models":[{"id":"claude-haiku-5-5","long_context":{"threshold":100000,"multiplier":5,"measure":"input"},"source":"test","read":"2026-12-07"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := api.LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	defer api.SetCatalog(c)()
	input, _ := Cost(haiku55, u, false)
	if want := (40_000*0.10 + 70_000*0.01) / 1e6; !near(input, want) {
		t.Errorf("input reading: %v want %v", input, want)
	}
}

// TestLedgerLongContextExact: the ledger decides each request's band from
// its own usage, so a mix of long and short requests totals the sum of
// their Costs, whatever the order they arrive in.
func TestLedgerLongContextExact(t *testing.T) {
	var us []api.Usage
	for i := range 200 {
		in := int64(20_000 + i*1_000) // 20,000 … 219,000: both bands
		us = append(us, api.Usage{InputTokens: in, CacheReadInputTokens: int64(i * 37), OutputTokens: int64(100 + i)})
	}
	var want float64
	var l, r Ledger
	long := int64(0)
	for i, u := range us {
		c, _ := Cost(haiku55, u, i%3 == 0)
		want += c
		l.Add("org", haiku55, u, i%3 == 0)
		j := len(us) - 1 - i
		r.Add("org", haiku55, us[j], j%3 == 0)
		if u.InputTokens+u.CacheReadInputTokens > 100_000 {
			long++
		}
	}
	if l.Total() != r.Total() {
		t.Errorf("order matters: %v vs %v", l.Total(), r.Total())
	}
	if !near(l.Total(), want) {
		t.Errorf("ledger %v, sum of costs %v", l.Total(), want)
	}
	if s := l.Snapshot(); s.Total.LongContextRequests != long || s.Total.USD != l.Total() {
		t.Errorf("snapshot: %d long requests (want %d), USD %v", s.Total.LongContextRequests, long, s.Total.USD)
	}
	// Pricing the tokens of all 200 requests as one flat bucket would be
	// wrong: the rule is per request.
	var sum Tokens
	for _, u := range us {
		sum.add(TokensOf(u))
	}
	if flat, _ := TokensCost(haiku55, sum, false); near(flat, want) {
		t.Error("the flat price of the summed tokens equals the per-request cost; the test proves nothing")
	}
}

// TestUnpricedIsUnknown: a model without a price has an unknown cost —
// never a number in the JSON or the text — and a cap bounds it at the
// catalog's highest prices.
func TestUnpricedIsUnknown(t *testing.T) {
	u := api.Usage{InputTokens: 1000, OutputTokens: 100}
	if usd, known := Cost("claude-new-9", u, false); known || usd != 0 {
		t.Errorf("Cost(unknown) = %v, %v", usd, known)
	}
	var l Ledger
	l.Add("o", "claude-new-9", u, false)
	l.Add("o", sonnet45, u, false)
	priced, _ := Cost(sonnet45, u, false)
	if l.Total() != priced || l.Unpriced() != 1 {
		t.Errorf("Total %v (want the priced part %v), Unpriced %d", l.Total(), priced, l.Unpriced())
	}
	if b := l.Bound(); b < priced+Estimate("claude-new-9", 1000, 100, false)-1e-12 {
		t.Errorf("Bound %v does not cover the unpriced request at the highest prices", b)
	}
	s := l.Snapshot()
	out, _ := json.Marshal(s.Total)
	for _, want := range []string{`"usd":null`, `"sync_usd":null`, `"batch_usd":null`, `"priced_usd":`, `"unknown_model_requests":1`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("totals JSON %s lacks %s", out, want)
		}
	}
	if f := s.Total.FormatUSD(); !strings.HasPrefix(f, "unknown (priced $") || !strings.Contains(f, "1 requests") {
		t.Errorf("FormatUSD = %q", f)
	}
	var back Totals
	if err := json.Unmarshal(out, &back); err != nil || back.USD != s.Total.USD || back.UnknownModelRequests != 1 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	known := s.Models[sonnet45]
	if out, _ := json.Marshal(known); !strings.Contains(string(out), `"usd":0.`) || known.FormatUSD()[0] != '$' {
		t.Errorf("a priced model's totals: %s, %q", out, known.FormatUSD())
	}
	// A model an overlay lists without prices is unpriced too.
	p := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(p, []byte(`{"schema":1,"models":[{"id":"claude-x","family":"sonnet","pool":"x","source":"s","read":"r"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := api.LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	defer api.SetCatalog(c)()
	if _, known := Cost("claude-x", u, false); known {
		t.Error("a model listed without prices is priced")
	}
}

// TestCacheBreakEvenPerModel: the 1-hour cache's break-even hit rate is
// each model's, from its own prices: a 0.1× model's is the standard
// figure, a model whose reads cost less breaks even lower.
func TestCacheBreakEvenPerModel(t *testing.T) {
	std := CacheBreakEven1hOf("claude-sonnet-4-5")
	if !near(std, CacheBreakEven1h) {
		t.Errorf("a 0.1× model: %.4f, want the standard %.4f", std, CacheBreakEven1h)
	}
	var cheap string
	for _, m := range api.Models() {
		if m.Priced && m.Prices.Input > 0 && m.Prices.CacheRead < 0.09*m.Prices.Input {
			cheap = m.ID
			break
		}
	}
	if cheap == "" {
		t.Fatal("no model in the table reads the cache below 0.1×")
	}
	m, _ := api.LookupModel(cheap)
	p := m.Prices
	h := CacheBreakEven1hOf(cheap)
	// At h the cached and uncached costs of a row are equal.
	if !near(h*p.CacheRead+(1-h)*p.CacheWrite1h, p.Input) || h >= CacheBreakEven1h {
		t.Errorf("%s: break-even %.4f: cached %.4f per token vs input %.4f", cheap, h, h*p.CacheRead+(1-h)*p.CacheWrite1h, p.Input)
	}
	if CacheBreakEven1hOf("claude-unknown-9") != CacheBreakEven1h {
		t.Error("a model without prices: want the standard figure")
	}
}

// TestUnpricedEstimateLongContext: a model without a price is estimated
// at the catalog's highest prices, and at the highest long-context
// multiplier of the rules a request of its size is over — none below
// every threshold.
func TestUnpricedEstimateLongContext(t *testing.T) {
	var top float64 = 1
	var lowest, highest int64 = -1, 0
	for _, m := range api.Models() {
		if lc := m.LongContext; m.Priced && lc != nil {
			top = max(top, lc.Multiplier)
			highest = max(highest, lc.Threshold)
			if lowest < 0 || lc.Threshold < lowest {
				lowest = lc.Threshold
			}
		}
	}
	if top <= 1 {
		t.Fatal("no long-context rule in the table")
	}
	small := Estimate("claude-unknown-9", 1000, 0, false)
	if got, want := Estimate("claude-unknown-9", highest+1, 0, false), small*float64(highest+1)/1000; !near(got, want*top) {
		t.Errorf("a request over every threshold: $%.4f, want at least $%.4f (×%.0f)", got, want*top, top)
	}
	if got, want := Estimate("claude-unknown-9", lowest, 0, false), small*float64(lowest)/1000; !near(got, want) {
		t.Errorf("a request at the lowest threshold: $%.6f, want $%.6f (no multiplier)", got, want)
	}
}
