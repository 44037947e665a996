package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// batchOf returns a create body of n requests item-0 … item-(n-1).
func batchOf(n int) (api.BatchCreate, [][]byte) {
	var c api.BatchCreate
	var params [][]byte
	for i := range n {
		p := mustJSON(msgBody("claude-haiku-4-5", 64, fmt.Sprintf("item %d", i)))
		params = append(params, p)
		c.Requests = append(c.Requests, api.BatchRequest{CustomID: fmt.Sprintf("item-%d", i), Params: p})
	}
	return c, params
}

func createBatch(t *testing.T, s *Server, key string, body any) api.MessageBatch {
	t.Helper()
	rec := request(t, s, "POST", "/v1/messages/batches", key, body)
	if rec.Code != 200 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	return decode[api.MessageBatch](t, rec)
}

func getBatch(t *testing.T, s *Server, key, id string) api.MessageBatch {
	t.Helper()
	rec := request(t, s, "GET", "/v1/messages/batches/"+id, key, nil)
	if rec.Code != 200 {
		t.Fatalf("retrieve %s: %d %s", id, rec.Code, rec.Body)
	}
	return decode[api.MessageBatch](t, rec)
}

func results(t *testing.T, s *Server, key, id string) []api.BatchResultLine {
	t.Helper()
	rec := request(t, s, "GET", "/v1/messages/batches/"+id+"/results", key, nil)
	if rec.Code != 200 {
		t.Fatalf("results %s: %d %s", id, rec.Code, rec.Body)
	}
	var out []api.BatchResultLine
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		var l api.BatchResultLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad result line %q", sc.Text())
		}
		out = append(out, l)
	}
	return out
}

// TestBatchLifecycle follows one batch through the preset's model:
// 404 for 2 s after create, start at 60 s + 0.3 s × 10, 10 requests at 5/s,
// ended at exactly 65 s with every row succeeded.
func TestBatchLifecycle(t *testing.T) {
	for _, k := range []float64{1, 10} {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, func(c *Config) { c.TimeScale = k })
			scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) / k) }
			t0 := time.Now()
			body, params := batchOf(10)
			b := createBatch(t, s, FakeKeyBatch, body)
			if b.ProcessingStatus != api.BatchInProgress || b.RequestCounts.Processing != 10 || !strings.HasPrefix(b.ID, "msgbatch_") {
				t.Fatalf("created = %+v", b)
			}
			if b.ExpiresAt.Sub(b.CreatedAt) != scaled(24*time.Hour) || b.ResultsURL != nil || b.EndedAt != nil {
				t.Fatalf("created = %+v", b)
			}
			checkError(t, request(t, s, "GET", "/v1/messages/batches/"+b.ID, FakeKeyBatch, nil), 404, api.ErrNotFound)
			time.Sleep(scaled(2 * time.Second))
			checkError(t, request(t, s, "GET", "/v1/messages/batches/"+b.ID, FakeKeyHighPrio, nil), 404, api.ErrNotFound) // another org
			checkError(t, request(t, s, "DELETE", "/v1/messages/batches/"+b.ID, FakeKeyBatch, nil), 400, api.ErrInvalidRequest)
			checkError(t, request(t, s, "GET", "/v1/messages/batches/"+b.ID+"/results", FakeKeyBatch, nil), 400, api.ErrInvalidRequest)

			time.Sleep(time.Until(t0.Add(scaled(65*time.Second) - time.Millisecond)))
			if got := getBatch(t, s, FakeKeyBatch, b.ID); got.ProcessingStatus != api.BatchInProgress || got.RequestCounts.Processing != 10 {
				t.Fatalf("just before the end: %+v (counts stay processing until the batch ends)", got)
			}
			time.Sleep(time.Millisecond)
			got := getBatch(t, s, FakeKeyBatch, b.ID)
			if got.ProcessingStatus != api.BatchEnded || got.RequestCounts != (api.RequestCounts{Succeeded: 10}) {
				t.Fatalf("at 65 s: %+v", got)
			}
			if got.EndedAt.Sub(got.CreatedAt) != scaled(65*time.Second) || got.ResultsURL == nil || !strings.HasSuffix(*got.ResultsURL, "/v1/messages/batches/"+b.ID+"/results") {
				t.Fatalf("ended = %+v", got)
			}
			rows := results(t, s, FakeKeyBatch, b.ID)
			if len(rows) != 10 {
				t.Fatalf("%d result rows", len(rows))
			}
			for i, r := range rows {
				if r.CustomID != fmt.Sprintf("item-%d", i) || r.Result.Type != api.ResultSucceeded {
					t.Fatalf("row %d = %+v", i, r)
				}
				m := r.Result.Message
				if !strings.HasPrefix(m.Content[0].Text, AnswerTag(params[i])) || m.Usage.ServiceTier != api.TierBatch {
					t.Fatalf("row %d answer %q tier %s", i, m.Content[0].Text, m.Usage.ServiceTier)
				}
			}
			st := s.Stats().Orgs["batch"].Batches
			if st.Created != 1 || st.Succeeded != 10 || st.Queued != 0 || st.OutputTokens == 0 {
				t.Fatalf("stats %+v", st)
			}
			if del := request(t, s, "DELETE", "/v1/messages/batches/"+b.ID, FakeKeyBatch, nil); del.Code != 200 || decode[api.DeletedBatch](t, del).Type != "message_batch_deleted" {
				t.Fatalf("delete: %d %s", del.Code, del.Body)
			}
			checkError(t, request(t, s, "GET", "/v1/messages/batches/"+b.ID, FakeKeyBatch, nil), 404, api.ErrNotFound)
		})
	}
}

