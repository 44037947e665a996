package lane

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// TestOrgLimited: a 429 naming the organization's limit across all
// models is congestion of every lane of it: the lane that met it and, told
// by OrgLimited, the others each pause for the retry-after and take the
// episode's one cut — even when their own buckets show room — and an
// attempt sent before that cut is the same episode.
func TestOrgLimited(t *testing.T) {
	cfg := Config{Cap: 100, Start: 20}
	met, other := warmLane(cfg), warmLane(cfg)
	now := round(t, met, t0, Result{Signal: Clean})
	now = round(t, other, now, Result{Signal: Clean})
	before := other.Limit(now)

	tk, _, _ := met.TryAcquire(now, one, 100)
	end := now.Add(rtt)
	met.Done(end, tk, Result{Signal: RateLimited, Reached: true, Answered: true, Latency: rtt, RetryAfter: 2 * time.Second,
		Named: api.NamedLimit{Limiter: api.LimiterRequests, PerMinute: 6000, Org: true}})
	other.OrgLimited(end, now, 2*time.Second)

	for name, l := range map[string]*Lane{"met": met, "other": other} {
		st := l.State(end)
		if st.Stats.OrgLimited != 1 || st.Stats.Decreases != 1 || !st.Paused || st.Stats.Explained != 0 {
			t.Errorf("%s: %+v", name, st.Stats)
		}
		// The named figure is the organization's, not a bucket of the lane.
		if st.Named[0] || st.Named[1] {
			t.Errorf("%s: the org-wide figure was taken for the lane's own limit", name)
		}
	}
	if after := other.Limit(end.Add(3 * time.Second)); after >= before {
		t.Errorf("the other lane's limit %d → %d: not cut", before, after)
	}
	// An attempt sent before the cut: the same episode, no second cut.
	other.OrgLimited(end.Add(10*time.Millisecond), now, time.Second)
	if st := other.State(end); st.Stats.Decreases != 1 || st.Stats.OrgLimited != 2 {
		t.Errorf("same episode: %+v", st.Stats)
	}
}
