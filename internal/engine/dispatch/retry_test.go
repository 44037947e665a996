package dispatch

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := RetryPolicy{}
	p.defaults()
	const lat = 2 * time.Second // a quarter: the 500 ms base
	tests := []struct {
		name    string
		n       int
		hint    time.Duration
		hasHint bool
		u       float64
		want    time.Duration
	}{
		{"first retry, top of range", 1, 0, false, 0.999999, 499999500 * time.Nanosecond},
		{"first retry, bottom", 1, 0, false, 0, 0},
		{"third retry halves 2s", 3, 0, false, 0.5, time.Second},
		{"capped at MaxBackoff", 20, 0, false, 0.5, 15 * time.Second},
		{"server hint wins", 1, 10 * time.Second, true, 0.5, 10*time.Second + 500*time.Millisecond},
		{"jitter longer than hint wins", 10, time.Second, true, 0.9, 27 * time.Second},
		{"zero hint still jitters", 2, 0, true, 0.5, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Backoff(tt.n, lat, tt.hint, tt.hasHint, tt.u); got != tt.want {
				t.Errorf("Backoff(%d, %v, %v, %v) = %v want %v", tt.n, tt.hint, tt.hasHint, tt.u, got, tt.want)
			}
		})
	}
}

// TestBackoffFollowsLatency: the default base is a quarter of the lane's
// latency, within [MinBase, MaxBase]; an explicit base is kept.
func TestBackoffFollowsLatency(t *testing.T) {
	p := RetryPolicy{}
	p.defaults()
	for _, tt := range []struct{ lat, want time.Duration }{
		{280 * time.Millisecond, 70 * time.Millisecond},
		{2800 * time.Millisecond, MaxBase},
		{time.Millisecond, MinBase},
	} {
		if got := p.Backoff(1, tt.lat, 0, false, 0.999999999); got < tt.want*99/100 || got > tt.want {
			t.Errorf("lat %v: first backoff ceiling %v, want %v", tt.lat, got, tt.want)
		}
	}
	p.BaseBackoff = 3 * time.Millisecond
	if got := p.Backoff(2, time.Hour, 0, false, 0.5); got != 3*time.Millisecond {
		t.Errorf("explicit base: %v", got)
	}
}
