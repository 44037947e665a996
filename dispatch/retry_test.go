package dispatch

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := RetryPolicy{}
	p.defaults()
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
			if got := p.Backoff(tt.n, tt.hint, tt.hasHint, tt.u); got != tt.want {
				t.Errorf("Backoff(%d, %v, %v, %v) = %v want %v", tt.n, tt.hint, tt.hasHint, tt.u, got, tt.want)
			}
		})
	}
}