// TestBatchFIFO: two batches created together share the org's rate, oldest
// first.
func TestBatchFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		a, _ := batchOf(10)
		b, _ := batchOf(10)
		ba := createBatch(t, s, FakeKeyBatch, a)
		bb := createBatch(t, s, FakeKeyBatch, b)
		time.Sleep(2 * time.Minute)
		ga, gb := getBatch(t, s, FakeKeyBatch, ba.ID), getBatch(t, s, FakeKeyBatch, bb.ID)
		if ga.EndedAt.Sub(ga.CreatedAt) != 65*time.Second || gb.EndedAt.Sub(gb.CreatedAt) != 67*time.Second {
			t.Fatalf("ended after %v and %v, want 65 s and 67 s", ga.EndedAt.Sub(ga.CreatedAt), gb.EndedAt.Sub(gb.CreatedAt))
		}
	})
}

// TestBatchCancel: a cancel at 95 s of a 100-request batch that started at
// 90 s; it keeps processing for the 10 s cancel delay, then the rest is
// canceled.
func TestBatchCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		body, _ := batchOf(100)
		b := createBatch(t, s, FakeKeyBatch, body)
		time.Sleep(95 * time.Second)
		rec := request(t, s, "POST", "/v1/messages/batches/"+b.ID+"/cancel", FakeKeyBatch, nil)
		c := decode[api.MessageBatch](t, rec)
		if rec.Code != 200 || c.ProcessingStatus != api.BatchCanceling || c.CancelInitiatedAt == nil {
			t.Fatalf("cancel: %d %+v", rec.Code, c)
		}
		time.Sleep(10 * time.Second)
		got := getBatch(t, s, FakeKeyBatch, b.ID)
		if got.ProcessingStatus != api.BatchEnded || got.RequestCounts != (api.RequestCounts{Succeeded: 75, Canceled: 25}) {
			t.Fatalf("after cancel delay: %+v", got)
		}
		rows := results(t, s, FakeKeyBatch, b.ID)
		if rows[74].Result.Type != api.ResultSucceeded || rows[75].Result.Type != api.ResultCanceled || rows[75].Result.Message != nil {
			t.Fatalf("rows 74/75 = %+v / %+v", rows[74].Result, rows[75].Result)
		}
		// Cancelling an ended batch returns it unchanged.
		if again := request(t, s, "POST", "/v1/messages/batches/"+b.ID+"/cancel", FakeKeyBatch, nil); again.Code != 200 || decode[api.MessageBatch](t, again).ProcessingStatus != api.BatchEnded {
			t.Fatalf("cancel after end: %d %s", again.Code, again.Body)
		}
	})
}

