package cost

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// The requests of the concurrency test, each with its hand-computed cost.
var (
	// Sonnet 4.5, standard: 1,000×3 + 200×15 = 6,000 per million = $0.006.
	sonnetSync = api.Usage{InputTokens: 1000, OutputTokens: 200}
	// Haiku 4.5, batch: 2,000×1 + 400×1.25 + 600×2 + 10,000×0.10 + 400×5
	// = 6,700 per million = $0.0067, halved = $0.00335.
	haikuBatch = api.Usage{InputTokens: 2000, CacheCreationInputTokens: 1000,
		CacheCreation: &api.CacheCreation{Ephemeral5m: 400, Ephemeral1h: 600}, CacheReadInputTokens: 10000, OutputTokens: 400}
	// An unknown model: tokens counted, no price.
	unknownUsage = api.Usage{InputTokens: 100, OutputTokens: 100}
)

// TestLedgerConcurrent has 100 goroutines add 11 requests each, half of
// them for org-a, half for org-b, and checks every total exactly.
func TestLedgerConcurrent(t *testing.T) {
	var l Ledger
	var wg sync.WaitGroup
	for g := range 100 {
		org := "org-a"
		if g%2 == 1 {
			org = "org-b"
		}
		wg.Go(func() {
			for range 5 {
				l.Add(org, sonnet45, sonnetSync, false)
				l.Add(org, haiku45, haikuBatch, true)
				_ = l.Total() // readers run alongside writers
			}
			l.Add(org, "claude-unknown-9", unknownUsage, false)
		})
	}
	wg.Wait()

	s := l.Snapshot()
	want := Totals{
		Requests:             1100,
		BatchRequests:        500,
		UnknownModelRequests: 100,
		Tokens: Tokens{
			Input:        500*1000 + 500*2000 + 100*100,
			CacheWrite5m: 500 * 400,
			CacheWrite1h: 500 * 600,
			CacheRead:    500 * 10000,
			Output:       500*200 + 500*400 + 100*100,
		},
		SyncUSD:  500 * 0.006,   // $3.00
		BatchUSD: 500 * 0.00335, // $1.675
		USD:      4.675,
	}
	checkTotals(t, "total", s.Total, want)
	half := Totals{
		Requests: 550, BatchRequests: 250, UnknownModelRequests: 50,
		Tokens:  Tokens{Input: 755_000, CacheWrite5m: 100_000, CacheWrite1h: 150_000, CacheRead: 2_500_000, Output: 155_000},
		SyncUSD: 1.5, BatchUSD: 0.8375, USD: 2.3375,
	}
	checkTotals(t, "org-a", s.Orgs["org-a"], half)
	checkTotals(t, "org-b", s.Orgs["org-b"], half)
	if len(s.Orgs) != 2 {
		t.Errorf("Snapshot has %d orgs, want 2", len(s.Orgs))
	}
	checkTotals(t, "model "+haiku45, s.Models[haiku45], Totals{
		Requests: 500, BatchRequests: 500,
		Tokens:   Tokens{Input: 1_000_000, CacheWrite5m: 200_000, CacheWrite1h: 300_000, CacheRead: 5_000_000, Output: 200_000},
		BatchUSD: 1.675, USD: 1.675,
	})
	if got := s.UnknownModels; !reflect.DeepEqual(got, []string{"claude-unknown-9"}) {
		t.Errorf("UnknownModels = %q", got)
	}
	if l.Total() != s.Total.USD {
		t.Errorf("Total() = %v, Snapshot().Total.USD = %v: not equal", l.Total(), s.Total.USD)
	}
}

