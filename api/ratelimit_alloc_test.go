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
