package sim

import (
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// PresetThreeOrg is the default world: the three organizations the system
// before sluice measured (../shared/data/phase0_limits.json).
const PresetThreeOrg = "three-org"

// The fixed fake keys of the three-org preset. They are documented so that
// scripts and tests can use them; they are not secrets.
const (
	FakeKeyHighPrio = "sk-ant-fake-sim-high-prio-0001"
	FakeKeyBatch    = "sk-ant-fake-sim-batch-0002"
	FakeKeyLowPrio  = "sk-ant-fake-sim-low-prio-0003"
)

// defaultBatchModel reproduces what the old system observed: 500-request
// batches done in about 5 minutes (3.5 min admission + 100 s processing),
// batches above 5,000 requests not starting for 8 hours.
func defaultBatchModel() BatchModel {
	return BatchModel{
		AdmissionBase:       Duration(60 * time.Second),
		AdmissionPerRequest: Duration(300 * time.Millisecond),
		ProcessingRate:      5,
		StarveAbove:         5000,
		StarveFor:           Duration(8 * time.Hour),
		ReadAfterWrite:      Duration(2 * time.Second),
		CancelDelay:         Duration(10 * time.Second),
		Expiry:              Duration(api.BatchLifetime),
	}
}

// defaultLatency: Sonnet fits the old system's Phase 1 runs (max_tokens 64:
// p50 ≈ 1.5 s, p95 ≈ 2.3 s); Haiku and Opus follow the third-party priors in
// anthropic-api.md §8.
func defaultLatency() map[string]LatencyModel {
	return map[string]LatencyModel{
		"default":               {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 64, Sigma: 0.25},
		string(api.PoolSonnet4): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 64, Sigma: 0.25},
		string(api.PoolSonnet5): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 70, Sigma: 0.25},
		string(api.PoolHaiku45): {TTFT: Duration(400 * time.Millisecond), TokensPerSec: 110, Sigma: 0.25},
		string(api.PoolHaiku35): {TTFT: Duration(500 * time.Millisecond), TokensPerSec: 68, Sigma: 0.25},
		string(api.PoolOpus4):   {TTFT: Duration(1200 * time.Millisecond), TokensPerSec: 45, Sigma: 0.3},
		string(api.PoolOpus5):   {TTFT: Duration(1200 * time.Millisecond), TokensPerSec: 45, Sigma: 0.3},
		string(api.PoolFable5):  {TTFT: Duration(2000 * time.Millisecond), TokensPerSec: 35, Sigma: 0.3},
	}
}

// base returns the settings every preset shares.
func base() Config {
	return Config{
		Seed:         1,
		TimeScale:    1,
		OTPMMode:     OTPMActual,
		BucketWindow: Duration(time.Minute),
		PromptCache:  true,
		Latency:      defaultLatency(),
		Output:       OutputModel{Min: 32, Max: 256},
		Faults:       Faults{SlowFactor: 20},
		Acceleration: Acceleration{Window: Duration(10 * time.Second), Factor: 4, FloorRPM: 600},
		Batch:        defaultBatchModel(),
	}
}

func threeOrg() Config {
	c := base()
	org := func(name, id, key string, sonnet, haiku, opus Limits) OrgConfig {
		return OrgConfig{
			Name: name, ID: id,
			Keys: []KeyConfig{{Label: name, Key: key}},
			Limits: map[api.Pool]Limits{
				api.PoolSonnet4: sonnet, api.PoolHaiku45: haiku, api.PoolOpus4: opus,
			},
			// Scale-tier values for what Phase 0 did not measure.
			DefaultLimits: &Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000},
			TokenCountRPM: 20_000,
			BatchRPM:      4_000,
			BatchQueueCap: 500_000,
		}
	}
	c.Orgs = []OrgConfig{
		// Haiku ITPM on high_prio was absent from its 429 probe: 12M assumed.
		org("high_prio", "00000000-5111-4000-8000-000000000001", FakeKeyHighPrio,
			Limits{30_000, 10_000_000, 1_000_000}, Limits{30_000, 12_000_000, 1_200_000}, Limits{150_000, 60_000_000, 10_000_000}),
		org("batch", "00000000-5111-4000-8000-000000000002", FakeKeyBatch,
			Limits{90_000, 8_000_000, 800_000}, Limits{4_000, 8_000_000, 800_000}, Limits{4_000, 10_000_000, 2_000_000}),
		org("low_prio", "00000000-5111-4000-8000-000000000003", FakeKeyLowPrio,
			Limits{30_000, 15_000_000, 1_200_000}, Limits{30_000, 24_000_000, 2_400_000}, Limits{150_000, 120_000_000, 12_000_000}),
	}
	return c
}

