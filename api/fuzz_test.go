package api

import (
	"math"
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzNow is the clock the retry-after fuzz target reads HTTP dates
// against: whole seconds, as a Date header is.
var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// plainDecimal matches what a server writes in retry-after and
// retry-after-ms: digits, optionally a fraction.
var plainDecimal = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// exactBelow bounds the delays that must be read to the nanosecond: up to
// 2^50 ns (13 days) a float64 holds every nanosecond with room to spare,
// so rounding, not truncating, gets each one exactly.
const exactBelow = 1 << 50

// exactNanos returns the plain decimal v times unit (nanoseconds per unit),
// exactly, and whether it is a whole number of nanoseconds below
// exactBelow. It reads v with math/big, not strconv.ParseFloat.
func exactNanos(v string, unit int64) (time.Duration, bool) {
	if !plainDecimal.MatchString(v) {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(v)
	if !ok {
		return 0, false
	}
	r.Mul(r, new(big.Rat).SetInt64(unit))
	if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() >= exactBelow {
		return 0, false
	}
	return time.Duration(r.Num().Int64()), true
}

// FuzzParseRetryAfter checks ParseRetryAfter on any pair of retry-after-ms
// and retry-after values: a delay is never negative, an absent one is 0;
// retry-after-ms, when it is a well-formed non-negative number, wins
// whatever retry-after says; a plain decimal that is a whole number of
// nanoseconds (integer seconds, integer milliseconds, "1.5", "0.3") and
// under 13 days is read exactly, never a nanosecond short (a client that waits less than the
// server asked gets a second 429); larger values never give a shorter
// delay; and an HTTP date is read against now to the second.
func FuzzParseRetryAfter(f *testing.F) {
	f.Add("", "7", int64(0))
	f.Add("250", "7", int64(0))
	f.Add("x", "3", int64(0))
	f.Add("", "-2", int64(0))
	f.Add("", "1.5", int64(0))
	f.Add("0.5", "", int64(0))
	f.Add("", "Sun, 29 Nov 2026 12:00:30 GMT", int64(0))
	f.Add("", "Sunday, 29-Nov-26 12:00:30 GMT", int64(-30))
	f.Add("", "Sun Nov 29 12:00:30 2026", int64(3600))
	f.Add("1e300", "", int64(0))
	f.Add("", "+Inf", int64(0))
	f.Add("", "NaN", int64(0))
	f.Add("-0", "1e400", int64(0))
	f.Add("", "-1e400", int64(0))
	f.Add("", "9223372036.854775807", int64(0))
	f.Add("", "0x10", int64(0))
	f.Add("", "1_000", int64(0))
	f.Fuzz(func(t *testing.T, ms, ra string, skew int64) {
		h := http.Header{}
		if ms != "" {
			h.Set(HeaderRetryAfterMs, ms)
		}
		if ra != "" {
			h.Set(HeaderRetryAfter, ra)
		}
		// Header values are read as set; Get returns the first.
		ms, ra = h.Get(HeaderRetryAfterMs), h.Get(HeaderRetryAfter)
		now := fuzzNow.Add(time.Duration(skew%(1<<32)) * time.Second)
		d, ok := ParseRetryAfter(h, now)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(ms %q, s %q) = %v: negative", ms, ra, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(ms %q, s %q) = %v, false: a rejected value must be 0", ms, ra, d)
		}
		if ms == "" && ra == "" && ok {
			t.Fatalf("ParseRetryAfter of no headers = %v, true", d)
		}
		if again, ok2 := ParseRetryAfter(h, now); again != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter is not deterministic: %v, %v then %v, %v", d, ok, again, ok2)
		}

		msWins := false
		if x, err := strconv.ParseFloat(ms, 64); (err == nil || isRange(err)) && x >= 0 && !math.IsNaN(x) {
			msWins = true
			if !ok {
				t.Fatalf("retry-after-ms %q is a non-negative number but was rejected", ms)
			}
			other := http.Header{}
			other.Set(HeaderRetryAfterMs, ms)
			if alone, _ := ParseRetryAfter(other, now); alone != d {
				t.Fatalf("retry-after-ms %q gives %v alone but %v with retry-after %q: it must win", ms, alone, d, ra)
			}
			if want, exact := exactNanos(ms, int64(time.Millisecond)); exact && d != want {
				t.Fatalf("retry-after-ms %q = %v want exactly %v (%d ns short)", ms, d, want, want-d)
			}
		}
		if msWins {
			return
		}

		// retry-after alone decides from here on.
		if want, exact := exactNanos(ra, int64(time.Second)); exact && (d != want || !ok) {
			t.Fatalf("retry-after %q = %v, %v want exactly %v (%d ns short)", ra, d, ok, want, want-d)
		}
		if x, err := strconv.ParseFloat(ra, 64); err == nil || isRange(err) {
			if x >= 0 && !math.IsNaN(x) {
				if !ok {
					t.Fatalf("retry-after %q is a non-negative number but was rejected", ra)
				}
				// Monotonic: twice the value is never a shorter delay.
				if y := 2 * x; !math.IsInf(y, 0) || math.IsInf(x, 0) {
					h2 := http.Header{}
					h2.Set(HeaderRetryAfter, strconv.FormatFloat(y, 'g', -1, 64))
					if d2, _ := ParseRetryAfter(h2, now); d2 < d {
						t.Fatalf("retry-after %v gives %v, less than %v for %q", y, d2, d, ra)
					}
				}
			} else if ok {
				t.Fatalf("retry-after %q is a negative number or NaN but was accepted as %v", ra, d)
			}
			return
		}
		if when, err := http.ParseTime(ra); err == nil {
			want := max(when.Sub(now), 0)
			if !ok || d != want {
				t.Fatalf("retry-after date %q against %v = %v, %v want %v", ra, now, d, ok, want)
			}
		} else if ok {
			t.Fatalf("retry-after %q is neither a number nor an HTTP date but was accepted as %v", ra, d)
		}
	})
}

