package cost_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

func ExampleCost() {
	u := api.Usage{InputTokens: 1000, CacheReadInputTokens: 50_000, OutputTokens: 500}
	usd, _ := cost.Cost("claude-sonnet-4-5", u, false)
	batch, _ := cost.Cost("claude-sonnet-4-5", u, true)
	fmt.Printf("$%.5f sync, $%.5f batch\n", usd, batch)
	// Output: $0.02550 sync, $0.01275 batch
}

func ExampleLedger() {
	var l cost.Ledger
	l.Add("high_prio", "claude-haiku-4-5", api.Usage{InputTokens: 2000, OutputTokens: 100}, false)
	l.Add("batch", "claude-haiku-4-5", api.Usage{InputTokens: 2000, OutputTokens: 100, ServiceTier: api.TierBatch}, false)
	s := l.Snapshot()
	fmt.Printf("%d requests, $%.5f (sync $%.5f, batch $%.5f)\n", s.Total.Requests, l.Total(), s.Total.SyncUSD, s.Total.BatchUSD)
	// Output: 2 requests, $0.00375 (sync $0.00250, batch $0.00125)
}
