package api

import (
	"net/http"
	"testing"
)

// TestParseRateLimitHeadersAbsentIsFree: an answer without some limiters'
// headers (a gateway's, or a limiter the organization does not have) costs
// no parse error per missing header; every answer is parsed.
func TestParseRateLimitHeadersAbsentIsFree(t *testing.T) {
	h := http.Header{}
	h.Set(LimitHeaderName(Limiters[0], "limit"), "600")
	h.Set(LimitHeaderName(Limiters[0], "remaining"), "599")
	h.Set(LimitHeaderName(Limiters[0], "reset"), "2026-12-03T12:00:00Z")
	r := ParseRateLimitHeaders(h)
	if s := r.Get(Limiters[0]); !s.Present || s.Limit != 600 || s.Remaining != 599 {
		t.Fatalf("first limiter %+v", *s)
	}
	if s := r.Get(Limiters[1]); s.Present {
		t.Fatalf("absent limiter read as present: %+v", *s)
	}
	if n := testing.AllocsPerRun(100, func() { ParseRateLimitHeaders(h) }); n != 0 {
		t.Errorf("parsing one limiter's headers and skipping the rest allocated %.0f times", n)
	}
}

// TestHeaderNamesAreCanonical: every header name constant is in
// net/http's canonical form, so Get and Set on an http.Header use it as
// is instead of building the name again on every call.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, n := range []string{HeaderRequestID, HeaderOrganizationID, HeaderWorkspaceID, HeaderRetryAfter,
		HeaderRetryAfterMs, HeaderShouldRetry, HeaderVersion, HeaderAPIKey, HeaderBeta} {
		if c := http.CanonicalHeaderKey(n); c != n {
			t.Errorf("header name %q is not canonical (%q)", n, c)
		}
		h := http.Header{n: {"v"}}
		if a := testing.AllocsPerRun(100, func() { _ = h.Get(n) }); a != 0 {
			t.Errorf("Get(%q) allocated %.0f times", n, a)
		}
	}
}
