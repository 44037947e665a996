package dispatch

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
)

// TestWarmNotShortenedByAnOlderAnswer: answers end out of the order they
// were sent; an older send's answer ending late must not pull a prefix's
// warm time back before a later send's refresh.
func TestWarmNotShortenedByAnOlderAnswer(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ls := &laneState{}
	req := func() *item { return &item{req: &Request{CachePrefix: 1, CacheTTL: 5 * time.Minute}} }
	hit := &client.Outcome{Class: client.OK, Usage: api.Usage{CacheReadInputTokens: 3000}}
	writer, late, later := req(), req(), req()
	ls.prefixSent(writer, t0)
	ls.prefixDone(writer, hit, t0) // warm until 5 m
	ls.prefixSent(late, t0.Add(time.Minute))
	ls.prefixSent(later, t0.Add(4*time.Minute))
	ls.prefixDone(later, hit, t0.Add(4*time.Minute)) // refreshed: warm until 9 m
	ls.prefixDone(late, hit, t0.Add(time.Minute))    // sent at 1 m, ends now
	ls.prefixSent(req(), t0.Add(7*time.Minute))
	if st := ls.prefixes[1]; st.writer != nil {
		t.Error("a new writer at 7 m, while the entry is warm until 9 m")
	}
	if other := req(); ls.prefixHeld(other) {
		t.Error("held at 7 m: the older answer shortened the refresh to 6 m")
	}
}
