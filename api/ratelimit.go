package api

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// Limiter names the dimensions of the anthropic-ratelimit-* header family.
type Limiter string

// The four header dimensions. Tokens is input plus output (or the most
// restrictive workspace token limit when one applies).
const (
	LimiterRequests     Limiter = "requests"
	LimiterTokens       Limiter = "tokens"
	LimiterInputTokens  Limiter = "input-tokens"
	LimiterOutputTokens Limiter = "output-tokens"
)

// Limiters lists every dimension in header order.
var Limiters = [...]Limiter{LimiterRequests, LimiterTokens, LimiterInputTokens, LimiterOutputTokens}

// Header names other than the rate-limit family.
const (
	HeaderRequestID      = "request-id"
	HeaderOrganizationID = "anthropic-organization-id"
	HeaderWorkspaceID    = "anthropic-workspace-id"
	HeaderRetryAfter     = "retry-after"
	HeaderRetryAfterMs   = "retry-after-ms"
	HeaderShouldRetry    = "x-should-retry"
	HeaderVersion        = "anthropic-version"
	HeaderAPIKey         = "x-api-key"
	HeaderBeta           = "anthropic-beta"
)

// API versions the simulator accepts. VersionDefault is what sluice sends
// unless configured otherwise; Go SDK v2 sends Version20261021.
const (
	Version20230601 = "2023-06-01"
	Version20261021 = "2026-10-21"
	VersionDefault  = Version20230601
)

// LimitHeaderName returns "anthropic-ratelimit-<l>-<field>", field being
// "limit", "remaining" or "reset".
func LimitHeaderName(l Limiter, field string) string {
	return "anthropic-ratelimit-" + string(l) + "-" + field
}

// LimitState is one dimension of the rate-limit headers of a response.
type LimitState struct {
	Present   bool      // all three headers parsed
	Limit     int64     // per-minute limit
	Remaining int64     // left now (tokens rounded to the nearest thousand by the API)
	Reset     time.Time // when the bucket is full again
}

// Fraction returns Remaining/Limit clamped to [0,1], or 1 when absent.
func (s LimitState) Fraction() float64 {
	if !s.Present || s.Limit <= 0 {
		return 1
	}
	f := float64(s.Remaining) / float64(s.Limit)
	return math.Max(0, math.Min(1, f))
}

// RateLimitHeaders is the parsed anthropic-ratelimit-* family of one response.
type RateLimitHeaders struct {
	Requests, Tokens, InputTokens, OutputTokens LimitState
}

// Get returns the state of dimension l.
func (r *RateLimitHeaders) Get(l Limiter) *LimitState {
	switch l {
	case LimiterRequests:
		return &r.Requests
	case LimiterTokens:
		return &r.Tokens
	case LimiterInputTokens:
		return &r.InputTokens
	default:
		return &r.OutputTokens
	}
}

// ParseRateLimitHeaders reads the rate-limit headers of h. A dimension whose
// three headers are not all present and well formed is left !Present: some
// models and gateways omit dimensions, so callers must cope.
func ParseRateLimitHeaders(h http.Header) RateLimitHeaders {
	var r RateLimitHeaders
	for _, l := range Limiters {
		s := r.Get(l)
		lim, err1 := strconv.ParseInt(h.Get(LimitHeaderName(l, "limit")), 10, 64)
		rem, err2 := strconv.ParseInt(h.Get(LimitHeaderName(l, "remaining")), 10, 64)
		reset, err3 := time.Parse(time.RFC3339, h.Get(LimitHeaderName(l, "reset")))
		if err1 == nil && err2 == nil && err3 == nil {
			*s = LimitState{Present: true, Limit: lim, Remaining: rem, Reset: reset}
		}
	}
	return r
}

// ParseRetryAfter returns the server's requested delay: retry-after-ms
// (milliseconds) first, then retry-after as float seconds or an HTTP date
// relative to now. Negative or malformed values are rejected (ok false).
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := h.Get(HeaderRetryAfterMs); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get(HeaderRetryAfter)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// RoundThousand rounds n to the nearest thousand, the precision the API
// documents for token "remaining" headers.
func RoundThousand(n int64) int64 {
	if n < 0 {
		return 0
	}
	return (n + 500) / 1000 * 1000
}
