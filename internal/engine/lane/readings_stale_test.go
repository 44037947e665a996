package lane

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// TestReadingsStaleHeaders: streamed answers, whose headers (Date, reset,
// remaining) are those of the stream's start while the lane hears Done at
// its end, 1–20 s later. Read against the answer's arrival, the server's
// clock looks behind by up to the longest latency and a 1 s bucket is
// learned 19× too deep: the reserve exceeds the bucket and the lane stalls
// at 0.1 of the limit. The depth must never exceed the true one.
func TestReadingsStaleHeaders(t *testing.T) {
	base := world{rpm: 1200, depth: 20, lat: time.Second, lat429: 20 * time.Millisecond, dur: 180 * time.Second}
	for _, c := range []struct {
		name string
		mod  func(*world)
	}{
		{"1 s bucket, stream headers, 1 s latency", func(w *world) { w.stale = true }},
		{"1 s bucket, stream headers, 1-20 s latency", func(w *world) { w.stale = true; w.latSpread = 19 * time.Second }},
		{"1 s bucket, stream headers, 1-20 s, coarse", func(w *world) { w.stale = true; w.latSpread = 19 * time.Second; w.reset = resetCeil }},
		{"10 s bucket, stream headers, 1-20 s", func(w *world) { w.depth = 200; w.stale = true; w.latSpread = 19 * time.Second }},
		{"1 s bucket, answer-time headers, 1-20 s", func(w *world) { w.latSpread = 19 * time.Second }},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := base
			c.mod(&w)
			o := w.run(t, Config{Cap: 400})
			o.report(t, c.name)
			b := o.st.Buckets[budget.Requests]
			if b.Depth > w.depth*1.001 {
				t.Errorf("learned depth %.1f above the true %.0f", b.Depth, w.depth)
			}
			if e := o.eff(); e < 0.95 {
				t.Errorf("efficiency %.3f < 0.95", e)
			}
			if s := o.share429(); s > 0.01 {
				t.Errorf("429 share %.2f%%", 100*s)
			}
		})
	}
}

// TestReadingsStaleHeadersMinute: the documented per-minute bucket,
// drained at the start, behind streamed answers of 1–20 s.
func TestReadingsStaleHeadersMinute(t *testing.T) {
	w := world{rpm: 1200, depth: 1200, lat: time.Second, latSpread: 19 * time.Second, lat429: 20 * time.Millisecond, dur: 300 * time.Second, stale: true, startEmpty: true}
	o := w.run(t, Config{Cap: 400})
	o.report(t, "60 s bucket, stream headers, 1-20 s")
	if e := o.eff(); e < 0.95 {
		t.Errorf("efficiency %.3f < 0.95", e)
	}
}

// TestReadingsAdmissionTimeHeaders: a server that computes remaining and
// reset when it admits a request but dates the answer when it sends it.
func TestReadingsAdmissionTimeHeaders(t *testing.T) {
	w := world{rpm: 1200, depth: 20, lat: time.Second, latSpread: 19 * time.Second, lat429: 20 * time.Millisecond, dur: 180 * time.Second, staleLimits: true}
	o := w.run(t, Config{Cap: 400})
	o.report(t, "1 s bucket, admission-time limits, Date at answer, 1-20 s")
	if b := o.st.Buckets[budget.Requests]; b.Depth > w.depth*1.001 {
		t.Errorf("learned depth %.1f above the true %.0f", b.Depth, w.depth)
	}
	if e := o.eff(); e < 0.95 {
		t.Errorf("efficiency %.3f < 0.95", e)
	}
}