// TestBatchStarvationAndExpiry: with the starvation rule a large batch
// never starts before its 24 h expiry; every row expires.
func TestBatchStarvationAndExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.Batch.StarveAbove, c.Batch.StarveFor = 5, Duration(30*time.Hour)
		})
		big, _ := batchOf(6)
		small, _ := batchOf(5)
		bb := createBatch(t, s, FakeKeyBatch, big)
		bs := createBatch(t, s, FakeKeyBatch, small)
		time.Sleep(time.Hour)
		if got := getBatch(t, s, FakeKeyBatch, bs.ID); got.ProcessingStatus != api.BatchEnded {
			t.Fatalf("the small batch should have ended: %+v", got)
		}
		if got := getBatch(t, s, FakeKeyBatch, bb.ID); got.ProcessingStatus != api.BatchInProgress {
			t.Fatalf("the large batch should still starve: %+v", got)
		}
		time.Sleep(23 * time.Hour)
		got := getBatch(t, s, FakeKeyBatch, bb.ID)
		if got.RequestCounts != (api.RequestCounts{Expired: 6}) || !got.EndedAt.Equal(got.ExpiresAt) {
			t.Fatalf("after 24 h: %+v", got)
		}
		for _, r := range results(t, s, FakeKeyBatch, bb.ID) {
			if r.Result.Type != api.ResultExpired {
				t.Fatalf("row %+v", r)
			}
		}
	})
}

func TestBatchValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) { c.Orgs[1].BatchQueueCap = 15 })
		k := FakeKeyBatch
		bad := func(mutate func(*api.BatchCreate), want string) {
			t.Helper()
			body, _ := batchOf(3)
			mutate(&body)
			e := checkError(t, request(t, s, "POST", "/v1/messages/batches", k, body), 400, api.ErrInvalidRequest)
			if !strings.Contains(e["message"].(string), want) {
				t.Errorf("message %q does not mention %q", e["message"], want)
			}
		}
		bad(func(b *api.BatchCreate) { b.Requests[1].CustomID = "has space" }, "requests.1.custom_id")
		bad(func(b *api.BatchCreate) { b.Requests[1].CustomID = strings.Repeat("x", 65) }, "requests.1.custom_id")
		bad(func(b *api.BatchCreate) { b.Requests[2].CustomID = "item-0" }, "unique")
		bad(func(b *api.BatchCreate) { b.Requests = nil }, "at least 1")

		// Invalid params are accepted, then errored once the batch ends.
		body, _ := batchOf(2)
		body.Requests[1].Params = mustJSON(map[string]any{"model": "claude-haiku-4-5", "max_tokens": 8, "stream": true,
			"messages": []map[string]any{{"role": "user", "content": "x"}}})
		b := createBatch(t, s, k, body)
		// Queue cap 15: 2 queued, 14 more do not fit.
		more, _ := batchOf(14)
		rec := request(t, s, "POST", "/v1/messages/batches", k, more)
		checkError(t, rec, 429, api.ErrRateLimit)
		if rec.Header().Get("retry-after") == "" {
			t.Fatal("a queue-full 429 should say when to retry")
		}
		time.Sleep(2 * time.Minute)
		rows := results(t, s, k, b.ID)
		if rows[0].Result.Type != api.ResultSucceeded || rows[1].Result.Type != api.ResultErrored ||
			rows[1].Result.Error.Err.Type != api.ErrInvalidRequest || !strings.Contains(rows[1].Result.Error.Err.Message, "stream") {
			t.Fatalf("rows = %+v / %+v", rows[0].Result, rows[1].Result.Error)
		}
		if got := getBatch(t, s, k, b.ID).RequestCounts; got != (api.RequestCounts{Succeeded: 1, Errored: 1}) {
			t.Fatalf("counts %+v", got)
		}
		// Once the queue drained, the larger batch fits.
		createBatch(t, s, k, more)
		if st := s.Stats().Orgs["batch"].Batches; st.QueueFull != 1 || st.Created != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestBatchList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		var ids []string
		for range 3 {
			body, _ := batchOf(1)
			ids = append(ids, createBatch(t, s, FakeKeyLowPrio, body).ID)
		}
		time.Sleep(3 * time.Second)
		page := decode[api.Page[api.MessageBatch]](t, request(t, s, "GET", "/v1/messages/batches?limit=2", FakeKeyLowPrio, nil))
		if len(page.Data) != 2 || !page.HasMore || page.Data[0].ID != ids[2] || page.Data[1].ID != ids[1] {
			t.Fatalf("first page (newest first) = %+v", page)
		}
		rest := decode[api.Page[api.MessageBatch]](t, request(t, s, "GET", "/v1/messages/batches?limit=2&after_id="+*page.LastID, FakeKeyLowPrio, nil))
		if len(rest.Data) != 1 || rest.HasMore || rest.Data[0].ID != ids[0] {
			t.Fatalf("second page = %+v", rest)
		}
		if other := decode[api.Page[api.MessageBatch]](t, request(t, s, "GET", "/v1/messages/batches", FakeKeyHighPrio, nil)); len(other.Data) != 0 {
			t.Fatal("another org must not see these batches")
		}
	})
}

