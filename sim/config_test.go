package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// TestConfigRoundTrip: what --print-config prints, --config reads back to
// the same world, whatever preset it is applied over.
func TestConfigRoundTrip(t *testing.T) {
	want := Default()
	want.TimeScale = 7
	want.Orgs[1].DefaultLimits = nil
	want.Orgs[0].Limits = nil
	want.Faults.P529 = 0.25
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, b, 0o644)
	base, _ := Preset("tier1")
	got, err := LoadConfig(path, base)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Orgs, want.Orgs)
	}
}

func TestConfigPartialOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"time_scale": 60, "faults": {"p500": 0.1}}`), 0o644)
	got, err := LoadConfig(path, Default())
	if err != nil {
		t.Fatal(err)
	}
	if got.TimeScale != 60 || got.Faults.P500 != 0.1 || len(got.Orgs) != 3 || got.Orgs[0].Limits[api.PoolSonnet4].RPM != 30_000 {
		t.Fatalf("partial override lost the preset: %+v", got)
	}
	os.WriteFile(path, []byte(`{"bogus": 1}`), 0o644)
	if _, err := LoadConfig(path, Default()); err == nil {
		t.Fatal("an unknown field must be refused")
	}
}

// TestConfigValidatesHeadersStormsColleagues: each bad value of the
// header, storm and colleague settings is refused with its field named;
// good values pass.
func TestConfigValidatesHeadersStormsColleagues(t *testing.T) {
	good := Colleague{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.3, InputTokens: 100, OutputTokens: 10}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" = valid
	}{
		{"every limiter omitted", func(c *Config) {
			c.OmitHeaders = []string{"requests", "tokens", "input-tokens", "output-tokens"}
		}, ""},
		{"unknown limiter", func(c *Config) { c.OmitHeaders = []string{"input_tokens"} }, "omit_headers"},
		{"coarse headers", func(c *Config) { c.CoarseHeaders, c.TimeScale = true, 10 }, ""},
		{"storm", func(c *Config) { c.Faults.Storms = []Storm{{Start: 0, Length: Duration(time.Second), P529: 1}} }, ""},
		{"storm p529 > 1", func(c *Config) { c.Faults.Storms = []Storm{{Length: Duration(time.Second), P529: 1.5}} }, "storms[0]"},
		{"storm p529 < 0", func(c *Config) { c.Faults.Storms = []Storm{{Length: Duration(time.Second), P529: -0.1}} }, "storms[0]"},
		{"storm without length", func(c *Config) { c.Faults.Storms = []Storm{{P529: 0.5}} }, "storms[0]"},
		{"storm before start", func(c *Config) {
			c.Faults.Storms = []Storm{{P529: 0.5, Length: Duration(time.Second)}, {Start: Duration(-time.Second), Length: Duration(time.Second)}}
		}, "storms[1]"},
		{"colleague", func(c *Config) { c.Colleagues = []Colleague{good} }, ""},
		{"colleague share 1, no tokens, a config pool", func(c *Config) {
			c.Pools = map[string]api.Pool{"claude-sim-x": api.PoolHaiku45}
			c.Colleagues = []Colleague{{Org: "batch", Model: "claude-sim-x", Share: 1}}
		}, ""},
		{"colleague of no org", func(c *Config) { g := good; g.Org = "nobody"; c.Colleagues = []Colleague{g} }, "no org"},
		{"colleague of an org id", func(c *Config) { g := good; g.Org = c.Orgs[0].ID; c.Colleagues = []Colleague{g} }, "no org"},
		{"colleague unknown model", func(c *Config) { g := good; g.Model = "claude-nope-9"; c.Colleagues = []Colleague{g} }, "unknown model"},
		{"colleague share 0", func(c *Config) { g := good; g.Share = 0; c.Colleagues = []Colleague{g} }, "share"},
		{"colleague share > 1", func(c *Config) { g := good; g.Share = 1.01; c.Colleagues = []Colleague{g} }, "share"},
		{"colleague negative input", func(c *Config) { g := good; g.InputTokens = -1; c.Colleagues = []Colleague{g} }, "input_tokens"},
		{"colleague negative output", func(c *Config) { g := good; g.OutputTokens = -1; c.Colleagues = []Colleague{good, g} }, "colleagues[1]"},
		{"colleague on an unlimited lane", func(c *Config) {
			c.Orgs[0].Limits = nil
			c.Orgs[0].DefaultLimits = nil
			c.Colleagues = []Colleague{good}
		}, "no RPM limit"},
	}
	for _, tt := range tests {
		cfg := Default()
		tt.mutate(&cfg)
		err := cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: Validate() = %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
}

// TestConfigColleaguesAndStormsLoad: the new fields round-trip through
// --print-config / --config, and a file's colleagues and storms replace
// the base's lists whole, leaving the base untouched.
func TestConfigColleaguesAndStormsLoad(t *testing.T) {
	want := Default()
	want.OmitHeaders = []string{"tokens"}
	want.CoarseHeaders = true
	want.Faults.Storms = []Storm{{Start: Duration(time.Minute), Length: Duration(30 * time.Second), P529: 0.4}}
	want.Colleagues = []Colleague{{Org: "batch", Model: "claude-haiku-4-5", Share: 0.25, InputTokens: 3000, OutputTokens: 300}}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"omit_headers"`, `"coarse_headers"`, `"storms"`, `"colleagues"`, `"share"`, `"input_tokens"`, `"p529"`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("printed config lacks %s", field)
		}
	}
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, b, 0o644)
	got, err := LoadConfig(path, Default())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip differs:\n got %+v %+v\nwant %+v %+v", got.Colleagues, got.Faults.Storms, want.Colleagues, want.Faults.Storms)
	}

	base := want
	base.Colleagues = []Colleague{want.Colleagues[0], {Org: "high_prio", Model: "claude-sonnet-4-5", Share: 1, InputTokens: 7, OutputTokens: 7}}
	base.Faults.Storms = []Storm{want.Faults.Storms[0], want.Faults.Storms[0]}
	os.WriteFile(path, []byte(`{"colleagues": [{"org": "low_prio", "model": "claude-opus-4-1", "share": 0.5}], "faults": {"storms": [{"start": "2m", "length": 10, "p529": 1}]}}`), 0o644)
	got, err = LoadConfig(path, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Colleagues) != 1 || got.Colleagues[0] != (Colleague{Org: "low_prio", Model: "claude-opus-4-1", Share: 0.5}) {
		t.Errorf("colleagues = %+v, want the file's one colleague, with no fields left from the base", got.Colleagues)
	}
	if len(got.Faults.Storms) != 1 || got.Faults.Storms[0] != (Storm{Start: Duration(2 * time.Minute), Length: Duration(10 * time.Second), P529: 1}) {
		t.Errorf("storms = %+v, want the file's one storm", got.Faults.Storms)
	}
	if base.Colleagues[0] != want.Colleagues[0] || base.Faults.Storms[0] != want.Faults.Storms[0] {
		t.Error("loading a file changed the base's lists")
	}
	if got.Faults.SlowFactor != base.Faults.SlowFactor || !got.CoarseHeaders {
		t.Error("a file naming only faults.storms must keep the base's other fault and header settings")
	}
}

// TestLoadConfigLeavesTheBaseAlone: a file that overrides a latency entry
// or a pool changes the loaded config, not the caller's base.
func TestLoadConfigLeavesTheBaseAlone(t *testing.T) {
	base := Default()
	before := base.Latency["default"].TokensPerSec
	path := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(path, []byte(`{"latency": {"default": {"ttft": "1s", "tokens_per_sec": 5, "sigma": 0}}, "pools": {"my-model": "sonnet-4"}}`), 0o644)
	got, err := LoadConfig(path, base)
	if err != nil {
		t.Fatal(err)
	}
	if got.Latency["default"].TokensPerSec != 5 || got.Pools["my-model"] != "sonnet-4" {
		t.Fatalf("loaded %+v %+v", got.Latency["default"], got.Pools)
	}
	if base.Latency["default"].TokensPerSec != before || base.Pools["my-model"] != "" {
		t.Fatalf("the base changed: %+v %+v", base.Latency["default"], base.Pools)
	}
}
