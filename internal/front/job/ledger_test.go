package job_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/sim"
)

// writeLines writes one request per params object to path.
func writeLines(t *testing.T, path string, params []map[string]any) {
	t.Helper()
	var b strings.Builder
	for i, p := range params {
		line, err := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("r%04d", i), "params": p})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// words is n four-letter words: n tokens to the simulator's tokenizer.
func words(n int) string { return strings.Repeat("abcd ", n) }

// pricingInput is requests that use every pricing rule of the table: Haiku
// 5.5 prompts on both sides of its 100,000-token threshold (×5 on every
// token over it), and cached prefixes of Opus 5.5 (reads at 0.05×) and
// Fable 5.1 (0.025×, 1-hour writes).
func pricingInput(t *testing.T, path string) {
	var ps []map[string]any
	for i := range 8 {
		n := 70_000 + i*9_000 // 70,000 … 133,000 words: both bands
		ps = append(ps, map[string]any{"model": "claude-haiku-5-5", "max_tokens": 64,
			"system":   words(n),
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("question %d", i)}}})
	}
	for i := range 16 {
		model, ttl := "claude-opus-5-5", "5m"
		if i%2 == 1 {
			model, ttl = "claude-fable-5-1", "1h"
		}
		ps = append(ps, map[string]any{"model": model, "max_tokens": 64,
			"system":   []map[string]any{{"type": "text", "text": words(5000), "cache_control": map[string]any{"type": "ephemeral", "ttl": ttl}}},
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("item %d", i)}}})
	}
	writeLines(t, path, ps)
}

// listPrice prices the simulator's bills at the table's list prices: each
// model's tokens below its long-context threshold at its prices, over it
// at its multiple, batch rows at its batch discount.
func listPrice(t *testing.T, bills sim.Bills, batch bool) float64 {
	t.Helper()
	var usd float64
	price := func(p api.Prices, b sim.Billed) float64 {
		return (float64(b.Input)*p.Input + float64(b.CacheWrite5m)*p.CacheWrite5m + float64(b.CacheWrite1h)*p.CacheWrite1h +
			float64(b.CacheRead)*p.CacheRead + float64(b.Output)*p.Output) / 1e6
	}
	for model, mb := range bills {
		m, ok := api.LookupModel(model)
		if !ok {
			t.Fatalf("the simulator billed %s, which the table does not know", model)
		}
		d := price(m.Prices, mb.Standard)
		if mb.Long.Requests > 0 {
			d += price(m.Prices, mb.Long) * m.LongContext.Multiplier
		}
		if batch {
			d *= m.Discount()
		}
		usd += d
	}
	return usd
}

// TestLedgerExactUnderEveryPricingRule: what the simulator billed, priced
// at the list prices, is what sluice's ledger reports — sync and batch,
// with requests over a long-context threshold and cache reads at 0.05×
// and 0.025×.
func TestLedgerExactUnderEveryPricingRule(t *testing.T) {
	e := newEnv(t, 0, func(c *sim.Config) { c.TimeScale = 2000 })
	pricingInput(t, e.in)

	o := e.options()
	syncRep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	o.Output = filepath.Join(e.dir, "batch.jsonl")
	o.Plan = batchRouting(1)
	batchRep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if syncRep.Succeeded != 24 || batchRep.Succeeded != 24 {
		t.Fatalf("succeeded: sync %d, batch %d of 24", syncRep.Succeeded, batchRep.Succeeded)
	}

	var simSync, simBatch float64
	var long, reads int64
	for _, org := range e.sim.Stats().Orgs {
		for _, ls := range org.Pools {
			simSync += listPrice(t, ls.Billed, false)
			for _, mb := range ls.Billed {
				long += mb.Long.Requests
			}
			reads += ls.Billed["claude-opus-5-5"].Standard.CacheRead + ls.Billed["claude-fable-5-1"].Standard.CacheRead
		}
		simBatch += listPrice(t, org.Batches.Billed, true)
		for _, mb := range org.Batches.Billed {
			long += mb.Long.Requests
		}
	}
	if long == 0 || reads == 0 {
		t.Fatalf("the job exercised no long-context request (%d) or no cache read (%d)", long, reads)
	}
	got := syncRep.Cost.Total.USD + batchRep.Cost.Total.USD
	want := simSync + simBatch
	if math.Abs(got-want) > 1e-9*want {
		t.Errorf("sluice's ledger $%.10f (sync $%.10f, batch $%.10f), the simulator's bills at list prices $%.10f (sync $%.10f, batch $%.10f)",
			got, syncRep.Cost.Total.USD, batchRep.Cost.Total.USD, want, simSync, simBatch)
	}
	if syncRep.Cost.Total.LongContextRequests+batchRep.Cost.Total.LongContextRequests != long {
		t.Errorf("sluice counted %d+%d long-context requests, the simulator %d",
			syncRep.Cost.Total.LongContextRequests, batchRep.Cost.Total.LongContextRequests, long)
	}
	// The same tokens priced flat — the rule ignored — would not match.
	flat := syncRep.Cost.Models["claude-haiku-5-5"].Tokens
	if withRule, _ := cost.Cost("claude-haiku-5-5", api.Usage{}, false); withRule != 0 {
		t.Fatal("an empty usage costs something")
	}
	if f, _ := cost.TokensCost("claude-haiku-5-5", flat, false); math.Abs(f-syncRep.Cost.Models["claude-haiku-5-5"].USD) < 1e-9 {
		t.Error("Haiku 5.5's cost equals its tokens at the flat price: the long-context rule was not applied")
	}
}

