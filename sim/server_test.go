package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// newTestServer builds a three-org server with mutate applied. Call it
// inside a synctest bubble so the server's clock is the bubble's.
func newTestServer(t *testing.T, mutate func(*Config)) *Server {
	t.Helper()
	cfg := Default()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// request sends one request through the handler (no network) with the
// given key and the default version.
func request(t *testing.T, s *Server, method, path, key string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		raw, _ = json.Marshal(b)
	}
	r := httptest.NewRequest(method, path, bytes.NewReader(raw))
	if key != "" {
		r.Header.Set("x-api-key", key)
	}
	r.Header.Set("anthropic-version", api.VersionDefault)
	r.Header.Set("content-type", "application/json")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	return rec
}

func msgBody(model string, maxTokens int, text string) map[string]any {
	return map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []map[string]any{{"role": "user", "content": text}}}
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, rec.Body.String(), err)
	}
	return v
}

// checkError asserts an exact error body: status, type, and a request_id
// equal to the request-id header.
func checkError(t *testing.T, rec *httptest.ResponseRecorder, status int, typ api.ErrorType) map[string]any {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d want %d; body %s", rec.Code, status, rec.Body)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("error body is not JSON: %q", rec.Body)
	}
	if len(raw) != 3 || raw["type"] != "error" {
		t.Fatalf("error body top level = %v, want exactly type, error, request_id", raw)
	}
	e, _ := raw["error"].(map[string]any)
	if e["type"] != string(typ) || e["message"] == "" {
		t.Fatalf("error = %v, want type %s and a message", e, typ)
	}
	if id := rec.Header().Get("request-id"); id == "" || raw["request_id"] != id {
		t.Fatalf("request_id %v does not match header %q", raw["request_id"], id)
	}
	return e
}

const sonnet = "claude-sonnet-4-5-20250929"

func TestAuthAndVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.Orgs[1].Keys = append(c.Orgs[1].Keys,
				KeyConfig{Label: "gone", Key: "sk-ant-fake-revoked", Status: KeyRevoked},
				KeyConfig{Label: "nope", Key: "sk-ant-fake-forbidden", Status: KeyForbidden})
		})
		body := msgBody(sonnet, 16, "hi")
		checkError(t, request(t, s, "POST", "/v1/messages", "", body), 401, api.ErrAuthentication)
		checkError(t, request(t, s, "POST", "/v1/messages", "sk-ant-fake-unknown", body), 401, api.ErrAuthentication)
		checkError(t, request(t, s, "POST", "/v1/messages", "sk-ant-fake-revoked", body), 401, api.ErrAuthentication)
		checkError(t, request(t, s, "POST", "/v1/messages", "sk-ant-fake-forbidden", body), 403, api.ErrPermission)

		// Bearer works, with either documented version.
		for _, v := range []string{api.Version20230601, api.Version20261021} {
			r := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`))
			r.Header.Set("Authorization", "Bearer "+FakeKeyLowPrio)
			r.Header.Set("anthropic-version", v)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code != 200 || rec.Header().Get("anthropic-organization-id") != s.cfg.Orgs[2].ID {
				t.Fatalf("bearer with version %s: %d %s", v, rec.Code, rec.Body)
			}
		}
		for _, v := range []string{"", "2024-01-01"} {
			r := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(`{}`))
			r.Header.Set("x-api-key", FakeKeyHighPrio)
			if v != "" {
				r.Header.Set("anthropic-version", v)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			checkError(t, rec, 400, api.ErrInvalidRequest)
		}
		// Revoking at run time.
		if err := s.SetKeyStatus("high_prio", KeyRevoked); err != nil {
			t.Fatal(err)
		}
		checkError(t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body), 401, api.ErrAuthentication)
		st := s.Stats()
		if k := st.Orgs["high_prio"].Keys["high_prio"]; k.Status != KeyRevoked || k.Denied != 1 {
			t.Fatalf("key stats = %+v", k)
		}
		if bytes.Contains(mustJSON(st), []byte(FakeKeyHighPrio)) {
			t.Fatal("stats must name keys by label, never by value")
		}
	})
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		k := FakeKeyHighPrio
		tests := []struct {
			name   string
			body   any
			status int
			typ    api.ErrorType
			msg    string
		}{
			{"not json", "{", 400, api.ErrInvalidRequest, "not valid JSON"},
			{"no model", map[string]any{"max_tokens": 1, "messages": []any{}}, 400, api.ErrInvalidRequest, "model"},
			{"unknown model", msgBody("claude-nope-9", 1, "x"), 404, api.ErrNotFound, "claude-nope-9"},
			{"no max_tokens", map[string]any{"model": sonnet, "messages": []map[string]any{{"role": "user", "content": "x"}}}, 400, api.ErrInvalidRequest, "max_tokens"},
			{"max_tokens too big", msgBody(sonnet, 1_000_000, "x"), 400, api.ErrInvalidRequest, "maximum allowed"},
			{"no messages", map[string]any{"model": sonnet, "max_tokens": 1, "messages": []any{}}, 400, api.ErrInvalidRequest, "at least one message"},
			{"system role", map[string]any{"model": sonnet, "max_tokens": 1, "messages": []map[string]any{{"role": "system", "content": "be nice"}, {"role": "user", "content": "x"}}}, 400, api.ErrInvalidRequest, "top-level \"system\""},
			{"temperature", map[string]any{"model": sonnet, "max_tokens": 1, "temperature": 2, "messages": []map[string]any{{"role": "user", "content": "x"}}}, 400, api.ErrInvalidRequest, "temperature"},
		}
		for _, tt := range tests {
			e := checkError(t, request(t, s, "POST", "/v1/messages", k, tt.body), tt.status, tt.typ)
			if !strings.Contains(e["message"].(string), tt.msg) {
				t.Errorf("%s: message %q does not mention %q", tt.name, e["message"], tt.msg)
			}
		}
		big := make([]byte, api.MaxMessagesBytes+1)
		checkError(t, request(t, s, "POST", "/v1/messages", k, big), 413, api.ErrRequestTooLarge)
		checkError(t, request(t, s, "GET", "/v1/nowhere", k, nil), 404, api.ErrNotFound)
	})
}

func TestMessageDeterministicAndHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		body := mustJSON(msgBody(sonnet, 1000, "Judge this answer."))
		r1 := request(t, s, "POST", "/v1/messages", FakeKeyBatch, body)
		r2 := request(t, s, "POST", "/v1/messages", FakeKeyLowPrio, body)
		if r1.Code != 200 || r2.Code != 200 {
			t.Fatalf("status %d %d", r1.Code, r2.Code)
		}
		m1, m2 := decode[api.Message](t, r1), decode[api.Message](t, r2)
		if m1.Content[0].Text != m2.Content[0].Text || m1.Usage.OutputTokens != m2.Usage.OutputTokens {
			t.Fatal("the same body must get the same answer from any org")
		}
		if !strings.HasPrefix(m1.Content[0].Text, AnswerTag(body)+" ") {
			t.Fatalf("answer %q does not start with its request's tag %s", m1.Content[0].Text[:30], AnswerTag(body))
		}
		other := request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 1000, "Judge that answer."))
		if decode[api.Message](t, other).Content[0].Text == m1.Content[0].Text {
			t.Fatal("different bodies got the same answer")
		}
		out := s.cfg.Output
		if n := m1.Usage.OutputTokens; n < int64(out.Min) || n > int64(out.Max) || m1.StopReason != api.StopEndTurn {
			t.Fatalf("output %d tokens (%s), want in [%d,%d] end_turn", n, m1.StopReason, out.Min, out.Max)
		}
		if got := int64(len(strings.Fields(m1.Content[0].Text))); got != m1.Usage.OutputTokens {
			t.Fatalf("text has %d words, usage says %d output tokens", got, m1.Usage.OutputTokens)
		}
		if m1.Usage.InputTokens != 7+4+3*1+1 { // request + message + "Judge"(2) "this"(1) "answer."(2)
			t.Logf("input tokens %d", m1.Usage.InputTokens)
		}
		for _, h := range []string{"request-id", "anthropic-organization-id"} {
			if r1.Header().Get(h) == "" {
				t.Errorf("missing %s", h)
			}
		}
		rl := api.ParseRateLimitHeaders(r1.Header())
		for _, l := range api.Limiters {
			if !rl.Get(l).Present {
				t.Errorf("missing %s rate-limit headers", l)
			}
		}
		if rl.Requests.Limit != 90_000 || rl.OutputTokens.Limit != 800_000 {
			t.Errorf("batch org limits in headers = %+v", rl)
		}
		// max_tokens caps the answer.
		capped := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 5, "Judge this answer.")))
		if capped.Usage.OutputTokens != 5 || capped.StopReason != api.StopMaxTokens {
			t.Fatalf("capped answer: %d tokens, %s", capped.Usage.OutputTokens, capped.StopReason)
		}
		if st := s.Stats().Bodies; st.DistinctAnswered != 3 || st.AnsweredMoreThanOnce != 1 || st.ExtraAnswers != 1 {
			t.Fatalf("body stats = %+v, want 3 distinct, 1 answered twice", st)
		}
	})
}

// TestLatencyAndTimeScale checks the latency model exactly (no jitter) and
// that time_scale K divides it by K and multiplies the limits by K.
func TestLatencyAndTimeScale(t *testing.T) {
	for _, k := range []float64{1, 10} {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, func(c *Config) {
				c.TimeScale = k
				c.Latency["default"] = LatencyModel{TTFT: Duration(time.Second), TokensPerSec: 50, Sigma: 0}
				c.Latency[string(api.PoolSonnet4)] = c.Latency["default"]
			})
			start := time.Now()
			rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 50, "Hello there"))
			took := time.Since(start)
			m := decode[api.Message](t, rec)
			want := time.Duration((1 + float64(m.Usage.OutputTokens)/50) / k * float64(time.Second))
			if took != want {
				t.Errorf("K=%g: %d tokens took %v, want %v", k, m.Usage.OutputTokens, took, want)
			}
			if got := rec.Header().Get("anthropic-ratelimit-requests-limit"); got != fmt.Sprint(int64(30_000*k)) {
				t.Errorf("K=%g: requests-limit %s", k, got)
			}
		})
	}
}

func TestRateLimit429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) { c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 2, ITPM: 1e6, OTPM: 1e6} })
		body := msgBody(sonnet, 16, "x")
		for range 2 {
			if rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body); rec.Code != 200 {
				t.Fatalf("status %d", rec.Code)
			}
		}
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body)
		e := checkError(t, rec, 429, api.ErrRateLimit)
		if !strings.Contains(e["message"].(string), "2 requests per minute") {
			t.Errorf("message %q", e["message"])
		}
		// One request refills in 30 s at 2/min, less the time the first two
		// answers took.
		ra, ok := api.ParseRetryAfter(rec.Header(), time.Now())
		if !ok || ra < 25*time.Second || ra > 30*time.Second {
			t.Errorf("retry-after = %q, want about 30 s", rec.Header().Get("retry-after"))
		}
		if rec.Header().Get("anthropic-ratelimit-requests-remaining") != "0" {
			t.Errorf("429 must carry the rate-limit headers; remaining = %q", rec.Header().Get("anthropic-ratelimit-requests-remaining"))
		}
		// Another pool and another org are independent budgets.
		if rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody("claude-haiku-4-5", 16, "x")); rec.Code != 200 {
			t.Fatalf("haiku pool: %d", rec.Code)
		}
		if rec := request(t, s, "POST", "/v1/messages", FakeKeyBatch, body); rec.Code != 200 {
			t.Fatalf("other org: %d", rec.Code)
		}
		time.Sleep(ra)
		if rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body); rec.Code != 200 {
			t.Fatalf("after retry-after: %d", rec.Code)
		}
		st := s.Stats().Orgs["high_prio"].Pools[api.PoolSonnet4]
		if st.Admitted != 3 || st.RateLimited != 1 || st.LimitedBy[limitedRequests] != 1 || st.PeakConcurrency != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestSpendCapOverloadAndFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.Orgs[0].SpendCapReached = true
			c.Orgs[1].Capacity = 1
		})
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, "x"))
		e := checkError(t, rec, 429, api.ErrRateLimit)
		if d, _ := e["details"].(map[string]any); d["error_code"] != api.SpendLimitErrorCode {
			t.Fatalf("spend-cap details = %v", e["details"])
		}
		if rec.Header().Get("retry-after") != "" {
			t.Fatal("the spend-cap 429 must not carry retry-after")
		}
		// Capacity 1: while one call is in flight a second is overloaded.
		done := make(chan int)
		go func() { done <- request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 64, "slow")).Code }()
		synctest.Wait()
		checkError(t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 8, "x")), 529, api.ErrOverloaded)
		if code := <-done; code != 200 {
			t.Fatalf("first call %d", code)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) { c.Faults.P500 = 1 })
		checkError(t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 8, "x")), 500, api.ErrAPI)
		s = newTestServer(t, func(c *Config) { c.Faults.P529 = 1 })
		checkError(t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 8, "x")), 529, api.ErrOverloaded)
		if st := s.Stats().Orgs["batch"].Pools[api.PoolSonnet4]; st.Overloaded != 1 || st.Admitted != 0 {
			t.Fatalf("an injected 529 is not admitted: %+v", st)
		}
	})
}

func TestPromptCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		rubric := strings.Repeat("word ", 2000) // 2,000 tokens > Sonnet's 1,024 minimum
		body := func(q string) map[string]any {
			return map[string]any{"model": sonnet, "max_tokens": 16,
				"system":   []map[string]any{{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral"}}},
				"messages": []map[string]any{{"role": "user", "content": q}}}
		}
		first := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body("q1")))
		second := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body("q2")))
		if first.Usage.CacheCreationInputTokens < 2000 || first.Usage.CacheReadInputTokens != 0 || first.Usage.CacheCreation.Ephemeral5m != first.Usage.CacheCreationInputTokens {
			t.Fatalf("first call should write the cache: %+v", first.Usage)
		}
		if second.Usage.CacheReadInputTokens != first.Usage.CacheCreationInputTokens || second.Usage.CacheCreationInputTokens != 0 {
			t.Fatalf("second call should read it: %+v", second.Usage)
		}
		// Another org has its own cache.
		other := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, body("q2")))
		if other.Usage.CacheReadInputTokens != 0 {
			t.Fatal("caches must not be shared across orgs")
		}
		// Cache reads do not count toward ITPM.
		st := s.Stats().Orgs["high_prio"].Pools[api.PoolSonnet4]
		if st.CacheReadTokens != second.Usage.CacheReadInputTokens {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(6 * time.Minute) // past the 5-minute TTL
		again := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body("q3")))
		if again.Usage.CacheReadInputTokens != 0 {
			t.Fatal("cache entry should have expired")
		}
	})
}

// TestPromptCacheVisibleOnlyAfterTheWriterBegins: as documented, an entry
// is available only once its writer's answer has begun — requests sent
// together before then all miss and all pay the write; a request after the
// writer's time to first token reads it; a rate-limited request neither
// writes nor refreshes an entry.
func TestPromptCacheVisibleOnlyAfterTheWriterBegins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		rubric := strings.Repeat("word ", 2000)
		body := func(q string) map[string]any {
			return map[string]any{"model": sonnet, "max_tokens": 16,
				"system":   []map[string]any{{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral"}}},
				"messages": []map[string]any{{"role": "user", "content": q}}}
		}
		const burst = 5
		usages := make([]api.Usage, burst)
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				usages[i] = decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body(fmt.Sprint("q", i)))).Usage
			})
		}
		wg.Wait()
		for i, u := range usages {
			if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens < 2000 {
				t.Errorf("request %d of a simultaneous burst: %+v, want a miss that writes", i, u)
			}
		}
		// The burst's answers have ended, past the first writer's TTFT.
		after := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body("later"))).Usage
		if after.CacheReadInputTokens < 2000 || after.CacheCreationInputTokens != 0 {
			t.Errorf("after the writers answered: %+v, want a read", after)
		}
	})
}

// TestPromptCacheRateLimitedWritesNothing: a request the rate limits
// refuse is not processed, so it neither writes nor refreshes an entry:
// the next admitted request of the prefix writes it.
func TestPromptCacheRateLimitedWritesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.BucketsStartEmpty = true
			for i := range c.Orgs {
				c.Orgs[i].Limits = maps.Clone(c.Orgs[i].Limits)
				l := c.Orgs[i].Limits[api.PoolSonnet4]
				l.RPM = 60 // one a second, from empty
				c.Orgs[i].Limits[api.PoolSonnet4] = l
			}
		})
		rubric := strings.Repeat("word ", 2000)
		body := map[string]any{"model": sonnet, "max_tokens": 16,
			"system":   []map[string]any{{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral"}}},
			"messages": []map[string]any{{"role": "user", "content": "q"}}}
		if rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body); rec.Code != 429 {
			t.Fatalf("first request on an empty bucket: HTTP %d, want 429", rec.Code)
		}
		time.Sleep(2 * time.Second)
		u := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body)).Usage
		if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens < 2000 {
			t.Errorf("after a 429: %+v, want a write (the refused request wrote nothing)", u)
		}
	})
}

func TestStreamEventSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		b := msgBody(sonnet, 200, "stream please")
		plain := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, b))
		b["stream"] = true
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, b)
		if rec.Code != 200 || rec.Header().Get("content-type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", rec.Code, rec.Header().Get("content-type"))
		}
		var names []string
		var text strings.Builder
		var final map[string]any
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			line := sc.Text()
			if ev, ok := strings.CutPrefix(line, "event: "); ok {
				if len(names) == 0 || names[len(names)-1] != ev {
					names = append(names, ev)
				}
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var ev map[string]any
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					t.Fatalf("bad data line %q", data)
				}
				if d, ok := ev["delta"].(map[string]any); ok && d["type"] == "text_delta" {
					text.WriteString(d["text"].(string))
				}
				if ev["type"] == "message_delta" {
					final = ev
				}
			}
		}
		want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Fatalf("events %v want %v", names, want)
		}
		u := final["usage"].(map[string]any)
		if int64(u["output_tokens"].(float64)) != int64(len(strings.Fields(text.String()))) || u["input_tokens"].(float64) != float64(plain.Usage.InputTokens) {
			t.Fatalf("message_delta usage %v vs text of %d words", u, len(strings.Fields(text.String())))
		}
	})
}

func TestCountTokensAndModels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, nil)
		b := msgBody(sonnet, 16, "How many tokens is this sentence, exactly?")
		m := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, b))
		delete(b, "max_tokens")
		n := decode[api.TokenCount](t, request(t, s, "POST", "/v1/messages/count_tokens", FakeKeyHighPrio, b))
		if n.InputTokens != m.Usage.InputTokens {
			t.Fatalf("count_tokens %d, messages usage %d", n.InputTokens, m.Usage.InputTokens)
		}
		page := decode[api.Page[api.ModelObject]](t, request(t, s, "GET", "/v1/models?limit=2", FakeKeyHighPrio, nil))
		if len(page.Data) != 2 || !page.HasMore || *page.FirstID != page.Data[0].ID || *page.LastID != page.Data[1].ID {
			t.Fatalf("models page = %+v", page)
		}
		next := decode[api.Page[api.ModelObject]](t, request(t, s, "GET", "/v1/models?limit=2&after_id="+*page.LastID, FakeKeyHighPrio, nil))
		if len(next.Data) != 2 || next.Data[0].ID == page.Data[1].ID {
			t.Fatalf("next page = %+v", next)
		}
		if one := request(t, s, "GET", "/v1/models/claude-sonnet-4-5", FakeKeyHighPrio, nil); one.Code != 200 {
			t.Fatalf("model by alias: %d", one.Code)
		}
		checkError(t, request(t, s, "GET", "/v1/models/claude-x", FakeKeyHighPrio, nil), 404, api.ErrNotFound)
	})
}
