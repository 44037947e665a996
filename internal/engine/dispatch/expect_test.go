package dispatch

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// TestExpectedWaitIsTheSoonestLane: with nothing admitted lately, the
// expected wait is until the soonest live lane may send — whatever the
// lanes' order — and a dead lane's pause does not count.
func TestExpectedWaitIsTheSoonestLane(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mk := func(pause time.Duration, live bool) *laneState {
		o := &orgState{id: "o"}
		if live {
			o.live.Store(1)
		}
		l := lane.New(lane.Config{Cap: 10}, budget.NewLocal(), t0)
		if pause > 0 {
			tk, _, _ := l.TryAcquire(t0, budget.Demand{1}, 0)
			l.Done(t0, tk, lane.Result{Signal: lane.RateLimited, Reached: true, Answered: true, RetryAfter: pause})
		}
		return &laneState{org: o, pool: api.PoolSonnet4, l: l}
	}
	wait := func(ls ...*laneState) time.Duration {
		d := &Dispatcher{now: func() time.Time { return t0 }, meters: map[api.Pool]*poolMeter{}, laneList: ls}
		return d.ExpectedWait(api.PoolSonnet4)
	}
	if a, b := wait(mk(0, true), mk(30*time.Second, true)), wait(mk(30*time.Second, true), mk(0, true)); a != 0 || b != 0 {
		t.Errorf("a free lane and one paused 30 s: %v and %v by order, want 0 both", a, b)
	}
	if got := wait(mk(30*time.Second, true), mk(10*time.Second, true)); got != 10*time.Second {
		t.Errorf("lanes paused 30 s and 10 s: %v, want the soonest, 10 s", got)
	}
	if got := wait(mk(30*time.Second, true), mk(0, false)); got != 30*time.Second {
		t.Errorf("a paused lane and a dead free one: %v, want 30 s", got)
	}
}
