package api

import (
	"errors"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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

// Header names other than the rate-limit family, in net/http's canonical
// form (HTTP header names are case-insensitive; the docs spell them in
// lower case): http.Header's Get and Set canonicalize a name on every
// call, which builds a new string for a lower-case one — seven of them a
// request on the client's path alone.
const (
	HeaderRequestID      = "Request-Id"
	HeaderOrganizationID = "Anthropic-Organization-Id"
	HeaderWorkspaceID    = "Anthropic-Workspace-Id"
	HeaderRetryAfter     = "Retry-After"
	HeaderRetryAfterMs   = "Retry-After-Ms"
	HeaderShouldRetry    = "X-Should-Retry"
	HeaderVersion        = "Anthropic-Version"
	HeaderAPIKey         = "X-Api-Key"
	HeaderBeta           = "Anthropic-Beta"
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
	// ResetFine says the reset had a fractional second; a whole-second
	// reset may be rounded either way.
	ResetFine bool
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

// canonicalLimitHeaders holds, for each of Limiters, its limit, remaining
// and reset header names in canonical form, so that reading an answer's
// twelve headers is twelve map lookups: building and canonicalising each
// name per answer was a visible share of the proxy's CPU per request.
var canonicalLimitHeaders = func() (names [len(Limiters)][3]string) {
	for i, l := range Limiters {
		for j, f := range [3]string{"limit", "remaining", "reset"} {
			names[i][j] = http.CanonicalHeaderKey(LimitHeaderName(l, f))
		}
	}
	return names
}()

// first is h.Get(name) for a name already in canonical form.
func first(h http.Header, canonical string) string {
	if vs := h[canonical]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// ParseRateLimitHeaders reads the rate-limit headers of h. A dimension whose
// three headers are not all present and well formed is left !Present: some
// models and gateways omit dimensions, so callers must cope.
func ParseRateLimitHeaders(h http.Header) RateLimitHeaders {
	var r RateLimitHeaders
	for i, l := range Limiters {
		s := r.Get(l)
		names := &canonicalLimitHeaders[i]
		lv, remv, rv := first(h, names[0]), first(h, names[1]), first(h, names[2])
		if lv == "" || remv == "" || rv == "" {
			// Absent (an answer without this limiter's headers): not worth
			// the three parse errors a parse of "" allocates per answer.
			continue
		}
		lim, err1 := strconv.ParseInt(lv, 10, 64)
		rem, err2 := strconv.ParseInt(remv, 10, 64)
		reset, err3 := time.Parse(time.RFC3339, rv)
		if err1 == nil && err2 == nil && err3 == nil {
			*s = LimitState{Present: true, Limit: lim, Remaining: rem, Reset: reset, ResetFine: strings.Contains(rv, ".")}
		}
	}
	return r
}

// ParseRetryAfter returns the server's requested delay: retry-after-ms
// (milliseconds) first, then retry-after as float seconds or an HTTP date
// relative to now. Negative or malformed values are rejected (ok false); a
// value too large for a Duration is the largest Duration (never a wrapped,
// negative one), for the caller to cap.
func ParseRetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := h.Get(HeaderRetryAfterMs); v != "" {
		if ms, ok := parseNonNegative(v); ok {
			return durationOf(ms, time.Millisecond), true
		}
	}
	v := h.Get(HeaderRetryAfter)
	if v == "" {
		return 0, false
	}
	if s, ok := parseNonNegative(v); ok {
		return durationOf(s, time.Second), true
	} else if _, err := strconv.ParseFloat(v, 64); err == nil || isRange(err) {
		return 0, false // a negative number
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

// DefaultMaxRetryAfter is the longest server retry-after sluice honours
// unless told otherwise (the CLI's --max-retry-after).
const DefaultMaxRetryAfter = 10 * time.Minute

// CapRetryAfter is the one rule for a server's retry-after, whoever waits
// on it (a lane, the batch path's control calls): honoured up to limit
// (DefaultMaxRetryAfter when limit <= 0), never beyond — a retry-after of a
// day must not stop work silently for a day, nor one past the cap be
// ignored. capped reports a cut, for the caller to log (once per lane or
// organization).
func CapRetryAfter(d, limit time.Duration) (_ time.Duration, capped bool) {
	if limit <= 0 {
		limit = DefaultMaxRetryAfter
	}
	if d > limit {
		return limit, true
	}
	return d, false
}

// parseNonNegative parses a number ≥ 0; one too large for a float64 is
// +Inf (for the caller to saturate), not an error.
func parseNonNegative(v string) (float64, bool) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil && !isRange(err) {
		return 0, false
	}
	if x < 0 || math.IsNaN(x) {
		return 0, false
	}
	return x, true
}

func isRange(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

// durationOf converts x ≥ 0 units to a Duration, rounded to the nearest
// nanosecond (truncating made "2.01" s, or 2010 ms, 1 ns short: a wait
// shorter than the server asked for), saturating instead of overflowing.
func durationOf(x float64, unit time.Duration) time.Duration {
	ns := math.Round(x * float64(unit))
	if ns >= float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ns)
}

// ParseDate returns the Date header of an answer (whole seconds), zero when
// absent or malformed.
func ParseDate(h http.Header) time.Time {
	t, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// NamedLimit is the limit a 429's message names, when the text gives it:
// the docs say a 429 describes "which rate limit was exceeded", and the
// API's wording is "... rate limit of 2,000,000 input tokens per minute".
type NamedLimit struct {
	Limiter   Limiter // "" when the message names none
	PerMinute int64
	// Org: the limit is on the organization's usage across all models
	// (the rate-limits page's "Organization (all API usage)" table), not
	// the model pool's: every pool of the organization is slowed by it.
	Org bool
	// Workspace: the message names a workspace's limit (limits can be set
	// per workspace, lower than the organization's).
	Workspace bool
}

var namedLimitRE = regexp.MustCompile(`(?i)\b([0-9][0-9,]*)\s+(requests|input tokens|output tokens|tokens)\s+per\s+minute`)

// orgWideRE recognises a limit on an organization's usage across models.
// The API's wording is not published (docs/models.md): these are the forms
// the rate-limits page uses for the table; a 429 that names a model pool's
// limit ("… (org: …, model: …)") or none of these stays the lane's.
var orgWideRE = regexp.MustCompile(`(?i)across all models|all (?:API )?usage|organization[- ]wide`)

// workspaceRE recognises a workspace's limit.
var workspaceRE = regexp.MustCompile(`(?i)\bworkspace`)

// ParseNamedLimit reads the limit a rate-limit error message names.
func ParseNamedLimit(message string) NamedLimit {
	org, ws := orgWideRE.MatchString(message), workspaceRE.MatchString(message)
	m := namedLimitRE.FindStringSubmatch(message)
	if m == nil {
		return NamedLimit{Org: org, Workspace: ws}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
	if err != nil || n <= 0 {
		return NamedLimit{Org: org, Workspace: ws}
	}
	var l Limiter
	switch strings.ToLower(m[2]) {
	case "requests":
		l = LimiterRequests
	case "input tokens":
		l = LimiterInputTokens
	case "output tokens":
		l = LimiterOutputTokens
	default:
		l = LimiterTokens
	}
	return NamedLimit{Limiter: l, PerMinute: n, Org: org, Workspace: ws}
}

// RoundThousand rounds n to the nearest thousand, the precision the API
// documents for token "remaining" headers.
func RoundThousand(n int64) int64 {
	if n < 0 {
		return 0
	}
	return (n + 500) / 1000 * 1000
}
