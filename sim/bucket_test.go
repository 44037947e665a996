package sim

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestBucketSteps drives one bucket (capacity 10, 1 token/s) through a
// table of operations at fixed instants, in the style of x/time/rate's tests.
func TestBucketSteps(t *testing.T) {
	b := newBucket(10, 1, t0)
	type step struct {
		name      string
		t         time.Duration
		op        string // fits, take, give
		n         float64
		wantFits  bool
		wantLevel int64
		wantWait  time.Duration
		wantReset time.Duration
	}
	steps := []step{
		{"full bucket fits its capacity", 0, "fits", 10, true, 10, 0, 0},
		{"take 7", 0, "take", 7, true, 3, 0, 7 * time.Second},
		{"4 does not fit yet", 0, "fits", 4, false, 3, time.Second, 7 * time.Second},
		{"after 1s it does", time.Second, "fits", 4, true, 4, 0, 6 * time.Second},
		{"refill caps at capacity", time.Minute, "fits", 10, true, 10, 0, 0},
		{"oversized fits a full bucket", time.Minute, "fits", 25, true, 10, 0, 0},
		{"and drives it into debt", time.Minute, "take", 25, true, 0, 0, 25 * time.Second},
		{"debt refills from below", time.Minute + 10*time.Second, "fits", 1, false, 0, 6 * time.Second, 15 * time.Second},
		{"give never exceeds capacity", time.Minute + 10*time.Second, "give", 100, true, 10, 0, 0},
	}
	for _, s := range steps {
		now := at(s.t)
		switch s.op {
		case "take":
			b.take(s.n, now)
		case "give":
			b.give(s.n, now)
		case "fits":
			if got := b.fits(s.n, now); got != s.wantFits {
				t.Errorf("%s: fits(%v, %v) = %v want %v", s.name, s.n, s.t, got, s.wantFits)
			}
			if got := b.wait(s.n, now); got != s.wantWait {
				t.Errorf("%s: wait(%v) = %v want %v", s.name, s.n, got, s.wantWait)
			}
		}
		if got := b.remaining(now); got != s.wantLevel {
			t.Errorf("%s: remaining = %d want %d", s.name, got, s.wantLevel)
		}
		if got := b.resetAt(now).Sub(now); got != s.wantReset {
			t.Errorf("%s: reset in %v want %v", s.name, got, s.wantReset)
		}
	}
}

func TestBucketUnlimited(t *testing.T) {
	b := newBucket(0, 0, t0)
	b.take(1e9, t0)
	if !b.fits(1e12, t0) || b.wait(1e12, t0) != 0 {
		t.Fatal("a zero-limit bucket must be unlimited")
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1200000: "1,200,000", 30000: "30,000"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q want %q", n, got, want)
		}
	}
}