// TestUnknownModelRun is the scenario: 600 requests on a model the
// table lacks, against an API that serves it. They get a pool of their own
// (named by the model, at the family's cap), one warning naming the
// overlay flag, and a cost reported as unknown — never $0. An overlay with
// the model's prices makes the cost exact.
func TestUnknownModelRun(t *testing.T) {
	const model = "claude-sonnet-9"
	e := newEnv(t, 0, func(c *sim.Config) {
		c.TimeScale = 2000
		c.Pools = map[string]api.Pool{model: "sonnet-9"}
	})
	var ps []map[string]any
	for i := range 600 {
		ps = append(ps, map[string]any{"model": model, "max_tokens": 64,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("rate item %d", i)}}})
	}
	writeLines(t, e.in, ps)

	rep, err := e.run(e.options())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 600 {
		t.Fatalf("succeeded %d of 600", rep.Succeeded)
	}
	tot := rep.Cost.Total
	if tot.Known() || tot.UnknownModelRequests != 600 || tot.USD != 0 {
		t.Errorf("cost totals %+v: want unknown for 600 requests", tot)
	}
	out, _ := json.Marshal(rep.Cost.Total)
	if !strings.Contains(string(out), `"usd":null`) || !strings.Contains(string(out), `"priced_usd":0`) {
		t.Errorf("the report's cost is a number: %s", out)
	}
	var text strings.Builder
	rep.Summary(&text)
	if !strings.Contains(text.String(), "cost: unknown") || strings.Contains(text.String(), "$0.0000 (sync") {
		t.Errorf("the printed report: %s", text.String())
	}
	for _, l := range rep.Lanes {
		if l.Pool != model || l.Cap != 100 {
			t.Errorf("lane %s/%s cap %d: want a pool of its own at the Sonnet cap", l.Org, l.Pool, l.Cap)
		}
	}
	if n := strings.Count(e.logBuf.String(), "is not in the model table"); n != 1 || !strings.Contains(e.logBuf.String(), "--models FILE") {
		t.Errorf("%d warnings (want one naming --models): %s", n, e.logBuf.String())
	}

	// With an overlay that prices it, the cost is exact.
	p := filepath.Join(e.dir, "models.json")
	if err := os.WriteFile(p, []byte(`{"schema": 1, "models": [{"id": "claude-sonnet-9", "family": "sonnet", "pool": "sonnet-9",
	  "prices": {"input": 2, "cache_write_5m": 2.5, "cache_write_1h": 4, "cache_read": 0.1, "output": 10},
	  "source": "the release notes", "read": "2027-01-01"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := api.LoadCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	defer api.SetCatalog(c)()
	before := e.sim.Stats()
	o := e.options()
	o.Output = filepath.Join(e.dir, "priced.jsonl")
	rep, err = e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	var bills sim.Bills = sim.Bills{}
	for name, org := range e.sim.Stats().Orgs {
		for pool, ls := range org.Pools {
			for m, mb := range ls.Billed {
				prev := before.Orgs[name].Pools[pool].Billed[m]
				mb.Standard.Requests -= prev.Standard.Requests
				mb.Standard.Input -= prev.Standard.Input
				mb.Standard.Output -= prev.Standard.Output
				mb.Standard.CacheRead -= prev.Standard.CacheRead
				mb.Standard.CacheWrite5m -= prev.Standard.CacheWrite5m
				mb.Standard.CacheWrite1h -= prev.Standard.CacheWrite1h
				b := bills[m]
				b.Standard.Requests += mb.Standard.Requests
				b.Standard.Input += mb.Standard.Input
				b.Standard.Output += mb.Standard.Output
				b.Standard.CacheRead += mb.Standard.CacheRead
				b.Standard.CacheWrite5m += mb.Standard.CacheWrite5m
				b.Standard.CacheWrite1h += mb.Standard.CacheWrite1h
				bills[m] = b
			}
		}
	}
	want := listPrice(t, bills, false)
	if !rep.Cost.Total.Known() || want <= 0 || math.Abs(rep.Cost.Total.USD-want) > 1e-9*want {
		t.Errorf("priced by the overlay: %+v, the simulator's bills at its prices $%.10f", rep.Cost.Total, want)
	}
}
