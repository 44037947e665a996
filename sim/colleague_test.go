package sim

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// colleagueWorld: high_prio's Sonnet lane at 600 RPM (10/s at K = 1), with
// a colleague sending 30 % of that, small enough in tokens that only RPM
// can refuse it.
func colleagueWorld(k float64) func(*Config) {
	return func(c *Config) {
		instant(c)
		c.TimeScale = k
		c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 600, ITPM: 1_000_000, OTPM: 100_000}
		c.Colleagues = []Colleague{{Org: "high_prio", Model: sonnet, Share: 0.3, InputTokens: 2000, OutputTokens: 200}}
	}
}

// simStats reads GET /_sim/stats, the way a benchmark does.
func simStats(t *testing.T, s *Server) LaneStats {
	t.Helper()
	rec := request(t, s, "GET", "/_sim/stats", "", nil)
	if rec.Code != 200 {
		t.Fatalf("stats: %d", rec.Code)
	}
	ls, ok := decode[Stats](t, rec).Orgs["high_prio"].Pools[api.PoolSonnet4]
	if !ok {
		t.Fatal("a lane with a colleague must exist from the world's start")
	}
	return ls
}

// TestColleagueIdleLane: on a lane sluice never calls, a 0.3 share of
// 600 RPM is admitted about 0.3 × 600 × 10 = 1,800 times in 10 simulated
// minutes, never refused, and none of it shows in sluice's own counters.
// GET /_sim/stats alone advances it. At K = 10 the same seed gives the same
// counts in a tenth of the time.
func TestColleagueIdleLane(t *testing.T) {
	counts := map[float64][2]int64{}
	for _, k := range []float64{1, 10} {
		synctest.Test(t, func(t *testing.T) {
			s := newTestServer(t, colleagueWorld(k))
			scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) / k) }
			near := func(got int64, want float64) bool { return math.Abs(float64(got)-want) <= 4*math.Sqrt(want) }
			time.Sleep(scaled(5 * time.Minute))
			half := simStats(t, s)
			time.Sleep(scaled(5 * time.Minute))
			ls := simStats(t, s)
			t.Logf("K=%g: colleague admitted %d after 5 min, %d after 10 min", k, half.ColleagueAdmitted, ls.ColleagueAdmitted)
			if !near(half.ColleagueAdmitted, 900) || !near(ls.ColleagueAdmitted, 1800) {
				t.Errorf("K=%g: colleague admitted %d after 5 min, %d after 10; want about 900 and 1800", k, half.ColleagueAdmitted, ls.ColleagueAdmitted)
			}
			if ls.ColleagueLimited != 0 {
				t.Errorf("K=%g: an idle lane refused the colleague %d times", k, ls.ColleagueLimited)
			}
			if ls.Admitted != 0 || ls.RateLimited != 0 || len(ls.LimitedBy) != 0 || ls.InputTokens != 0 || ls.OutputTokens != 0 || len(ls.AdmittedPerSecond) != 0 || ls.PeakConcurrency != 0 {
				t.Errorf("K=%g: colleague traffic leaked into sluice's counters: %+v", k, ls)
			}
			counts[k] = [2]int64{ls.ColleagueAdmitted, ls.ColleagueLimited}
		})
	}
	if counts[1] != counts[10] {
		t.Errorf("colleague (admitted, limited) = %v at K=1, %v at K=10; want the same", counts[1], counts[10])
	}
}

