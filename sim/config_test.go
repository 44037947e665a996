package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

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
