package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// instant makes every answer take no time, so a test's own pace alone sets
// when its requests reach the lanes.
func instant(c *Config) {
	for name := range c.Latency {
		c.Latency[name] = LatencyModel{TokensPerSec: 1e12}
	}
}

// rateLimitHeaders lists the anthropic-ratelimit-* headers of h, sorted.
func rateLimitHeaders(h http.Header) []string {
	var names []string
	for k := range h {
		if k := strings.ToLower(k); strings.HasPrefix(k, "anthropic-ratelimit-") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// TestOmitHeaders: with omit_headers [input-tokens, tokens] every kind of
// Messages answer (200, stream, 429 rate limit, 429 spend cap, 500, 529)
// carries exactly the requests-* and output-tokens-* headers, and the
// unreported ITPM limit is still enforced.
func TestOmitHeaders(t *testing.T) {
	var want []string
	for _, l := range []api.Limiter{api.LimiterRequests, api.LimiterOutputTokens} {
		for _, f := range []string{"limit", "remaining", "reset"} {
			want = append(want, api.LimitHeaderName(l, f))
		}
	}
	sort.Strings(want)
	check := func(t *testing.T, what string, h http.Header) {
		t.Helper()
		if got := rateLimitHeaders(h); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: rate-limit headers\n got %v\nwant %v", what, got, want)
		}
	}
	omit := func(c *Config) { c.OmitHeaders = []string{"input-tokens", "tokens"} }
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			omit(c)
			c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 1000, ITPM: 50, OTPM: 1_000_000}
			c.Orgs[1].SpendCapReached = true
		})
		big := msgBody(sonnet, 16, strings.Repeat("word ", 100)) // > 100 input tokens
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, big)
		if rec.Code != 200 {
			t.Fatalf("first call into a full bucket: %d %s", rec.Code, rec.Body)
		}
		check(t, "200", rec.Header())
		rec = request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, big)
		e := checkError(t, rec, 429, api.ErrRateLimit)
		if !strings.Contains(e["message"].(string), "50 input tokens per minute") {
			t.Errorf("429 message %q does not name the ITPM limit", e["message"])
		}
		check(t, "429", rec.Header())
		if st := s.Stats().Orgs["high_prio"].Pools[api.PoolSonnet4]; st.RateLimited != 1 || st.LimitedBy[limitedInput] != 1 {
			t.Errorf("the omitted ITPM limit is not enforced: %+v", st)
		}
		stream := msgBody("claude-haiku-4-5", 16, "stream")
		stream["stream"] = true
		rec = request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, stream)
		if rec.Code != 200 || rec.Header().Get("content-type") != "text/event-stream" {
			t.Fatalf("stream: %d", rec.Code)
		}
		check(t, "stream", rec.Header())
		rec = request(t, s, "POST", "/v1/messages", FakeKeyBatch, msgBody(sonnet, 16, "x"))
		checkError(t, rec, 429, api.ErrRateLimit)
		check(t, "spend-cap 429", rec.Header())
	})
	synctest.Test(t, func(t *testing.T) {
		for _, f := range []struct {
			status int
			typ    api.ErrorType
			set    func(*Faults)
		}{
			{500, api.ErrAPI, func(f *Faults) { f.P500 = 1 }},
			{529, api.ErrOverloaded, func(f *Faults) { f.P529 = 1 }},
		} {
			s := newTestServer(t, func(c *Config) { omit(c); f.set(&c.Faults) })
			rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 16, "x"))
			checkError(t, rec, f.status, f.typ)
			check(t, rec.Result().Status, rec.Header())
		}
	})
}

// TestLaneCoarseHeaders: time-scaled, a reset 100 ms away is written to the
// millisecond, or with coarse_headers rounded up to the whole second.
func TestLaneCoarseHeaders(t *testing.T) {
	for _, tt := range []struct {
		coarse          bool
		requests, input string
	}{
		{false, "2026-11-29T12:00:00.100Z", "2026-11-29T12:00:00.001Z"},
		{true, "2026-11-29T12:00:01Z", "2026-11-29T12:00:01Z"},
	} {
		// ×10: 600 requests refilling at 10/s, 600,000 input tokens at 10,000/s.
		l := testLane(t, Limits{RPM: 60, ITPM: 60_000, OTPM: 6_000}, func(c *Config) {
			c.TimeScale = 10
			c.CoarseHeaders = tt.coarse
		})
		l.admit(t0, 1, 1)
		h := http.Header{}
		l.setHeaders(h, t0)
		if got := h.Get("anthropic-ratelimit-requests-reset"); got != tt.requests {
			t.Errorf("coarse=%v: requests-reset = %s, want %s", tt.coarse, got, tt.requests)
		}
		if got := h.Get("anthropic-ratelimit-input-tokens-reset"); got != tt.input {
			t.Errorf("coarse=%v: input-tokens-reset = %s, want %s", tt.coarse, got, tt.input)
		}
		if got := h.Get("anthropic-ratelimit-requests-limit"); got != "600" {
			t.Errorf("coarse=%v: requests-limit = %s; coarse headers must not change the scaled limits", tt.coarse, got)
		}
	}
}