func checkTotals(t *testing.T, what string, got, want Totals) {
	t.Helper()
	if got.Requests != want.Requests || got.BatchRequests != want.BatchRequests ||
		got.UnknownModelRequests != want.UnknownModelRequests || got.Tokens != want.Tokens {
		t.Errorf("%s counts = %+v\nwant %+v", what, got, want)
	}
	if !near(got.SyncUSD, want.SyncUSD) || !near(got.BatchUSD, want.BatchUSD) || !near(got.USD, want.USD) {
		t.Errorf("%s USD = sync %.12f batch %.12f total %.12f, want %.12f %.12f %.12f",
			what, got.SyncUSD, got.BatchUSD, got.USD, want.SyncUSD, want.BatchUSD, want.USD)
	}
}

// TestLedgerOrderIndependent: the same requests added in opposite orders
// give bit-for-bit equal snapshots.
func TestLedgerOrderIndependent(t *testing.T) {
	type add struct {
		org, model string
		u          api.Usage
		batch      bool
	}
	var adds []add
	models := []string{sonnet45, haiku45, opus48, "claude-sonnet-4-5-20250929"}
	for i := range 200 {
		u := api.Usage{InputTokens: int64(i*37 + 1), CacheReadInputTokens: int64(i * 101), OutputTokens: int64(i*13 + 7)}
		if i%3 == 0 {
			u.CacheCreationInputTokens = int64(i * 11)
		}
		adds = append(adds, add{[]string{"x", "y", "z"}[i%3], models[i%len(models)], u, i%5 == 0})
	}
	var forward, backward Ledger
	for i := range adds {
		a, b := adds[i], adds[len(adds)-1-i]
		forward.Add(a.org, a.model, a.u, a.batch)
		backward.Add(b.org, b.model, b.u, b.batch)
	}
	f, b := forward.Snapshot(), backward.Snapshot()
	if !reflect.DeepEqual(f, b) {
		t.Errorf("snapshots differ:\n%+v\n%+v", f, b)
	}
	if forward.Total() != backward.Total() || forward.Total() <= 0 {
		t.Errorf("Total() = %v and %v, want equal and positive", forward.Total(), backward.Total())
	}
}

// TestLedgerMatchesCost: one request's ledger cost is its Cost.
func TestLedgerMatchesCost(t *testing.T) {
	tests := []struct {
		name  string
		model string
		u     api.Usage
		batch bool
	}{
		{"sync", opus48, everything, false},
		{"batch flag", opus48, everything, true},
		{"batch tier", haiku45, tier(everything, api.TierBatch), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Ledger
			l.Add("o", tt.model, tt.u, tt.batch)
			want, _ := Cost(tt.model, tt.u, tt.batch)
			s := l.Snapshot()
			if l.Total() != want || s.Total.USD != want {
				t.Errorf("Total() = %v, Snapshot USD = %v, want Cost = %v", l.Total(), s.Total.USD, want)
			}
			isBatch := tt.batch || tt.u.ServiceTier == api.TierBatch
			if (s.Total.BatchUSD == want) != isBatch || (s.Total.BatchRequests == 1) != isBatch {
				t.Errorf("batch %v but snapshot %+v", isBatch, s.Total)
			}
		})
	}
}

func TestLedgerZero(t *testing.T) {
	var l Ledger
	if l.Total() != 0 {
		t.Errorf("zero Ledger Total() = %v", l.Total())
	}
	s := l.Snapshot()
	if s.Total != (Totals{}) || len(s.Orgs) != 0 || len(s.Models) != 0 || s.UnknownModels != nil {
		t.Errorf("zero Ledger Snapshot() = %+v", s)
	}
}

func TestSnapshotJSON(t *testing.T) {
	var l Ledger
	l.Add("org-a", sonnet45, sonnetSync, false)
	out, err := json.Marshal(l.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"total":{"requests":1,`, `"orgs":{"org-a":`, `"models":{"claude-sonnet-4-5":`,
		`"tokens":{"input":1000,"cache_write_5m":0,"cache_write_1h":0,"cache_read":0,"output":200}`, `"sync_usd":0.006`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("snapshot JSON %s lacks %s", out, want)
		}
	}
	if strings.Contains(string(out), "unknown_models") {
		t.Errorf("snapshot JSON %s lists unknown models, there are none", out)
	}
}
