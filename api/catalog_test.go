package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltinCatalog: every entry of the embedded file says where it was
// read and when, has a known family and a pool, and the models the API
// moved to in 2026 are there with their rules.
func TestBuiltinCatalog(t *testing.T) {
	c := Builtin()
	if len(c.Models()) < 20 {
		t.Fatalf("the built-in catalog has %d models", len(c.Models()))
	}
	for _, m := range c.Models() {
		if m.Source == "" || m.Read == "" || m.Pool == "" || m.Origin != BuiltinOrigin {
			t.Errorf("%s: source %q read %q pool %q origin %q", m.ID, m.Source, m.Read, m.Pool, m.Origin)
		}
		if !m.Priced {
			t.Errorf("%s has no prices", m.ID)
		}
	}
	h, ok := c.Lookup("claude-haiku-5-5")
	if !ok || h.LongContext == nil || h.LongContext.Threshold != 100_000 || h.LongContext.Multiplier != 5 || h.LongContext.Measure != MeasurePrompt {
		t.Errorf("Haiku 5.5: %+v %+v", h, h.LongContext)
	}
	// Per-model cache-read multipliers: 0.1×, 0.05×, 0.025× of input.
	for id, want := range map[string]float64{"claude-sonnet-4-5": 0.1, "claude-opus-5-5": 0.05, "claude-sonnet-5-5": 0.05, "claude-fable-5-1": 0.025, "claude-mythos-5-1": 0.025} {
		m, _ := c.Lookup(id)
		if got := m.Prices.CacheRead / m.Prices.Input; got < want*0.999 || got > want*1.001 {
			t.Errorf("%s: cache read %.4f× input, want %.3f×", id, got, want)
		}
	}
	if _, ok := c.Version(Version20261021); !ok {
		t.Error("no rules for 2026-10-21")
	}
}

func TestRules(t *testing.T) {
	c := Builtin()
	for _, tc := range []struct {
		version, model string
		sampling       Sampling
		by             string
		noDocs         bool
	}{
		{Version20230601, "claude-sonnet-4-5", SamplingAny, "", false},
		{Version20261021, "claude-sonnet-4-5", SamplingRefused, "API version 2026-10-21", true},
		// Sonnet 5 refuses non-default sampling on every version.
		{Version20230601, "claude-sonnet-5", SamplingDefaultOnly, "claude-sonnet-5", false},
		{Version20261021, "claude-sonnet-5", SamplingRefused, "API version 2026-10-21", true},
		// A model the catalog does not know: the version's rules alone.
		{Version20230601, "claude-new-9", SamplingAny, "", false},
		{Version20261021, "claude-new-9", SamplingRefused, "API version 2026-10-21", true},
		// A version it does not know: the model's rules alone.
		{"2027-01-01", "claude-sonnet-5", SamplingDefaultOnly, "claude-sonnet-5", false},
	} {
		r := c.Rules(tc.version, tc.model)
		if r.Sampling != tc.sampling || r.SamplingBy != tc.by || r.NoAssistantDocuments != tc.noDocs || r.NoUserCitations != tc.noDocs {
			t.Errorf("Rules(%s, %s) = %+v", tc.version, tc.model, r)
		}
	}
	if r := c.Rules("2027-01-01", "x"); r.KnownVersion {
		t.Error("an unknown version reported known")
	}
}

func TestLongContextOver(t *testing.T) {
	prompt := &LongContext{Threshold: 100_000, Multiplier: 5, Measure: MeasurePrompt}
	input := &LongContext{Threshold: 100_000, Multiplier: 5, Measure: MeasureInput}
	u := Usage{InputTokens: 40_000, CacheReadInputTokens: 60_000} // exactly 100,000: the lower band
	if prompt.Over(u) || input.Over(u) {
		t.Error("a prompt of exactly the threshold is over it")
	}
	u.CacheCreationInputTokens = 1
	if !prompt.Over(u) || input.Over(u) {
		t.Errorf("100,001 prompt tokens, 40,000 uncached: prompt over %v, input over %v", prompt.Over(u), input.Over(u))
	}
	if (*LongContext)(nil).Over(Usage{InputTokens: 1 << 40}) {
		t.Error("a nil rule is over")
	}
}