// TestCoarseRetryAfter: time-scaled, a Messages 429 that fits again in
// 1.5 s says retry-after 1.5, or with coarse_headers 2 (whole seconds,
// rounded up); count_tokens' reset follows the same precision.
func TestCoarseRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		coarse     bool
		retryAfter string
		reset      string // 1.5 s after the bubble's start
	}{
		{false, "1.5", "2000-01-01T00:00:01.500Z"},
		{true, "2", "2000-01-01T00:00:02Z"},
	} {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, func(c *Config) {
				instant(c)
				c.TimeScale = 10
				c.CoarseHeaders = tt.coarse
				// ×10: 40 requests, refilling at 2/3 per second.
				c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 4, ITPM: 1e9, OTPM: 1e9}
				c.Orgs[0].TokenCountRPM = 4
			})
			if now := time.Now().UTC(); now.Format(time.RFC3339Nano) != "2000-01-01T00:00:00Z" {
				t.Fatalf("the bubble starts at %v; the expected resets assume midnight", now)
			}
			for i := range 40 {
				if rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, "x")); rec.Code != 200 {
					t.Fatalf("call %d: %d", i+1, rec.Code)
				}
			}
			rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, "x"))
			checkError(t, rec, 429, api.ErrRateLimit)
			if got := rec.Header().Get("retry-after"); got != tt.retryAfter {
				t.Errorf("coarse=%v: retry-after = %q, want %q", tt.coarse, got, tt.retryAfter)
			}
			ct := msgBody(sonnet, 8, "x")
			delete(ct, "max_tokens")
			rec = request(t, s, "POST", "/v1/messages/count_tokens", FakeKeyHighPrio, ct)
			if rec.Code != 200 {
				t.Fatalf("count_tokens: %d", rec.Code)
			}
			if got := rec.Header().Get("anthropic-ratelimit-requests-reset"); got != tt.reset {
				t.Errorf("coarse=%v: count_tokens requests-reset = %s, want %s", tt.coarse, got, tt.reset)
			}
		})
	}
}

// TestServerClock: a skewed server clock shows in Date and in every reset;
// omit_date leaves Date out; whole-second resets are rounded as
// reset_rounding says (up by default).
func TestServerClock(t *testing.T) {
	for _, tt := range []struct {
		rounding string
		want     time.Duration // the reset of a bucket 0.6 s from full, from the server's second
	}{{"", time.Second}, {"up", time.Second}, {"down", 0}, {"nearest", time.Second}} {
		t.Run("rounding "+tt.rounding, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newTestServer(t, func(c *Config) {
					instant(c)
					c.ClockSkew = Duration(30 * time.Second)
					c.ResetRounding = tt.rounding
					// 600 RPM in a 1 s bucket: 10 deep, one request is 0.1 s.
					c.BucketWindow = Duration(time.Second)
					c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 600}
				})
				var rec *httptest.ResponseRecorder
				for range 6 { // 0.6 s from full
					rec = request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 16, "hi"))
				}
				date, err := http.ParseTime(rec.Header().Get("Date"))
				if err != nil {
					t.Fatalf("Date %q: %v", rec.Header().Get("Date"), err)
				}
				if skew := date.Sub(time.Now().Truncate(time.Second)); skew != 30*time.Second {
					t.Errorf("Date is %v from the real clock, want the 30 s skew", skew)
				}
				reset, err := time.Parse(time.RFC3339, rec.Header().Get(api.LimitHeaderName(api.LimiterRequests, "reset")))
				if err != nil {
					t.Fatal(err)
				}
				if got := reset.Sub(date); got != tt.want {
					t.Errorf("reset − Date = %v, want %v", got, tt.want)
				}
			})
		})
	}
	// Over a real connection (net/http adds a Date of its own unless told
	// not to): with and without omit_date.
	for _, omit := range []bool{false, true} {
		s := newTestServer(t, func(c *Config) { instant(c); c.OmitDate = omit })
		ts := httptest.NewServer(s.Handler())
		b, _ := json.Marshal(msgBody(sonnet, 16, "hi"))
		req, _ := http.NewRequest("POST", ts.URL+"/v1/messages", bytes.NewReader(b))
		req.Header.Set(api.HeaderAPIKey, FakeKeyHighPrio)
		req.Header.Set(api.HeaderVersion, api.VersionDefault)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ts.Close()
		if got := resp.Header.Get("Date") != ""; resp.StatusCode != 200 || got == omit {
			t.Errorf("omit_date %v: status %d, Date %q", omit, resp.StatusCode, resp.Header.Get("Date"))
		}
	}
}
