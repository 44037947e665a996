package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		h      map[string]string
		want   time.Duration
		wantOK bool
	}{
		{"absent", nil, 0, false},
		{"seconds", map[string]string{"retry-after": "7"}, 7 * time.Second, true},
		{"fractional seconds", map[string]string{"retry-after": "1.5"}, 1500 * time.Millisecond, true},
		{"milliseconds win", map[string]string{"retry-after": "7", "retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{"bad ms falls back", map[string]string{"retry-after": "3", "retry-after-ms": "x"}, 3 * time.Second, true},
		{"negative", map[string]string{"retry-after": "-2"}, 0, false},
		{"http date", map[string]string{"retry-after": "Sun, 29 Nov 2026 12:00:30 GMT"}, 30 * time.Second, true},
		{"past date clamps", map[string]string{"retry-after": "Sun, 29 Nov 2026 11:00:00 GMT"}, 0, true},
		{"garbage", map[string]string{"retry-after": "soon"}, 0, false},
		{"a day", map[string]string{"retry-after": "86400"}, 24 * time.Hour, true},
		{"huge saturates, never wraps", map[string]string{"retry-after": "1e300"}, time.Duration(math.MaxInt64), true},
		{"huge ms saturates", map[string]string{"retry-after-ms": "1e300"}, time.Duration(math.MaxInt64), true},
		{"infinite saturates", map[string]string{"retry-after": "+Inf"}, time.Duration(math.MaxInt64), true},
		{"NaN", map[string]string{"retry-after": "NaN"}, 0, false},
		{"beyond a float64 saturates", map[string]string{"retry-after": "1e400"}, time.Duration(math.MaxInt64), true},
		{"negative beyond a float64", map[string]string{"retry-after": "-1e400"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.h {
				h.Set(k, v)
			}
			got, ok := ParseRetryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%v) = %v, %v want %v, %v", tt.h, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseRateLimitHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "30000")
	h.Set("anthropic-ratelimit-requests-remaining", "29999")
	h.Set("anthropic-ratelimit-requests-reset", "2026-11-29T12:00:01Z")
	h.Set("anthropic-ratelimit-output-tokens-limit", "1000000")
	h.Set("anthropic-ratelimit-output-tokens-remaining", "999000")
	h.Set("anthropic-ratelimit-output-tokens-reset", "2026-11-29T12:00:00.5+00:00")
	h.Set("anthropic-ratelimit-input-tokens-limit", "10000000") // remaining and reset missing
	r := ParseRateLimitHeaders(h)
	if !r.Requests.Present || r.Requests.Limit != 30000 || r.Requests.Remaining != 29999 {
		t.Errorf("requests = %+v", r.Requests)
	}
	if !r.OutputTokens.Present || r.OutputTokens.Reset.Nanosecond() != 5e8 {
		t.Errorf("output tokens = %+v (an offset and fractional seconds must parse)", r.OutputTokens)
	}
	if r.InputTokens.Present || r.Tokens.Present {
		t.Errorf("a dimension missing any header must be absent: %+v %+v", r.InputTokens, r.Tokens)
	}
	if f := r.Requests.Fraction(); f < 0.9999 || f > 1 {
		t.Errorf("fraction %v", f)
	}
	if f := r.InputTokens.Fraction(); f != 1 {
		t.Errorf("absent fraction %v want 1", f)
	}
}

func TestResetPrecision(t *testing.T) {
	h := http.Header{}
	for _, l := range Limiters {
		h.Set(LimitHeaderName(l, "limit"), "1000")
		h.Set(LimitHeaderName(l, "remaining"), "10")
	}
	h.Set(LimitHeaderName(LimiterRequests, "reset"), "2026-11-29T12:00:03Z")
	h.Set(LimitHeaderName(LimiterInputTokens, "reset"), "2026-11-29T12:00:03.250Z")
	h.Set(LimitHeaderName(LimiterOutputTokens, "reset"), "2026-11-29T12:00:03.250+00:00")
	r := ParseRateLimitHeaders(h)
	if !r.Requests.Present || r.Requests.ResetFine {
		t.Errorf("whole-second reset: %+v, want present and not fine", r.Requests)
	}
	if !r.InputTokens.ResetFine || r.InputTokens.Reset.Nanosecond() != 250e6 {
		t.Errorf("millisecond reset: %+v", r.InputTokens)
	}
	if !r.OutputTokens.Present || !r.OutputTokens.ResetFine {
		t.Errorf("offset reset: %+v", r.OutputTokens)
	}
	if r.Tokens.Present {
		t.Errorf("tokens without a reset header: %+v, want absent", r.Tokens)
	}
}

func TestParseNamedLimit(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want NamedLimit
	}{
		{"This request would exceed your organization's rate limit of 2,000,000 input tokens per minute (org: x, model: y).", NamedLimit{Limiter: LimiterInputTokens, PerMinute: 2_000_000}},
		{"This request would exceed the rate limit for your organization (abc) of 400,000 output tokens per minute. For details…", NamedLimit{Limiter: LimiterOutputTokens, PerMinute: 400_000}},
		{"rate limit of 50 requests per minute", NamedLimit{Limiter: LimiterRequests, PerMinute: 50}},
		{"Workspace limit: 90,000 tokens per minute exceeded", NamedLimit{Limiter: LimiterTokens, PerMinute: 90_000, Workspace: true}},
		{"This request was rate limited because your organization's usage increased too sharply.", NamedLimit{}},
		{"Number of request tokens has exceeded your per-minute rate limit", NamedLimit{}},
		{"", NamedLimit{}},
		// A limit on the organization's usage across all models.
		{"This request would exceed your organization's rate limit of 8,000,000 input tokens per minute across all models (org: x).", NamedLimit{Limiter: LimiterInputTokens, PerMinute: 8_000_000, Org: true}},
		{"Your organization has exceeded its rate limit for all API usage.", NamedLimit{Org: true}},
		{"organization-wide limit of 20,000 requests per minute reached", NamedLimit{Limiter: LimiterRequests, PerMinute: 20_000, Org: true}},
	} {
		if got := ParseNamedLimit(tt.msg); got != tt.want {
			t.Errorf("ParseNamedLimit(%q) = %+v want %+v", tt.msg, got, tt.want)
		}
	}
}

func TestParseDate(t *testing.T) {
	h := http.Header{}
	if !ParseDate(h).IsZero() {
		t.Error("absent Date must be zero")
	}
	h.Set("Date", "Sun, 29 Nov 2026 12:00:30 GMT")
	if got := ParseDate(h); !got.Equal(time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)) {
		t.Errorf("ParseDate = %v", got)
	}
}

func TestRoundThousand(t *testing.T) {
	for in, want := range map[int64]int64{0: 0, 499: 0, 500: 1000, 9_987_655: 9_988_000, -5: 0} {
		if got := RoundThousand(in); got != want {
			t.Errorf("RoundThousand(%d) = %d want %d", in, got, want)
		}
	}
}

func TestValidCustomID(t *testing.T) {
	for id, want := range map[string]bool{"a": true, "item-00012_x": true, "": false, "has space": false, "é": false,
		"0123456789012345678901234567890123456789012345678901234567890123":  true,
		"01234567890123456789012345678901234567890123456789012345678901234": false} {
		if got := ValidCustomID(id); got != want {
			t.Errorf("ValidCustomID(%q) = %v want %v", id, got, want)
		}
	}
}

func TestPoolOf(t *testing.T) {
	for model, want := range map[string]Pool{
		"claude-sonnet-4-5-20250929": PoolSonnet4, "claude-sonnet-4-5": PoolSonnet4, "claude-sonnet-4-6": PoolSonnet4,
		"claude-haiku-4-5": PoolHaiku45, "claude-opus-4-8": PoolOpus4, "claude-opus-5": PoolOpus5,
		"claude-haiku-5-5": "haiku-5-5", "claude-opus-5-5": "opus-5-5",
		// A model the catalog does not know is a pool of its own (issue 39):
		// its limits are its own headers', never another family's.
		"claude-sonnet-9-future": "claude-sonnet-9-future", "gpt-x": "gpt-x",
	} {
		if got := PoolOf(model); got != want {
			t.Errorf("PoolOf(%q) = %s want %s", model, got, want)
		}
	}
	// Its cap is its family's when the name shows one.
	for pool, want := range map[Pool]Family{PoolSonnet4: FamilySonnet, "haiku-5-5": FamilyHaiku,
		"claude-sonnet-9-future": FamilySonnet, "claude-opus-7": FamilyOpus, "gpt-x": FamilyUnknown} {
		if got := FamilyOfPool(pool); got != want {
			t.Errorf("FamilyOfPool(%q) = %s want %s", pool, got, want)
		}
	}
}

// TestParseBatchCreate: a create body is refused with the API's words for
// each way it can be wrong, and read whole when it is right.
func TestParseBatchCreate(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"requests":`, "Request body is not valid JSON"},
		{`{"requests":[]}`, "at least 1 item"},
		{`{"requests":[{"params":{}}]}`, "requests.0.custom_id: Field required"},
		{`{"requests":[{"custom_id":"a b","params":{}}]}`, "requests.0.custom_id: String should match pattern"},
		{`{"requests":[{"custom_id":"a","params":{}},{"custom_id":"a","params":{}}]}`, `requests.1.custom_id: custom_id "a" is already used by requests.0`},
		{`{"requests":[{"custom_id":"a","params":[]}]}`, "requests.0.params: Input should be an object"},
	} {
		_, err := ParseBatchCreate([]byte(tc.body))
		var ir InvalidRequest
		if !errors.As(err, &ir) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an InvalidRequest with %q", tc.body, err, tc.want)
		}
	}
	reqs, err := ParseBatchCreate([]byte(`{"requests":[{"custom_id":"a","params":{"x":1}},{"custom_id":"b","params":{}}]}`))
	if err != nil || len(reqs) != 2 || reqs[0].CustomID != "a" || string(reqs[0].Params) != `{"x":1}` || reqs[1].CustomID != "b" {
		t.Errorf("a valid body: %+v, %v", reqs, err)
	}
}

// TestResultObjects: the raw result objects are Batch results' own shape,
// the message or error kept byte for byte, in one allocation.
func TestResultObjects(t *testing.T) {
	msg := []byte(`{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":2}}`)
	var r BatchResult
	if err := json.Unmarshal(SucceededResult(msg), &r); err != nil || r.Type != ResultSucceeded || r.Message == nil || r.Message.Usage.OutputTokens != 2 {
		t.Fatalf("succeeded: %+v, %v", r, err)
	}
	if got := string(SucceededResult(msg)); got != `{"type":"succeeded","message":`+string(msg)+`}` {
		t.Fatalf("succeeded result %s: the message is not kept byte for byte", got)
	}
	e := []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	r = BatchResult{}
	if err := json.Unmarshal(ErroredResult(e), &r); err != nil || r.Type != ResultErrored || r.Error == nil || r.Error.Err.Type != ErrOverloaded {
		t.Fatalf("errored: %+v, %v", r, err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = SucceededResult(msg) }); n != 1 {
		t.Errorf("SucceededResult allocated %.0f times, want 1", n)
	}
}
