package cost

import (
	"math"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

const (
	sonnet45 = "claude-sonnet-4-5" // 3 / 3.75 / 6 / 0.30 / 15 per million
	haiku45  = "claude-haiku-4-5"  // 1 / 1.25 / 2 / 0.10 / 5
	opus48   = "claude-opus-4-8"   // 5 / 6.25 / 10 / 0.50 / 25
)

// near reports whether got equals want up to float rounding.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Max(1, math.Abs(want))
}

// everything uses every category: 1,000 input, 1,000 5-minute and 1,000
// 1-hour cache writes, 10,000 cache reads, 1,000 output.
var everything = api.Usage{
	InputTokens:              1000,
	CacheCreationInputTokens: 2000,
	CacheCreation:            &api.CacheCreation{Ephemeral5m: 1000, Ephemeral1h: 1000},
	CacheReadInputTokens:     10000,
	OutputTokens:             1000,
}

func tier(u api.Usage, t string) api.Usage { u.ServiceTier = t; return u }

func TestCost(t *testing.T) {
	tests := []struct {
		name  string
		model string
		u     api.Usage
		batch bool
		want  float64
	}{
		// Sonnet 4.5.
		{"input and output", sonnet45, api.Usage{InputTokens: 1000, OutputTokens: 500}, false, 0.003 + 0.0075},
		{"cache writes without a breakdown are 5-minute", sonnet45, api.Usage{InputTokens: 100, CacheCreationInputTokens: 2000}, false, 0.0003 + 0.0075},
		{"5-minute and 1-hour writes", sonnet45, api.Usage{CacheCreationInputTokens: 3000, CacheCreation: &api.CacheCreation{Ephemeral5m: 1000, Ephemeral1h: 2000}}, false, 0.00375 + 0.012},
		{"the breakdown wins over the total", sonnet45, api.Usage{CacheCreationInputTokens: 999_999, CacheCreation: &api.CacheCreation{Ephemeral1h: 1000}}, false, 0.006},
		{"cache reads", sonnet45, api.Usage{CacheReadInputTokens: 100_000}, false, 0.03},
		{"every category", sonnet45, everything, false, 0.003 + 0.00375 + 0.006 + 0.003 + 0.015},
		{"every category, batch", sonnet45, everything, true, (0.003 + 0.00375 + 0.006 + 0.003 + 0.015) / 2},
		{"service_tier batch counts as batch", sonnet45, tier(everything, api.TierBatch), false, 0.015375},
		{"batch flag with standard tier", sonnet45, tier(everything, api.TierStandard), true, 0.015375},
		{"priority tier is standard price", sonnet45, tier(everything, api.TierPriority), false, 0.03075},
		{"dated id prices as its alias", "claude-sonnet-4-5-20250929", everything, false, 0.03075},
		{"empty usage", sonnet45, api.Usage{}, false, 0},
		// Haiku 4.5.
		{"haiku every category", haiku45, everything, false, 0.001 + 0.00125 + 0.002 + 0.001 + 0.005},
		{"haiku every category, batch", haiku45, everything, true, 0.005125},
		// Opus 4.8.
		{"opus every category", opus48, everything, false, 0.005 + 0.00625 + 0.01 + 0.005 + 0.025},
		{"opus every category, batch", opus48, everything, true, 0.025625},
		{"opus a million in, a million out", opus48, api.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, false, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, known := Cost(tt.model, tt.u, tt.batch)
			if !known || !near(got, tt.want) {
				t.Errorf("Cost(%s, %+v, %v) = %.12f, %v want %.12f, true", tt.model, tt.u, tt.batch, got, known, tt.want)
			}
		})
	}
}

// TestBatchDiscountEveryCategory prices one million tokens of each category
// alone, at standard and batch rates.
func TestBatchDiscountEveryCategory(t *testing.T) {
	const m = 1_000_000
	tests := []struct {
		category    string
		u           api.Usage
		sync, batch float64 // Sonnet 4.5
	}{
		{"input", api.Usage{InputTokens: m}, 3, 1.5},
		{"5-minute cache write", api.Usage{CacheCreationInputTokens: m}, 3.75, 1.875},
		{"1-hour cache write", api.Usage{CacheCreationInputTokens: m, CacheCreation: &api.CacheCreation{Ephemeral1h: m}}, 6, 3},
		{"cache read", api.Usage{CacheReadInputTokens: m}, 0.30, 0.15},
		{"output", api.Usage{OutputTokens: m}, 15, 7.5},
	}
	for _, tt := range tests {
		t.Run(tt.category, func(t *testing.T) {
			for _, c := range []struct {
				batch bool
				want  float64
			}{{false, tt.sync}, {true, tt.batch}} {
				if got, _ := Cost(sonnet45, tt.u, c.batch); !near(got, c.want) {
					t.Errorf("Cost(%s, batch=%v) = %v want %v", tt.category, c.batch, got, c.want)
				}
			}
		})
	}
}

