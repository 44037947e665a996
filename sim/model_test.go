package sim_test

import (
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

// TestModelIsTheWorldsAPISide: Config.Model carries every organization's
// limits, queue cap and batch model, the latency, output and batch models
// and the time scale — and copies the maps, so a planner that edits its
// model does not change the world it came from.
func TestModelIsTheWorldsAPISide(t *testing.T) {
	cfg := sim.Default()
	cfg.TimeScale = 40
	m := cfg.Model()
	if m.TimeScale != 40 || m.BucketWindow != cfg.BucketWindow || m.Output != cfg.Output || m.Batch != cfg.Batch {
		t.Fatalf("model %+v does not carry the config's scale, window, output and batch models", m)
	}
	if len(m.Orgs) != len(cfg.Orgs) || len(m.Latency) != len(cfg.Latency) {
		t.Fatalf("model has %d orgs and %d latency models, config %d and %d", len(m.Orgs), len(m.Latency), len(cfg.Orgs), len(cfg.Latency))
	}
	for i, o := range cfg.Orgs {
		mo := m.Orgs[i]
		if mo.Name != o.Name || mo.BatchQueueCap != o.BatchQueueCap || mo.Limits[api.PoolSonnet4] != o.Limits[api.PoolSonnet4] || *mo.DefaultLimits != *o.DefaultLimits {
			t.Errorf("org %d: model %+v, config %+v", i, mo, o)
		}
	}
	m.Orgs[0].Limits[api.PoolSonnet4] = sim.Limits{RPM: 1}
	m.Latency["default"] = sim.LatencyModel{}
	m.Orgs[0].DefaultLimits.RPM = 1
	if cfg.Orgs[0].Limits[api.PoolSonnet4].RPM == 1 || cfg.Latency["default"].TokensPerSec == 0 || cfg.Orgs[0].DefaultLimits.RPM == 1 {
		t.Error("editing the model changed the config: its maps are shared")
	}
	if pm, err := sim.PresetModel(sim.PresetThreeOrg); err != nil || len(pm.Orgs) != 3 {
		t.Errorf("PresetModel(three-org): %d orgs, %v", len(pm.Orgs), err)
	}
	if _, err := sim.PresetModel("no-such-preset"); err == nil {
		t.Error("PresetModel of an unknown preset: no error")
	}
}