// TestColleagueSaturatedLane: a test client sends 4 × the lane's RPM for
// 2 minutes. The colleague's arrivals then often find the request bucket
// empty and are dropped; the two share one bucket, so together they are
// admitted no more than it holds plus its refill (600 + 10/s × 120 s), and
// sluice's counters count only the client's calls.
func TestColleagueSaturatedLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, colleagueWorld(1))
		var ok, limited int64
		for range 4800 { // 40/s for 120 s
			switch rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, "x")); rec.Code {
			case 200:
				ok++
			case 429:
				limited++
			default:
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			time.Sleep(25 * time.Millisecond)
		}
		ls := simStats(t, s)
		t.Logf("client: %d admitted, %d limited; colleague: %d admitted, %d limited", ok, limited, ls.ColleagueAdmitted, ls.ColleagueLimited)
		if ls.ColleagueLimited == 0 || ls.ColleagueAdmitted == 0 {
			t.Errorf("a saturated lane should refuse some of the colleague's arrivals and admit others: %d admitted, %d limited", ls.ColleagueAdmitted, ls.ColleagueLimited)
		}
		if arrivals := ls.ColleagueAdmitted + ls.ColleagueLimited; math.Abs(float64(arrivals)-360) > 4*math.Sqrt(360) {
			t.Errorf("colleague arrivals = %d, want about 0.3 × 10/s × 120 s = 360 whatever the lane's state", arrivals)
		}
		var perSecond int64
		for _, n := range ls.AdmittedPerSecond {
			perSecond += n
		}
		if ls.Admitted != ok || ls.RateLimited != limited || ls.LimitedBy[limitedRequests] != limited || perSecond != ok {
			t.Errorf("sluice's counters must hold only the client's calls (%d admitted, %d limited): %+v", ok, limited, ls)
		}
		// The bucket starts with 600 and refills 10/s: one budget for both.
		if total := ok + ls.ColleagueAdmitted; total < 1790 || total > 1801 {
			t.Errorf("client %d + colleague %d = %d admitted, want the bucket's 600 + 1200 refill", ok, ls.ColleagueAdmitted, total)
		}
	})
}

// TestColleagueTokensAndTwoColleagues: a colleague's input tokens are
// charged to ITPM (here it is what refuses it), and two colleagues on one
// lane are processed together in time order.
func TestColleagueTokensAndTwoColleagues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, func(c *Config) {
			c.Orgs[0].Limits[api.PoolSonnet4] = Limits{RPM: 600, ITPM: 60_000, OTPM: 1_000_000}
			// Each wants 0.5 × 10/s × 1,000 = 5,000 input tokens a second;
			// the bucket refills 1,000 a second.
			c.Colleagues = []Colleague{
				{Org: "high_prio", Model: sonnet, Share: 0.5, InputTokens: 1000},
				{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.5, InputTokens: 1000},
			}
		})
		time.Sleep(10 * time.Minute)
		ls := simStats(t, s)
		t.Logf("colleagues: %d admitted, %d limited", ls.ColleagueAdmitted, ls.ColleagueLimited)
		// 60 fit at once, then 1 a second: 60 + 600 over 10 minutes.
		if ls.ColleagueAdmitted < 655 || ls.ColleagueAdmitted > 661 {
			t.Errorf("colleagues admitted %d, want the ITPM budget of 660", ls.ColleagueAdmitted)
		}
		if arrivals := ls.ColleagueAdmitted + ls.ColleagueLimited; math.Abs(float64(arrivals)-6000) > 4*math.Sqrt(6000) {
			t.Errorf("arrivals = %d, want about 2 × 5/s × 600 s = 6000", arrivals)
		}
		// They take 1,000 whenever 1,000 have refilled, so the bucket never
		// holds the 1,500 a call of sluice's needs.
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, msgBody(sonnet, 8, strings.Repeat("word ", 1500)))
		if e := checkError(t, rec, 429, api.ErrRateLimit); !strings.Contains(e["message"].(string), "input tokens") {
			t.Errorf("sluice's call was refused by %q, want the ITPM limit the colleagues spent", e["message"])
		}
	})
}

// TestColleagueResetRestarts: a reset starts the colleague over with the
// same seed, so the same time after it the counts repeat.
func TestColleagueResetRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, colleagueWorld(1))
		time.Sleep(time.Minute)
		first := simStats(t, s)
		s.Reset()
		time.Sleep(time.Minute)
		again := simStats(t, s)
		if first.ColleagueAdmitted == 0 || first.ColleagueAdmitted != again.ColleagueAdmitted {
			t.Errorf("colleague admitted %d in the first minute, %d in the minute after a reset", first.ColleagueAdmitted, again.ColleagueAdmitted)
		}
	})
}

// TestColleagueTinyShare: a share so small that its gaps would overflow
// time.Duration still yields forward gaps, so catching up ends.
func TestColleagueTinyShare(t *testing.T) {
	l := testLane(t, Limits{RPM: 1}, nil)
	l.addColleague(&Colleague{Share: 1e-300}, colleagueRNG(1, 0), t0)
	for range 1000 {
		if g := l.colleagues[0].gap(); g <= 0 {
			t.Fatalf("gap = %v, want > 0", g)
		}
	}
	l.setHeaders(http.Header{}, t0.Add(1000*time.Hour))
	if l.stats.ColleagueAdmitted+l.stats.ColleagueLimited != 0 {
		t.Fatalf("a share of 1e-300 arrived: %+v", l.stats)
	}
}