func TestUnknownModel(t *testing.T) {
	for _, model := range []string{"", "gpt-4o", "claude-sonnet-9-9"} {
		if got, known := Cost(model, everything, false); got != 0 || known {
			t.Errorf("Cost(%q) = %v, %v want 0, false", model, got, known)
		}
		if p, ok := Price(model); ok || p != (api.Prices{}) {
			t.Errorf("Price(%q) = %+v, %v want zero, false", model, p, ok)
		}
	}
}

func TestPrice(t *testing.T) {
	tests := []struct {
		model string
		want  api.Prices
	}{
		{sonnet45, api.Prices{Input: 3, CacheWrite5m: 3.75, CacheWrite1h: 6, CacheRead: 0.30, Output: 15}},
		{haiku45, api.Prices{Input: 1, CacheWrite5m: 1.25, CacheWrite1h: 2, CacheRead: 0.10, Output: 5}},
		{opus48, api.Prices{Input: 5, CacheWrite5m: 6.25, CacheWrite1h: 10, CacheRead: 0.50, Output: 25}},
	}
	for _, tt := range tests {
		if got, ok := Price(tt.model); !ok || got != tt.want {
			t.Errorf("Price(%s) = %+v, %v want %+v, true", tt.model, got, ok, tt.want)
		}
	}
}

func TestTokensOf(t *testing.T) {
	tests := []struct {
		name string
		u    api.Usage
		want Tokens
	}{
		{"no breakdown", api.Usage{InputTokens: 1, CacheCreationInputTokens: 2, CacheReadInputTokens: 3, OutputTokens: 4},
			Tokens{Input: 1, CacheWrite5m: 2, CacheRead: 3, Output: 4}},
		{"breakdown", everything, Tokens{Input: 1000, CacheWrite5m: 1000, CacheWrite1h: 1000, CacheRead: 10000, Output: 1000}},
	}
	for _, tt := range tests {
		if got := TokensOf(tt.u); got != tt.want {
			t.Errorf("%s: TokensOf = %+v want %+v", tt.name, got, tt.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	tests := []struct {
		name    string
		model   string
		in, out int64
		batch   bool
		want    float64
	}{
		{"sonnet", sonnet45, 1000, 500, false, 0.003 + 0.0075},
		{"sonnet batch", sonnet45, 1000, 500, true, 0.00525},
		{"haiku", haiku45, 10_000, 1000, false, 0.01 + 0.005},
		{"opus", opus48, 10_000, 1000, false, 0.05 + 0.025},
		{"nothing", opus48, 0, 0, false, 0},
	}
	for _, tt := range tests {
		if got := Estimate(tt.model, tt.in, tt.out, tt.batch); !near(got, tt.want) {
			t.Errorf("%s: Estimate(%s, %d, %d, %v) = %v want %v", tt.name, tt.model, tt.in, tt.out, tt.batch, got, tt.want)
		}
	}
}

// TestEstimateUnknownIsConservative: an unknown model is estimated at least
// as high as any model in the catalog, so a spend cap never lets it through
// cheaper.
func TestEstimateUnknownIsConservative(t *testing.T) {
	unknown := Estimate("claude-next", 10_000, 1000, false)
	if unknown <= 0 {
		t.Fatalf("Estimate(unknown) = %v, want > 0", unknown)
	}
	for _, m := range api.Models() {
		if e := Estimate(m.ID, 10_000, 1000, false); e > unknown {
			t.Errorf("Estimate(%s) = %v > Estimate(unknown) = %v", m.ID, e, unknown)
		}
	}
	if b := Estimate("claude-next", 10_000, 1000, true); !near(b, unknown*api.BatchDiscount) {
		t.Errorf("batch Estimate(unknown) = %v want %v", b, unknown*api.BatchDiscount)
	}
}
