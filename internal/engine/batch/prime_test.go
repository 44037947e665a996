package batch

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
)

// cachedRequests returns n Sonnet requests sharing a long system prompt,
// prepared as the job prepares them for the batch route: Sent carries a
// 1 h breakpoint at the end of the system prompt, CachePrefix names it.
func cachedRequests(n int, extra map[string]any) []*call.Request {
	rubric := strings.Repeat("criterion ", 3000) // above Sonnet's minimum
	out := make([]*call.Request, n)
	for i := range out {
		body := func(cc bool) []byte {
			sys := map[string]any{"type": "text", "text": rubric}
			if cc {
				sys["cache_control"] = map[string]any{"type": "ephemeral", "ttl": "1h"}
			}
			m := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64,
				"system":   []any{sys},
				"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Judge answer number %d.", i)}}}
			for k, v := range extra {
				m[k] = v
			}
			b, _ := json.Marshal(m)
			return b
		}
		p := body(false)
		out[i] = &call.Request{ID: fmt.Sprintf("r%d", i), Params: p, Sent: body(true), Model: "claude-sonnet-4-5",
			MaxTokens: 64, ParamsHash: jsonl.ParamsHash(p), CachePrefix: 0xfeed, CacheTTL: time.Hour}
	}
	return out
}

// primes collects OnPrime calls.
type primes struct {
	mu   sync.Mutex
	list []Prime
}

func (p *primes) add(pr Prime) { p.mu.Lock(); p.list = append(p.list, pr); p.mu.Unlock() }

// runPriming runs reqs through a Runner with the world's test config,
// collecting the primers; every request must get its result.
func runPriming(t *testing.T, w *world, reqs []*call.Request) (*collector, *Runner, *primes) {
	t.Helper()
	var ps primes
	cfg := w.config()
	cfg.OnPrime = ps.add
	col, r, err := w.run(t, cfg, reqs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkAllOK(t, reqs, col)
	return col, r, &ps
}

// readShare is the share of rows that read the prompt cache, and of rows
// that wrote it.
func readShare(col *collector) (reads, writes int) {
	for _, res := range col.results {
		switch {
		case res.Usage.CacheReadInputTokens > 0:
			reads++
		case res.Usage.CacheCreationInputTokens > 0:
			writes++
		}
	}
	return reads, writes
}

// TestPrimedBatchesReadTheCache: chunks created together on cold orgs
// read nothing (each batch's rows run together), so the Runner writes each
// org's shared prefix with one sync primer (max_tokens 0, the 1 h
// breakpoint) right before that org's first chunk, and the batches then
// read it on most rows; a prefix is primed once per org, not per chunk.
func TestPrimedBatchesReadTheCache(t *testing.T) {
	for _, prime := range []bool{true, false} {
		t.Run(fmt.Sprintf("prime=%v", prime), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil)
				reqs := cachedRequests(60, nil)
				if !prime { // what a request without a known shared prefix gets
					for _, q := range reqs {
						q.CachePrefix = 0
					}
				}
				col, r, ps := runPriming(t, w, reqs)
				reads, writes := readShare(col)
				st := r.Stats()
				orgs := 0
				for _, n := range st.Turnaround {
					if n.Batches > 0 {
						orgs++
					}
				}
				if !prime {
					if reads != 0 || len(ps.list) != 0 || w.tap.messages != 0 {
						t.Fatalf("unprimed cold batches: %d reads, %d primers", reads, len(ps.list))
					}
					return
				}
				if len(ps.list) != orgs || st.Primed != int64(orgs) || w.tap.messages != orgs {
					t.Fatalf("%d primers (stats %d, on the wire %d) for %d orgs, want one each", len(ps.list), st.Primed, w.tap.messages, orgs)
				}
				for _, pr := range ps.list {
					// The seed batch (not primed) wrote the prefix first, so a
					// primer reads it, or writes it anew with the 1 h TTL.
					wrote := pr.Usage.CacheCreation != nil && pr.Usage.CacheCreation.Ephemeral1h >= 3000
					if !pr.OK || (!wrote && pr.Usage.CacheReadInputTokens < 3000) || pr.Usage.OutputTokens > 1 || pr.Model != "claude-sonnet-4-5" {
						t.Fatalf("primer %+v, want a 1 h write or a read of the prefix, and at most one output token", pr)
					}
				}
				if reads < 40 || reads+writes != len(reqs) {
					t.Fatalf("primed batches: %d reads and %d writes of %d rows; want most to read", reads, writes, len(reqs))
				}
			})
		})
	}
}

// TestPrimerFailureCreatesAnyway: a primer refused (a busy sync lane's
// 429) is counted and logged, and the batch is created all the same.
func TestPrimerFailureCreatesAnyway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.tap.messagesStatus = 429
		_, r, ps := runPriming(t, w, cachedRequests(20, nil))
		st := r.Stats()
		if st.PrimeFailed == 0 || st.Primed != 0 || len(ps.list) != int(st.PrimeFailed) || ps.list[0].OK {
			t.Fatalf("stats %+v, primes %+v", st, ps.list)
		}
		if st.Seeds != 1 || st.Created != 2+st.Seeds {
			t.Fatalf("%d batches created (%d seeds), want the seed and 2 chunks", st.Created, st.Seeds)
		}
	})
}

