package sim

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

func testLane(t *testing.T, lim Limits, mutate func(*Config)) *lane {
	t.Helper()
	cfg := Default()
	if mutate != nil {
		mutate(&cfg)
	}
	w := newWorld(&cfg, t0)
	return newLane(w.orgs[0], api.PoolSonnet4, lim, &cfg, t0)
}

func TestLaneAdmitsUpToEachLimit(t *testing.T) {
	tests := []struct {
		name      string
		lim       Limits
		in, out   int64
		admits    int
		limitedBy string
		wait      time.Duration
	}{
		{"rpm", Limits{RPM: 60, ITPM: 1e9, OTPM: 1e9}, 10, 10, 60, limitedRequests, time.Second},
		{"itpm", Limits{RPM: 1e6, ITPM: 6000, OTPM: 1e9}, 1000, 10, 6, limitedInput, 10 * time.Second},
		{"otpm", Limits{RPM: 1e6, ITPM: 1e9, OTPM: 600}, 10, 100, 6, limitedOutput, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLane(t, tt.lim, nil)
			for i := range tt.admits {
				if a := l.admit(t0, tt.in, tt.out); !a.ok {
					t.Fatalf("admit #%d refused by %s", i+1, a.limitedBy)
				}
			}
			a := l.admit(t0, tt.in, tt.out)
			if a.ok || a.limitedBy != tt.limitedBy || a.retryAfter != tt.wait {
				t.Fatalf("admit past the limit = %+v, want refused by %s, retry after %v", a, tt.limitedBy, tt.wait)
			}
			if a := l.admit(t0.Add(tt.wait), tt.in, tt.out); !a.ok {
				t.Fatalf("admit after retry-after refused by %s", a.limitedBy)
			}
			if l.stats.Admitted != int64(tt.admits+1) || l.stats.RateLimited != 1 || l.stats.LimitedBy[tt.limitedBy] != 1 {
				t.Errorf("stats = %+v", l.stats)
			}
		})
	}
}

func TestLaneHeaders(t *testing.T) {
	l := testLane(t, Limits{RPM: 30_000, ITPM: 10_000_000, OTPM: 1_000_000}, nil)
	l.admit(t0, 12_345, 600)
	h := http.Header{}
	l.setHeaders(h, t0)
	want := map[string]string{
		"anthropic-ratelimit-requests-limit":          "30000",
		"anthropic-ratelimit-requests-remaining":      "29999",
		"anthropic-ratelimit-requests-reset":          "2026-11-29T12:00:01Z", // 1 request at 500/s: 2 ms, rounded up
		"anthropic-ratelimit-input-tokens-limit":      "10000000",
		"anthropic-ratelimit-input-tokens-remaining":  "9988000", // 9,987,655 to the nearest thousand
		"anthropic-ratelimit-input-tokens-reset":      "2026-11-29T12:00:01Z",
		"anthropic-ratelimit-output-tokens-limit":     "1000000",
		"anthropic-ratelimit-output-tokens-remaining": "999000", // 999,400
		"anthropic-ratelimit-tokens-limit":            "11000000",
		"anthropic-ratelimit-tokens-remaining":        "10987000", // 10,987,055
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q want %q", k, got, v)
		}
	}
	parsed := api.ParseRateLimitHeaders(h)
	for _, lim := range api.Limiters {
		if !parsed.Get(lim).Present {
			t.Errorf("%s headers do not parse back", lim)
		}
	}
}

func TestLaneTimeScaleMultipliesLimits(t *testing.T) {
	l := testLane(t, Limits{RPM: 60, ITPM: 60_000, OTPM: 6_000}, func(c *Config) { c.TimeScale = 10 })
	h := http.Header{}
	l.setHeaders(h, t0)
	if got := h.Get("anthropic-ratelimit-requests-limit"); got != "600" {
		t.Errorf("requests-limit = %s, want 600 (60 RPM × time scale 10)", got)
	}
	for range 600 {
		if !l.admit(t0, 1, 1).ok {
			t.Fatal("a scaled bucket must hold 600 requests")
		}
	}
	a := l.admit(t0, 1, 1)
	if a.ok || a.retryAfter != 100*time.Millisecond {
		t.Fatalf("601st admit = %+v, want refused for 100ms (10 req/s)", a)
	}
	l.setHeaders(h, t0)
	if got := h.Get("anthropic-ratelimit-requests-reset"); got != "2026-11-29T12:01:00.000Z" {
		t.Errorf("scaled reset = %s, want millisecond precision 60 s on", got)
	}
}