// tier builds a one-org world from a public tier table row.
func tier(name string, sonnet, haiku, opus, other Limits, tokenCountRPM, batchRPM, queueCap int64) Config {
	c := base()
	c.Orgs = []OrgConfig{{
		Name: name, ID: fmt.Sprintf("00000000-5111-4000-8001-%012x", crc32.ChecksumIEEE([]byte(name))),
		Keys:          []KeyConfig{{Label: name, Key: "sk-ant-fake-sim-" + name + "-0001"}},
		Limits:        map[api.Pool]Limits{api.PoolSonnet4: sonnet, api.PoolHaiku45: haiku, api.PoolOpus4: opus},
		DefaultLimits: &other,
		TokenCountRPM: tokenCountRPM, BatchRPM: batchRPM, BatchQueueCap: queueCap,
	}}
	return c
}

// presets maps each preset name to its constructor and a one-line note.
var presets = map[string]struct {
	make func() Config
	note string
}{
	PresetThreeOrg: {threeOrg, "the three orgs measured by the system before sluice (phase0_limits.json)"},
	// Tier 1-4: rate-limits page late 2025 (unchanged 2026-04-23).
	"tier1": {func() Config {
		l := Limits{50, 30_000, 8_000}
		return tier("tier1", l, Limits{50, 50_000, 10_000}, l, l, 100, 50, 100_000)
	}, "public Tier 1 (2025 table)"},
	"tier2": {func() Config {
		l := Limits{1_000, 450_000, 90_000}
		return tier("tier2", l, l, l, l, 2_000, 1_000, 200_000)
	}, "public Tier 2 (2025 table)"},
	"tier3": {func() Config {
		l := Limits{2_000, 800_000, 160_000}
		return tier("tier3", l, Limits{2_000, 1_000_000, 200_000}, l, l, 4_000, 2_000, 300_000)
	}, "public Tier 3 (2025 table)"},
	"tier4": {func() Config {
		l := Limits{4_000, 2_000_000, 400_000}
		return tier("tier4", l, Limits{4_000, 4_000_000, 800_000}, l, l, 8_000, 4_000, 500_000)
	}, "public Tier 4 (2025 table)"},
	// Start / Build / Scale: rate-limits page ~2026-09.
	"start": {func() Config {
		l := Limits{1_000, 2_000_000, 400_000}
		return tier("start", l, l, l, l, 5_000, 1_000, 200_000)
	}, "public Start tier (2026-09 table)"},
	"build": {func() Config {
		l := Limits{5_000, 5_000_000, 1_000_000}
		return tier("build", l, l, l, l, 10_000, 2_000, 300_000)
	}, "public Build tier (2026-09 table)"},
	"scale": {func() Config {
		l := Limits{10_000, 10_000_000, 2_000_000}
		return tier("scale", l, l, l, l, 20_000, 4_000, 500_000)
	}, "public Scale tier (2026-09 table)"},
}

// Preset returns a fresh copy of the named world.
func Preset(name string) (Config, error) {
	p, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("sim: unknown preset %q (have %v)", name, PresetNames())
	}
	return p.make(), nil
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PresetNote describes a preset in one line.
func PresetNote(name string) string { return presets[name].note }

// Default is the three-org preset.
func Default() Config { return threeOrg() }