func writeOverlay(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOverlay: a file corrects a field of a built-in model and leaves its
// other fields, adds a model, and says where each row came from.
func TestOverlay(t *testing.T) {
	p := writeOverlay(t, `{"schema": 1, "models": [
	  {"id": "claude-sonnet-5-5", "prices": {"input": 2, "cache_write_5m": 2.5, "cache_write_1h": 4, "cache_read": 0.2, "output": 10}, "source": "my invoice", "read": "2026-12-08"},
	  {"id": "claude-sonnet-6", "family": "sonnet", "pool": "sonnet-6", "prices": {"input": 3, "cache_write_5m": 3.75, "cache_write_1h": 6, "cache_read": 0.3, "output": 15},
	   "long_context": {"threshold": 200000, "multiplier": 2}, "source": "https://example.com", "read": "2026-12-08"}],
	 "versions": [{"version": "2027-03-01", "sampling": "refused", "source": "s", "read": "2027-03-01"}]}`)
	c, err := LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Lookup("claude-sonnet-5-5")
	if s.Prices.CacheRead != 0.2 || s.Pool != "sonnet-5-5" || s.MaxOutput != 128000 || s.Origin != p || s.Source != "my invoice" {
		t.Errorf("corrected: %+v", s)
	}
	n, ok := c.Lookup("claude-sonnet-6")
	if !ok || !n.Priced || n.Family != FamilySonnet || n.LongContext.Measure != MeasurePrompt || n.Origin != p {
		t.Errorf("added: %+v", n)
	}
	if b, _ := Builtin().Lookup("claude-sonnet-5-5"); b.Prices.CacheRead != 0.1 {
		t.Errorf("the overlay changed the built-in catalog: %+v", b.Prices)
	}
	if r := c.Rules("2027-03-01", "claude-sonnet-4-5"); r.Sampling != SamplingRefused || !r.KnownVersion {
		t.Errorf("an added version: %+v", r)
	}
	restore := SetCatalog(c)
	if got := PoolOf("claude-sonnet-6"); got != "sonnet-6" {
		t.Errorf("PoolOf after SetCatalog: %s", got)
	}
	restore()
	if got := PoolOf("claude-sonnet-6"); got != "claude-sonnet-6" {
		t.Errorf("PoolOf after restore: %s", got)
	}
}

// TestOverlayPartialPrices: a correction that gives some prices of a known
// model changes those and keeps the others (never 0), and cites its own
// source; a long_context correction of the multiplier keeps the threshold.
func TestOverlayPartialPrices(t *testing.T) {
	p := writeOverlay(t, `{"schema":1,"models":[{"id":"claude-sonnet-5-5","prices":{"input":2.5,"output":12},"source":"my invoice","read":"2026-12-08"},
	  {"id":"claude-haiku-5-5","long_context":{"multiplier":4},"source":"notes","read":"2026-12-08"}]}`)
	c, err := LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Builtin().Lookup("claude-sonnet-5-5")
	s, _ := c.Lookup("claude-sonnet-5-5")
	want := b.Prices
	want.Input, want.Output = 2.5, 12
	if s.Prices != want || s.Prices.CacheRead == 0 || s.Source != "my invoice" || s.Read != "2026-12-08" {
		t.Errorf("corrected prices %+v (source %q %q), want %+v from my invoice", s.Prices, s.Source, s.Read, want)
	}
	bh, _ := Builtin().Lookup("claude-haiku-5-5")
	h, _ := c.Lookup("claude-haiku-5-5")
	if bh.LongContext == nil || h.LongContext == nil || h.LongContext.Threshold != bh.LongContext.Threshold || h.LongContext.Multiplier != 4 {
		t.Errorf("long_context %+v, want the built-in threshold with multiplier 4", h.LongContext)
	}
}

// TestOverlayErrors: a bad overlay is refused with the file, the entry and
// the field (or the line) in the message.
func TestOverlayErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "price": {}}]}`, `model "m": price: not a field`},
		{`{"schema": 1, "models": [{"id": "m", "family": "gpt", "pool": "p", "source": "s", "read": "r"}]}`, `model "m": family: "gpt"`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p"}]}`, `model "m": source and read: required`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "prices": {"input": -1, "cache_write_5m": 1, "cache_write_1h": 1, "cache_read": 1, "output": 1}}]}`, `prices.input: -1`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "prices": {"input": 2, "output": 10}}]}`, `model "m": prices: [cache_write_5m cache_write_1h cache_read] missing`},
		{`{"schema": 1, "models": [{"id": "claude-sonnet-5-5", "prices": {"input": 2}}]}`, `model "claude-sonnet-5-5": source and read: required in a correction`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "long_context": {"threshold": 0, "multiplier": 2}}]}`, `long_context.threshold`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "long_context": {"threshold": 5, "multiplier": 2, "measure": "tokens"}}]}`, `long_context.measure: "tokens"`},
		{`{"schema": 1, "models": [{"id": "m", "family": "sonnet", "pool": "p", "source": "s", "read": "r", "sampling": {"*": "some"}}]}`, `sampling["*"]: "some"`},
		{`{"schema": 1, "models": [{"id": "m", "aliases": ["claude-sonnet-4-5"], "family": "sonnet", "pool": "p", "source": "s", "read": "r"}]}`, `"claude-sonnet-4-5" is already the id or an alias of "claude-sonnet-4-5-20250929"`},
		{`{"schema": 1, "models": [{"family": "sonnet"}]}`, `models[0]: id: required`},
		{"{\"schema\": 1,\n \"models\": [\n {\"id\": \"m\",,}]}", `line 3:`},
		{`{"schema": 2}`, `schema: 2`},
		{`{"schema": 1, "versions": [{"version": "2027-01-01", "sampling": "none", "source": "s", "read": "r"}]}`, `versions "2027-01-01": sampling`},
	} {
		p := writeOverlay(t, tc.body)
		_, err := LoadCatalog(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want the file and %q", tc.body, err, tc.want)
		}
	}
	if _, err := LoadCatalog(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Error("a missing overlay file loaded")
	}
}