func TestLaneBucketWindowLimitsBurst(t *testing.T) {
	l := testLane(t, Limits{RPM: 60}, func(c *Config) { c.BucketWindow = Duration(time.Second) })
	if !l.admit(t0, 0, 0).ok {
		t.Fatal("first admit refused")
	}
	if a := l.admit(t0, 0, 0); a.ok || a.retryAfter != time.Second {
		t.Fatalf("60 RPM with a 1 s window holds one request; second admit = %+v", a)
	}
}

// TestLaneBucketsStartEmpty: a drained world admits at the refill rate
// from its first request.
func TestLaneBucketsStartEmpty(t *testing.T) {
	l := testLane(t, Limits{RPM: 600}, func(c *Config) { c.BucketsStartEmpty = true })
	if a := l.admit(t0, 0, 0); a.ok || a.retryAfter != 100*time.Millisecond {
		t.Fatalf("an empty 600 RPM bucket: %+v, want refused for 0.1 s", a)
	}
	if !l.admit(t0.Add(100*time.Millisecond), 0, 0).ok {
		t.Fatal("after 0.1 s one request fits")
	}
	if a := l.admit(t0.Add(100*time.Millisecond), 0, 0); a.ok {
		t.Fatal("and only one")
	}
}

func TestLaneReserveRefund(t *testing.T) {
	l := testLane(t, Limits{RPM: 1e6, ITPM: 1e9, OTPM: 1000}, nil)
	if !l.admit(t0, 1, 1000).ok { // max_tokens 1000 reserved
		t.Fatal("reserve refused")
	}
	if l.admit(t0, 1, 1).ok {
		t.Fatal("bucket should be empty while the reservation stands")
	}
	l.finish(t0, 900) // it produced 100 tokens
	if got := l.out.remaining(t0); got != 900 {
		t.Fatalf("after refund remaining = %d want 900", got)
	}
	if l.inFlight != 0 {
		t.Fatalf("inFlight = %d after finish", l.inFlight)
	}
}

func TestLaneAcceleration(t *testing.T) {
	l := testLane(t, Limits{RPM: 1e6, ITPM: 1e9, OTPM: 1e9}, func(c *Config) {
		c.Acceleration = Acceleration{Enabled: true, Window: Duration(10 * time.Second), Factor: 4, FloorRPM: 60}
	})
	// The floor allows 1/s over a 10 s window: a burst of 10 passes, the
	// 11th is refused as a sharp increase.
	for i := range 10 {
		if a := l.admit(t0, 1, 1); !a.ok {
			t.Fatalf("admit #%d refused by %s", i+1, a.limitedBy)
		}
	}
	a := l.admit(t0, 1, 1)
	if a.ok || a.limitedBy != limitedAcceleration || a.retryAfter <= 0 {
		t.Fatalf("burst past the floor = %+v, want an acceleration refusal with a wait", a)
	}
	if !l.admit(t0.Add(a.retryAfter+time.Millisecond), 1, 1).ok {
		t.Fatal("admit after the acceleration wait refused")
	}
}

// TestLaneAccelerationLongWindow: the long window sets how fast a rise may
// be. A steady 5/s from idle, past a floor of 1/s, is a rise the factor 4
// allows against a 15 s long window but not against a 200 s one.
func TestLaneAccelerationLongWindow(t *testing.T) {
	refused := func(long float64) int {
		l := testLane(t, Limits{RPM: 1e6, ITPM: 1e9, OTPM: 1e9}, func(c *Config) {
			c.Acceleration = Acceleration{Enabled: true, Window: Duration(10 * time.Second), Factor: 4, FloorRPM: 60, LongWindows: long}
		})
		n := 0
		for i := range 100 {
			if !l.admit(t0.Add(time.Duration(i)*200*time.Millisecond), 1, 1).ok {
				n++
			}
		}
		return n
	}
	if n := refused(1.5); n != 0 {
		t.Errorf("long window 15 s: %d of 100 refused, want none", n)
	}
	if n := refused(20); n == 0 {
		t.Error("long window 200 s: none refused, want the rise refused")
	}
	bad := Default()
	bad.Acceleration = Acceleration{Enabled: true, Window: Duration(time.Second), Factor: 2, LongWindows: 1}
	if bad.Validate() == nil {
		t.Error("long_windows 1 accepted")
	}
}