// FuzzRateLimitHeaders checks ParseRateLimitHeaders, ParseDate and
// ParseNamedLimit. Headers: one dimension gets the fuzzed values, the
// others well-formed ones, and no value leaks into another dimension; a
// present dimension holds exactly the integers and time written (the
// round trip of a formatted value is exact, ResetFine iff a fraction was
// written); Fraction is always in [0,1], never NaN. Date: a formatted
// HTTP date reads back to the second, any other value is zero or what
// http.ParseTime reads. Named limit: a limiter is named iff PerMinute > 0,
// and a message naming one in the API's wording reads back exactly.
func FuzzRateLimitHeaders(f *testing.F) {
	f.Add(uint8(0), "30000", "29999", "2026-11-29T12:00:01Z", "Sun, 29 Nov 2026 12:00:30 GMT",
		"This request would exceed your organization's rate limit of 2,000,000 input tokens per minute (org: x, model: y).", int64(2000000))
	f.Add(uint8(3), "1000000", "999000", "2026-11-29T12:00:00.5+00:00", "", "rate limit of 50 requests per minute", int64(50))
	f.Add(uint8(1), "-5", "-7", "2026-11-29T12:00:00.123456789-07:00", "garbage", "Workspace limit: 90,000 tokens per minute exceeded", int64(0))
	f.Add(uint8(1), "1", "1", "", "", "Workspace limit: to,000 tokens per minute exceeded", int64(21))
	f.Add(uint8(2), "0", "10", "2026-11-29 12:00:00", "Sunday, 06-Nov-94 08:49:37 GMT", "", int64(-1))
	f.Add(uint8(0), "9223372036854775808", "1", "0000-01-01T00:00:00Z", "Sun Nov  6 08:49:37 1994", "99999999999999999999 tokens per minute", int64(math.MaxInt64))
	f.Add(uint8(0), "1e3", " 5", "\xff", "\xff", "1,,,2 Output Tokens PER minute", int64(12))
	f.Fuzz(func(t *testing.T, dim uint8, lim, rem, reset, date, msg string, n int64) {
		l := Limiters[int(dim)%len(Limiters)]
		good := time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC)
		h := http.Header{}
		for i, other := range Limiters {
			h.Set(LimitHeaderName(other, "limit"), strconv.Itoa(1000+i))
			h.Set(LimitHeaderName(other, "remaining"), strconv.Itoa(500+i))
			h.Set(LimitHeaderName(other, "reset"), good.Format(time.RFC3339))
		}
		h[http.CanonicalHeaderKey(LimitHeaderName(l, "limit"))] = []string{lim}
		h[http.CanonicalHeaderKey(LimitHeaderName(l, "remaining"))] = []string{rem}
		h[http.CanonicalHeaderKey(LimitHeaderName(l, "reset"))] = []string{reset}
		r := ParseRateLimitHeaders(h)
		for i, other := range Limiters {
			s := *r.Get(other)
			if fr := s.Fraction(); math.IsNaN(fr) || fr < 0 || fr > 1 {
				t.Fatalf("%s: Fraction() = %v outside [0,1] for %+v", other, fr, s)
			}
			if !s.Present && s != (LimitState{}) {
				t.Fatalf("%s: absent dimension holds %+v", other, s)
			}
			if other == l {
				continue
			}
			want := LimitState{Present: true, Limit: int64(1000 + i), Remaining: int64(500 + i), Reset: good}
			if s != want {
				t.Fatalf("%s: %+v want %+v: the fuzzed %s headers leaked into it", other, s, want, l)
			}
		}
		s := *r.Get(l)
		limN, err1 := strconv.ParseInt(lim, 10, 64)
		remN, err2 := strconv.ParseInt(rem, 10, 64)
		resetT, err3 := time.Parse(time.RFC3339, reset)
		if wantPresent := err1 == nil && err2 == nil && err3 == nil; s.Present != wantPresent {
			t.Fatalf("%s %q/%q/%q: Present %v want %v", l, lim, rem, reset, s.Present, wantPresent)
		}
		if s.Present && (s.Limit != limN || s.Remaining != remN || !s.Reset.Equal(resetT)) {
			t.Fatalf("%s %q/%q/%q read as %+v", l, lim, rem, reset, s)
		}

		// Round trip of well-formed values built from the fuzzed integer.
		at := time.Unix(n%(1<<34), n%1_000_000_000).UTC()
		h.Set(LimitHeaderName(l, "limit"), strconv.FormatInt(n, 10))
		h.Set(LimitHeaderName(l, "remaining"), strconv.FormatInt(n/3, 10))
		h.Set(LimitHeaderName(l, "reset"), at.Format(time.RFC3339Nano))
		r = ParseRateLimitHeaders(h)
		s = *r.Get(l)
		if at.Year() >= 0 && at.Year() <= 9999 {
			want := LimitState{Present: true, Limit: n, Remaining: n / 3, Reset: at, ResetFine: at.Nanosecond() != 0}
			if !s.Reset.Equal(want.Reset) || s.Limit != want.Limit || s.Remaining != want.Remaining ||
				!s.Present || s.ResetFine != want.ResetFine {
				t.Fatalf("round trip of limit %d, reset %s: got %+v want %+v", n, at.Format(time.RFC3339Nano), s, want)
			}
		}

		// Date.
		dh := http.Header{"Date": []string{date}}
		got := ParseDate(dh)
		if want, err := http.ParseTime(date); err != nil && !got.IsZero() || err == nil && !got.Equal(want) {
			t.Fatalf("ParseDate(%q) = %v, http.ParseTime = %v, %v", date, got, want, err)
		}
		dt := time.Unix(n%(1<<34), 0).UTC()
		if dt.Year() >= 1 && dt.Year() <= 9999 {
			dh.Set("Date", dt.Format(http.TimeFormat))
			if back := ParseDate(dh); !back.Equal(dt) {
				t.Fatalf("ParseDate(%q) = %v want %v", dh.Get("Date"), back, dt)
			}
		}

		// Named limit.
		nl := ParseNamedLimit(msg)
		if (nl.Limiter == "") != (nl.PerMinute == 0) || nl.PerMinute < 0 {
			t.Fatalf("ParseNamedLimit(%q) = %+v: a limiter iff a positive limit", msg, nl)
		}
		if nl.Limiter != "" {
			known := false
			for _, x := range Limiters {
				known = known || x == nl.Limiter
			}
			if !known || !strings.Contains(strings.ToLower(msg), "per") {
				t.Fatalf("ParseNamedLimit(%q) = %+v", msg, nl)
			}
		}
		if n > 0 {
			words := map[Limiter]string{LimiterRequests: "requests", LimiterTokens: "tokens",
				LimiterInputTokens: "input tokens", LimiterOutputTokens: "output tokens"}
			text := "This request would exceed your organization's rate limit of " + commas(n) + " " +
				words[l] + " per minute (org: x, model: y). " + msg
			// The first named limit is the one read; the scope flags read the
			// whole message, so the tail's own scope words carry over.
			back, tail := ParseNamedLimit(text), ParseNamedLimit(msg)
			if back.Limiter != l || back.PerMinute != n || back.Org != tail.Org || back.Workspace != tail.Workspace {
				t.Fatalf("ParseNamedLimit(%q) = %+v want %s %d, scope of the tail %+v", text, back, l, n, tail)
			}
		}
	})
}

// commas writes n > 0 with thousands separators, as the API does.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
