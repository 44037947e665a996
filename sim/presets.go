package sim

import (
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/apimodel"
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

// base returns the settings every preset shares.
func base() Config {
	return Config{
		Seed:         1,
		TimeScale:    1,
		OTPMMode:     OTPMActual,
		BucketWindow: apimodel.DefaultBucketWindow,
		PromptCache:  true,
		Latency:      apimodel.DefaultLatency(),
		Output:       apimodel.DefaultOutput(),
		Faults:       Faults{SlowFactor: 20},
		Acceleration: Acceleration{Window: Duration(10 * time.Second), Factor: 4, FloorRPM: 600},
		Batch:        apimodel.DefaultBatch(),
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
			Limits{RPM: 30_000, ITPM: 10_000_000, OTPM: 1_000_000}, Limits{RPM: 30_000, ITPM: 12_000_000, OTPM: 1_200_000}, Limits{RPM: 150_000, ITPM: 60_000_000, OTPM: 10_000_000}),
		org("batch", "00000000-5111-4000-8000-000000000002", FakeKeyBatch,
			Limits{RPM: 90_000, ITPM: 8_000_000, OTPM: 800_000}, Limits{RPM: 4_000, ITPM: 8_000_000, OTPM: 800_000}, Limits{RPM: 4_000, ITPM: 10_000_000, OTPM: 2_000_000}),
		org("low_prio", "00000000-5111-4000-8000-000000000003", FakeKeyLowPrio,
			Limits{RPM: 30_000, ITPM: 15_000_000, OTPM: 1_200_000}, Limits{RPM: 30_000, ITPM: 24_000_000, OTPM: 2_400_000}, Limits{RPM: 150_000, ITPM: 120_000_000, OTPM: 12_000_000}),
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
		l := Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000}
		return tier("tier1", l, Limits{RPM: 50, ITPM: 50_000, OTPM: 10_000}, l, l, 100, 50, 100_000)
	}, "public Tier 1 (2025 table)"},
	"tier2": {func() Config {
		l := Limits{RPM: 1_000, ITPM: 450_000, OTPM: 90_000}
		return tier("tier2", l, l, l, l, 2_000, 1_000, 200_000)
	}, "public Tier 2 (2025 table)"},
	"tier3": {func() Config {
		l := Limits{RPM: 2_000, ITPM: 800_000, OTPM: 160_000}
		return tier("tier3", l, Limits{RPM: 2_000, ITPM: 1_000_000, OTPM: 200_000}, l, l, 4_000, 2_000, 300_000)
	}, "public Tier 3 (2025 table)"},
	"tier4": {func() Config {
		l := Limits{RPM: 4_000, ITPM: 2_000_000, OTPM: 400_000}
		return tier("tier4", l, Limits{RPM: 4_000, ITPM: 4_000_000, OTPM: 800_000}, l, l, 8_000, 4_000, 500_000)
	}, "public Tier 4 (2025 table)"},
	// Start / Build / Scale: rate-limits page ~2026-09.
	"start": {func() Config {
		l := Limits{RPM: 1_000, ITPM: 2_000_000, OTPM: 400_000}
		return tier("start", l, l, l, l, 5_000, 1_000, 200_000)
	}, "public Start tier (2026-09 table)"},
	"build": {func() Config {
		l := Limits{RPM: 5_000, ITPM: 5_000_000, OTPM: 1_000_000}
		return tier("build", l, l, l, l, 10_000, 2_000, 300_000)
	}, "public Build tier (2026-09 table)"},
	"scale": {func() Config {
		l := Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000}
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

// PresetModel is the API-facing model of preset name (Config.Model), what
// the planner predicts from.
func PresetModel(name string) (apimodel.Model, error) {
	cfg, err := Preset(name)
	if err != nil {
		return apimodel.Model{}, err
	}
	return cfg.Model(), nil
}