// TestThinkingIsNotPrimed: a primer with max_tokens 0 cannot carry a
// thinking budget, so a request with extended thinking is not primed.
func TestThinkingIsNotPrimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := cachedRequests(10, map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048})
		cfg := w.config()
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.results) != 10 || r.Stats().Primed != 0 || w.tap.messages != 0 {
			t.Fatalf("%d results, %d primed, %d primers on the wire", len(col.results), r.Stats().Primed, w.tap.messages)
		}
	})
}

func TestPrimerBody(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]any
		ok   bool
	}{
		{`{"model":"m","max_tokens":512,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":"q"}]}`,
			map[string]any{"model": "m", "max_tokens": 1.0, "system": []any{map[string]any{"type": "text", "text": "s", "cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}},
				"messages": []any{map[string]any{"role": "user", "content": "q"}}}, true},
		{`{"model":"m","max_tokens":9,"thinking":{"type":"disabled"},"messages":[]}`,
			map[string]any{"model": "m", "max_tokens": 1.0, "thinking": map[string]any{"type": "disabled"}, "messages": []any{}}, true},
		{`{"model":"m","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[]}`, nil, false},
		{`{"model":"m","max_tokens":4096,"thinking":{"type":"adaptive"},"messages":[]}`, nil, false},
	} {
		got, ok := primerBody([]byte(tc.in), 1)
		if ok != tc.ok {
			t.Fatalf("%s: ok %v", tc.in, ok)
		}
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("%s: primer %s is not JSON: %v", tc.in, got, err)
		}
		if a, b := fmt.Sprint(m), fmt.Sprint(tc.want); a != b {
			t.Fatalf("%s:\n got %s\nwant %s", tc.in, a, b)
		}
	}
}

// TestThinkingRequestDoesNotStopThePrefix: a request with extended
// thinking cannot prime, but the next request of the same prefix in the
// chunk does.
func TestThinkingRequestDoesNotStopThePrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := cachedRequests(30, nil)
		th := cachedRequests(1, map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048})[0]
		th.ID = "think"
		reqs[0] = th
		col, r, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.results) != 30 || r.Stats().Primed != 1 || w.tap.messages != 1 {
			t.Fatalf("%d results, %d primed, %d primers on the wire; want the prefix primed once", len(col.results), r.Stats().Primed, w.tap.messages)
		}
	})
}

// TestSlowPrimersRespectTheCutoff: priming a chunk takes at most
// primeTimeout, and a chunk whose priming ran past the create cutoff is
// re-routed to sync, not created.
func TestSlowPrimersRespectTheCutoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := cachedRequests(10, nil)
		for i, q := range reqs { // ten prefixes in one chunk
			q.CachePrefix = uint64(0x1000 + i)
		}
		w.tap.messagesDelay = 25 * time.Second
		cfg := w.config()
		start := time.Now()
		cfg.Deadline, cfg.Turnaround = start.Add(90*time.Second), 70*time.Second // cutoff at 20 s
		// Every prefix already batch-warm, never primed: the chunk itself
		// primes all ten (no seeds).
		warm := func(r *Runner) {
			for _, q := range reqs {
				for _, o := range r.orgs {
					o.seedOf(q.CachePrefix).warmUntil = start.Add(time.Hour)
				}
			}
		}
		col, r, err := w.runWith(t, newCollector(t), cfg, reqs, nil, nil, warm)
		if err != nil {
			t.Fatal(err)
		}
		st := r.Stats()
		if st.Created != 0 || len(col.reroutes) != 10 {
			t.Fatalf("%d batches created, %d re-routed; want none created, all re-routed once priming passed the cutoff", st.Created, len(col.reroutes))
		}
		if n := w.tap.messages; n != 2 {
			t.Fatalf("%d primers sent, want 2 (the second cut at %s)", n, primeTimeout)
		}
	})
}

// TestPrimerFallsBackToOneToken: an endpoint that refuses max_tokens 0
// gets the primer with max_tokens 1, and every later primer goes with 1
// at once.
func TestPrimerFallsBackToOneToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.tap.refuseZero = true
		reqs := cachedRequests(20, nil)
		for _, q := range reqs[10:] { // the second chunk has another prefix
			q.CachePrefix = 0xbeef
		}
		col, r, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := r.Stats()
		if len(col.results) != 20 || st.Primed != 2 || st.PrimeFailed != 0 || w.tap.messages != 3 {
			t.Fatalf("%d results, %d primed, %d failed, %d primers on the wire; want 2 primed over 3 calls (one refused)", len(col.results), st.Primed, st.PrimeFailed, w.tap.messages)
		}
	})
}
