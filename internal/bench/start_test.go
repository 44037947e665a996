package bench

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/sim"
)

func TestDurableLogTo90(t *testing.T) {
	t0 := time.Unix(0, 0)
	var d durableLog
	// 10/s for 5 s, then 100/s: the window of 1 s first holds ≥ 90 after
	// the rise has lasted 0.9 s.
	n := int64(0)
	for i := range 50 {
		n++
		d.t, d.n = append(d.t, t0.Add(time.Duration(i)*100*time.Millisecond)), append(d.n, n)
	}
	for i := range 200 {
		n++
		d.t, d.n = append(d.t, t0.Add(5*time.Second+time.Duration(i)*10*time.Millisecond)), append(d.n, n)
	}
	got := d.to90(90, time.Second)
	if got < 5800*time.Millisecond || got > 6000*time.Millisecond {
		t.Fatalf("to90 = %v, want 5.8–6 s", got)
	}
	if got := d.to90(1000, time.Second); got != 0 {
		t.Fatalf("to90 of a rate never reached = %v, want 0", got)
	}
}

func TestIdealWall(t *testing.T) {
	cfg := sim.Default()
	cfg.TimeScale, cfg.BucketWindow = 1, sim.Duration(time.Minute)
	binds := []orgBinding{{org: "a", what: "RPM", rate: 10}}
	lat := time.Second
	// Empty buckets: n ÷ rate, plus a latency.
	cfg.BucketsStartEmpty = true
	if got := idealWall(cfg, binds, 100, 1000, lat); got.Round(time.Millisecond) != 101*time.Second {
		t.Fatalf("empty: %v, want 101 s", got)
	}
	// Full 600-request bucket at a cap of 100/s: drained in 600 ÷ 90 s
	// at 100/s, then 10/s.
	cfg.BucketsStartEmpty = false
	drain := 600.0 / 90
	want := 1 + drain + (1000-100*drain)/10
	if got := idealWall(cfg, binds, 100, 1000, lat).Seconds(); got < want-0.01 || got > want+0.01 {
		t.Fatalf("full: %.3f s, want %.3f", got, want)
	}
}