// TestCreateLost: with pcreate_lost every create makes its batch and loses
// its answer — a dropped connection or a 500 — and the batch is listed.
func TestCreateLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) { c.Faults.PCreateLost = 1; c.TimeScale = 1000 })
		c := serveOnPipe(t, s)
		body, _ := batchOf(3)
		raw, _ := json.Marshal(body)
		drops, errs := 0, 0
		const n = 20
		for range n {
			req, _ := http.NewRequest("POST", "http://sim/v1/messages/batches", bytes.NewReader(raw))
			req.Header.Set(api.HeaderAPIKey, FakeKeyBatch)
			req.Header.Set("anthropic-version", api.VersionDefault)
			resp, err := c.Do(req)
			if err != nil {
				drops++
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != 500 {
				t.Fatalf("create answered %d, want 500 or a dropped connection", resp.StatusCode)
			}
			errs++
		}
		if drops == 0 || errs == 0 {
			t.Errorf("%d drops, %d 500s: want both kinds", drops, errs)
		}
		bs := s.Stats().Orgs["batch"].Batches
		if bs.Created != n || bs.CreateLost != n {
			t.Errorf("created %d, lost %d; want %d of each", bs.Created, bs.CreateLost, n)
		}
		time.Sleep(10 * time.Millisecond) // past the read-after-write window (scaled; fake time)
		page := decode[api.Page[api.MessageBatch]](t, request(t, s, "GET", "/v1/messages/batches?limit=100", FakeKeyBatch, nil))
		if len(page.Data) != n {
			t.Errorf("%d batches listed, want %d (each create happened)", len(page.Data), n)
		}
	})
}

