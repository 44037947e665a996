package lane

import (
	"testing"
	"time"
)

func TestZZTrace(t *testing.T) {
	w := world{rpm: 12000, depth: 1200, lat: 150 * time.Millisecond, latSpread: 280 * time.Millisecond, lat429: 20 * time.Millisecond, dur: 20 * time.Second, n: 8000,
		accel: accelRule{300 * time.Millisecond, 10, 1.5, 150}}
	last, lastAcc := 0, int64(0)
	w.trace = func(now time.Time, l *Lane, adm int) {
		l.mu.Lock()
		t.Logf("%5.1f s limit %6.1f ansRate %6.1f rampLat %.0f hold %v acc %d rate %.0f level %.0f", now.Sub(t0).Seconds(), l.limit, l.ansRate, l.rampLat, l.holdUntil.After(now), l.stats.Acceleration-lastAcc, float64(adm-last)*2, l.budget.Snapshot(now).Buckets[0].Level)
		lastAcc = l.stats.Acceleration
		l.mu.Unlock()
		last = adm
	}
	w.run(t, Config{Cap: 100})
}
