package sim

import (
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// TestStorm sends one call per 100 simulated ms for 3 simulated minutes
// into a world with a p529 0.3 storm from minute 1 to minute 2: inside it
// about 30 % of calls are 529 overloaded_error, outside none; 529s are not
// admitted (they cost no budget) and are counted as overloaded. At K = 10
// the window is a tenth as long in real time and, with the same seed, the
// same calls are overloaded.
func TestStorm(t *testing.T) {
	const p = 0.3
	stormed := map[float64]int{}
	for _, k := range []float64{1, 10} {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, func(c *Config) {
				instant(c)
				c.TimeScale = k
				c.Faults.Storms = []Storm{{Start: Duration(time.Minute), Length: Duration(time.Minute), P529: p}}
			})
			scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) / k) }
			start := time.Now()
			var inside, in529, outside, out529, ok int
			for i := range 1800 {
				el := time.Since(start)
				rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, fmt.Sprint(i)))
				in := el >= scaled(time.Minute) && el < scaled(2*time.Minute)
				if in {
					inside++
				} else {
					outside++
				}
				switch rec.Code {
				case 200:
					ok++
				case api.StatusOverloaded:
					checkError(t, rec, api.StatusOverloaded, api.ErrOverloaded)
					if rl := api.ParseRateLimitHeaders(rec.Header()); !rl.Requests.Present {
						t.Fatal("a storm 529 must carry the rate-limit headers")
					}
					if in {
						in529++
					} else {
						out529++
					}
				default:
					t.Fatalf("call %d at %v: status %d %s", i, el, rec.Code, rec.Body)
				}
				time.Sleep(scaled(100 * time.Millisecond))
			}
			if inside != 600 || outside != 1200 {
				t.Fatalf("K=%g: %d calls inside the storm, %d outside; want 600 and 1200", k, inside, outside)
			}
			if out529 != 0 {
				t.Errorf("K=%g: %d 529s outside the storm", k, out529)
			}
			if share := float64(in529) / float64(inside); math.Abs(share-p) > 0.06 {
				t.Errorf("K=%g: %.3f of calls in the storm were 529, want %.2f ± 0.06", k, share, p)
			}
			st := s.Stats().Orgs["high_prio"].Pools[api.PoolSonnet4]
			if st.Overloaded != int64(in529) || st.Admitted != int64(ok) || st.RateLimited != 0 {
				t.Errorf("K=%g: stats %d overloaded, %d admitted; want %d, %d", k, st.Overloaded, st.Admitted, in529, ok)
			}
			t.Logf("K=%g: %d of %d calls in the storm were 529", k, in529, inside)
			stormed[k] = in529
		})
	}
	if stormed[1] != stormed[10] {
		t.Errorf("the same seed overloaded %d calls at K=1, %d at K=10", stormed[1], stormed[10])
	}
}

// TestStormsOverlap: two overlapping storms combine as independent draws,
// 1 − (1 − 0.5)(1 − 0.5) = 0.75 where both apply, and a storm of p529 1
// overloads every call.
func TestStormsOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.Faults.Storms = []Storm{
				{Start: 0, Length: Duration(2 * time.Minute), P529: 0.5},
				{Start: Duration(time.Minute), Length: Duration(2 * time.Minute), P529: 0.5},
				{Start: Duration(10 * time.Minute), Length: Duration(time.Second), P529: 1},
			}
		})
		w := s.w.Load()
		for _, tt := range []struct {
			at   time.Duration
			want float64
		}{{0, 0.5}, {90 * time.Second, 0.75}, {150 * time.Second, 0.5}, {3 * time.Minute, 0}, {10 * time.Minute, 1}, {10*time.Minute + time.Second, 0}} {
			if got := w.stormP529(w.started.Add(tt.at)); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("storm p529 at %v = %v, want %v", tt.at, got, tt.want)
			}
		}
		time.Sleep(10 * time.Minute)
		checkError(t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, "x")), api.StatusOverloaded, api.ErrOverloaded)
	})
}