// TestBatchPromptCache: in Message Batches hits are best effort. A cold
// batch reads nothing (its rows run together, none sees another's write);
// a batch that begins once the prefix is warm — written by an earlier
// batch or primed by one sync request — reads it on about CacheHit of its
// rows and writes it on the rest; the usage of each row says which, with
// the write in the TTL's bucket; CacheHit 0 never reads.
func TestBatchPromptCache(t *testing.T) {
	rubric := strings.Repeat("word ", 2000) // above Sonnet's minimum
	params := func(q string) map[string]any {
		return map[string]any{"model": sonnet, "max_tokens": 16,
			"system":   []map[string]any{{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}},
			"messages": []map[string]any{{"role": "user", "content": q}}}
	}
	batchOfPrefix := func(tag string, n int) api.BatchCreate {
		var c api.BatchCreate
		for i := range n {
			c.Requests = append(c.Requests, api.BatchRequest{CustomID: fmt.Sprintf("%s-%d", tag, i), Params: mustJSON(params(fmt.Sprintf("%s question %d", tag, i)))})
		}
		return c
	}
	// run creates a batch, waits for its end and returns its rows' reads
	// and writes.
	run := func(t *testing.T, s *Server, tag string, n int) (reads, writes int, prefix int64) {
		t.Helper()
		b := createBatch(t, s, FakeKeyBatch, batchOfPrefix(tag, n))
		time.Sleep(5 * time.Second) // past the read-after-write window
		for getBatch(t, s, FakeKeyBatch, b.ID).ProcessingStatus != api.BatchEnded {
			time.Sleep(5 * time.Second)
		}
		for _, l := range results(t, s, FakeKeyBatch, b.ID) {
			u := l.Result.Message.Usage
			switch {
			case u.CacheReadInputTokens > 0 && u.CacheCreationInputTokens == 0:
				reads++
				prefix = u.CacheReadInputTokens
			case u.CacheCreationInputTokens > 0 && u.CacheReadInputTokens == 0 && u.CacheCreation.Ephemeral1h == u.CacheCreationInputTokens:
				writes++
			default:
				t.Fatalf("row %s: %+v, want a read or a 1 h write", l.CustomID, u)
			}
		}
		return reads, writes, prefix
	}
	t.Run("cold, then warm", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, nil)
			if r, w, _ := run(t, s, "cold", 20); r != 0 || w != 20 {
				t.Fatalf("a cold batch: %d reads, %d writes; want 0 and 20", r, w)
			}
			r, w, prefix := run(t, s, "warm", 200)
			if r+w != 200 || r < 140 || r > 190 {
				t.Fatalf("a batch after a batch wrote the prefix: %d reads, %d writes; want about 80 %% reads", r, w)
			}
			st := s.Stats().Orgs["batch"].Batches
			if st.CacheReadTokens != int64(r)*prefix || st.CacheWriteTokens != int64(20+w)*prefix {
				t.Fatalf("counters %+v, want %d read and %d written tokens", st, int64(r)*prefix, int64(20+w)*prefix)
			}
		})
	})
	t.Run("primed by one sync request", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, nil)
			primer := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, params("primer"))).Usage
			if primer.CacheCreation.Ephemeral1h < 2000 {
				t.Fatalf("primer %+v, want a 1 h write", primer)
			}
			if r, w, _ := run(t, s, "primed", 100); r < 65 || r > 95 || r+w != 100 {
				t.Fatalf("a primed batch: %d reads, %d writes; want about 80 reads", r, w)
			}
		})
	})
	t.Run("expired", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, nil)
			request(t, s, "POST", "/v1/messages", FakeKeyBatch, params("primer"))
			time.Sleep(61 * time.Minute) // past the 1 h TTL before the batch begins
			if r, _, _ := run(t, s, "late", 20); r != 0 {
				t.Fatalf("%d reads of an expired entry", r)
			}
		})
	})
	t.Run("a later batch's end keeps the entry batch-warm", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Two batches begin together after a seed batch warmed the
			// prefix; the first to end must not make the other's begin
			// look earlier than the prefix's warming.
			s := newTestServer(t, func(c *Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0 })
			run(t, s, "seed", 1)
			a := createBatch(t, s, FakeKeyBatch, batchOfPrefix("a", 10))
			b := createBatch(t, s, FakeKeyBatch, batchOfPrefix("b", 10))
			time.Sleep(5 * time.Minute) // both processed in one stretch: they begin together
			for _, id := range []string{a.ID, b.ID} {
				for getBatch(t, s, FakeKeyBatch, id).ProcessingStatus != api.BatchEnded {
					time.Sleep(5 * time.Second)
				}
				for _, l := range results(t, s, FakeKeyBatch, id) {
					if u := l.Result.Message.Usage; u.CacheReadInputTokens == 0 {
						t.Fatalf("row %s of a batch begun after the seed ended: %+v, want a read", l.CustomID, u)
					}
				}
			}
		})
	})
	t.Run("cache_hit 0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, func(c *Config) { c.Batch.CacheHit = 0 })
			run(t, s, "warming", 20)
			if r, w, _ := run(t, s, "never", 20); r != 0 || w != 20 {
				t.Fatalf("cache_hit 0: %d reads, %d writes", r, w)
			}
		})
	})
	t.Run("prime_hit apart from cache_hit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// As users measured: a batch after a sync pre-warm reads
			// little, one after a warm batch reads all.
			s := newTestServer(t, func(c *Config) { c.Batch.CacheHit, c.Batch.PrimeHit = 1, 0.16 })
			request(t, s, "POST", "/v1/messages", FakeKeyBatch, params("primer"))
			if r, _, _ := run(t, s, "primed", 200); r < 16 || r > 50 {
				t.Fatalf("prime_hit 0.16: %d of 200 read", r)
			}
			if r, _, _ := run(t, s, "after", 50); r != 50 {
				t.Fatalf("cache_hit 1 after a warm batch: %d of 50 read", r)
			}
		})
	})
}
