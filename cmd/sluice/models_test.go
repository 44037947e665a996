package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// TestModelsCommand: `sluice models` prints the table with where each row
// came from; an overlay adds a model and corrects another; with keys it
// lists what each key's GET /v1/models offers and flags a model the API
// serves that the table lacks; a bad overlay is refused naming the file
// and the field.
func TestModelsCommand(t *testing.T) {
	_, base := simtest.Loopback(t, func(c *sim.Config) {
		c.Pools = map[string]api.Pool{"claude-next-1": "next"}
	})
	env := map[string]string{"ANTHROPIC_BASE_URL": base}
	for k, v := range fakeKeys {
		env[k] = v
	}
	out, stderr, err := executeWith(t, env, modelsCmd())
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{
		"claude-haiku-5-5", "×5 over 100000 prompt tokens", "0.25 (0.025×)", "built-in (https://platform.claude.com/docs/en/about-claude/pricing, read 2026-12-07)",
		"2026-10-21 refuses sampling parameters (refused), document blocks in assistant messages, citations on user text blocks",
		"what each key may use (GET /v1/models):", "high_prio (org 00000000-5111-4000-8000-000000000001)",
		"not in the table: claude-next-1 — its cost would be unknown; add it with --models FILE",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	overlay := filepath.Join(t.TempDir(), "models.json")
	os.WriteFile(overlay, []byte(`{"schema": 1, "models": [
	  {"id": "claude-next-1", "family": "sonnet", "pool": "next", "prices": {"input": 1, "cache_write_5m": 1.25, "cache_write_1h": 2, "cache_read": 0.1, "output": 5},
	   "source": "release notes", "read": "2027-01-02"},
	  {"id": "claude-sonnet-5-5", "prices": {"input": 2, "cache_write_5m": 2.5, "cache_write_1h": 4, "cache_read": 0.2, "output": 10}, "source": "invoice", "read": "2027-01-02"}]}`), 0o600)
	out, stderr, err = executeWith(t, env, modelsCmd(), "--models", overlay, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var got struct {
		Overlays []string `json:"overlays"`
		Models   []struct {
			ID, Origin, Source string
			Prices             *api.Prices
		} `json:"models"`
		Keys []struct {
			Label   string   `json:"label"`
			Missing []string `json:"missing"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	for i, m := range got.Models {
		rows[m.ID] = i
	}
	next, s55 := got.Models[rows["claude-next-1"]], got.Models[rows["claude-sonnet-5-5"]]
	if len(got.Overlays) != 1 || next.Origin != overlay || next.Prices == nil || s55.Origin != overlay || s55.Prices.CacheRead != 0.2 {
		t.Errorf("overlay rows: %+v %+v", next, s55)
	}
	for _, k := range got.Keys {
		if len(k.Missing) != 0 {
			t.Errorf("key %s still misses %v with the overlay", k.Label, k.Missing)
		}
	}
	// $SLUICE_MODELS applies too, before the flag.
	env[EnvModels] = overlay
	if out, _, err := executeWith(t, env, modelsCmd(), "--offline"); err != nil || !strings.Contains(out, "claude-next-1") {
		t.Errorf("SLUICE_MODELS: %v\n%s", err, out)
	}
	env[EnvModels] = ""

	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"schema": 1, "models": [{"id": "x", "family": "sonnet", "pool": "p", "price": 3, "source": "s", "read": "r"}]}`), 0o600)
	if _, _, err := executeWith(t, env, modelsCmd(), "--models", bad, "--offline"); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "price: not a field") {
		t.Errorf("a bad overlay: %v", err)
	}
	if api.Current() != api.Builtin() {
		t.Error("the command left its overlay in place")
	}
}
