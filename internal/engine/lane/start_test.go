package lane

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// reqHeaders is an answer's requests headers: limit per minute, remaining,
// full again after fullIn.
func reqHeaders(now time.Time, limit, rem int64, fullIn time.Duration) api.RateLimitHeaders {
	return api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: limit, Remaining: rem, Reset: now.Add(fullIn), ResetFine: true}}
}

// firstAnswer answers a lane's header probe with h at t0 + rtt.
func firstAnswer(t *testing.T, l *Lane, h api.RateLimitHeaders) time.Time {
	t.Helper()
	tk := tkAt(t, l, t0)
	now := t0.Add(rtt)
	l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: h, Date: now})
	return now
}

// TestStartFromTheHeaders: the first answer sets the limit to what one
// latency of its buckets pays for, within the cap and not under Start; the
// start lets go a second of the limit at once and then the limit's rate;
// full buckets lift the reserve until anyone else's use shows.
func TestStartFromTheHeaders(t *testing.T) {
	now := t0.Add(rtt)
	for _, c := range []struct {
		name       string
		h          api.RateLimitHeaders
		want       [3]int // the limit at the first answer, a second and five seconds later
		wantShared bool
	}{
		{"full, 1 s of the limit under the cap", reqHeaders(now, 1200, 1199, 50*time.Millisecond), [3]int{20, 40, 100}, false},
		{"full, the cap under 1 s of the limit", reqHeaders(now, 60000, 59999, time.Millisecond), [3]int{100, 100, 100}, false},
		{"full, a second of the limit under Start", reqHeaders(now, 60, 59, time.Second), [3]int{1, 2, 6}, false},
		{"half full", reqHeaders(now, 1200, 10, 30*time.Second), [3]int{12, 12, 12}, true},
		{"drained by others", reqHeaders(now, 1200, 0, time.Minute), [3]int{12, 12, 12}, true},
	} {
		l := newLane(Config{Cap: 100, Start: 12})
		firstAnswer(t, l, c.h)
		for i, d := range []time.Duration{0, time.Second, 5 * time.Second} {
			if got := l.Limit(now.Add(d)); got != c.want[i] {
				t.Errorf("%s: limit %v after the first answer %d, want %d", c.name, d, got, c.want[i])
			}
		}
		l.mu.Lock()
		res := l.reserve()
		l.mu.Unlock()
		if shared := res > 0; shared != c.wantShared {
			t.Errorf("%s: reserve %g, want it kept: %v", c.name, res, c.wantShared)
		}
	}
	// Anyone else's use ends the exemption: a requests remaining below
	// what the lane's own spending explains.
	l := newLane(Config{Cap: 100, Start: 12})
	now = firstAnswer(t, l, reqHeaders(now, 1200, 1199, 50*time.Millisecond))
	tk := tkAt(t, l, now)
	now = now.Add(rtt)
	l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: reqHeaders(now, 1200, 1100, 5*time.Second), Date: now})
	l.mu.Lock()
	res := l.reserve()
	l.mu.Unlock()
	if res != 0.15 {
		t.Errorf("after a colleague's use the reserve is %g, want 0.15", res)
	}
	// No headers: Start.
	l = newLane(Config{Cap: 100, Start: 12})
	firstAnswer(t, l, api.RateLimitHeaders{})
	if got := l.Limit(now); got != 12 {
		t.Errorf("no headers: limit %d, want Start", got)
	}
}

// TestAccelerationHoldsTheRate: a 429 naming nothing whose headers show
// room, during the lane's ramp, holds the limit at the rate the server
// admitted (at most 0.9 of the one it was sent under) for holdLatencies, halves no depth, and the ramp resumes; a
// 429 like it while the rate is held is a shorter interval's, and halves
// the depth.
func TestAccelerationHoldsTheRate(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	room := func(now time.Time) Result {
		return Result{Reached: true, Latency: rtt, Limits: reqHeaders(now, 12000, 11000, 5*time.Second), Date: now}
	}
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 12000, 11999, time.Millisecond))
	l.mu.Lock()
	l.limit, l.startRate = 200, 0 // a ramp from 200 (the start is TestStartFromTheHeaders')
	l.mu.Unlock()
	r := room(now.Add(rtt))
	r.Signal = Clean
	now = round(t, l, now, r) // clean with room: ×(1 + ln 2)
	grown := l.Limit(now)
	if grown < 330 || grown > 345 {
		t.Fatalf("after a clean round %d, want ≈ 338", grown)
	}
	depth := l.State(now).Buckets[budget.Requests].Depth
	tk := tkAt(t, l, now)
	now = now.Add(rtt)
	r = room(now)
	r.Signal = RateLimited
	l.Done(now, tk, r)
	if got := l.Limit(now); got != 1 {
		t.Fatalf("at the 429 the limit lets %d go, want 1: the held limit comes back over a latency", got)
	}
	held := l.Limit(now.Add(rtt))
	// The last latency's answers came at 200 a round trip: what the server
	// admitted, under 0.9 × the limit the refused attempt was sent under.
	if want := min(int(0.9*float64(grown)), 200); held != want {
		t.Fatalf("after an acceleration 429 the limit is %d, want %d (the rate answers came at)", held, want)
	}
	st := l.State(now)
	if st.Stats.Acceleration != 1 || st.Buckets[budget.Requests].Depth < depth {
		t.Fatalf("acceleration %d, depth %g → %g: want 1 and the depth kept", st.Stats.Acceleration, depth, st.Buckets[budget.Requests].Depth)
	}
	for range holdLatencies - 1 { // the hold: clean rounds, no growth
		r = room(now.Add(rtt))
		r.Signal = Clean
		now = round(t, l, now, r)
	}
	if got := l.Limit(now); got != held {
		t.Fatalf("during the hold the limit moved to %d from %d", got, held)
	}
	// A 429 at the held rate, 1,000 a second where the headers' limit
	// refills 200: not acceleration; the shorter interval's rule halves
	// the depth.
	tk = tkAt(t, l, now)
	now = now.Add(rtt)
	r = room(now)
	r.Signal = RateLimited
	l.Done(now, tk, r)
	if st := l.State(now); st.Stats.Acceleration != 1 || st.Buckets[budget.Requests].Depth > depth/2+1 {
		t.Fatalf("a 429 at the held rate: acceleration %d, depth %g (was %g): want the depth halved", st.Stats.Acceleration, st.Buckets[budget.Requests].Depth, depth)
	}
	// The ramp that resumes after the hold is half as fast.
	l.mu.Lock()
	rl, until := l.rampLat, l.holdUntil
	l.mu.Unlock()
	if rl != 2*RampDoublingLatencies || until.After(now) {
		t.Fatalf("after the hold: %g latencies per doubling, hold until %v (now %v)", rl, until.Sub(t0), now.Sub(t0))
	}
}

// TestAccelerationHoldsWhatWasAdmitted: when answers came slower than the
// limit (the server admitted less than the lane sent), the hold is at the
// rate they came at; a 429 at about that rate after the hold is not read
// as acceleration, one after the admitted rate rose is.
func TestAccelerationHoldsWhatWasAdmitted(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 120000, 119999, time.Millisecond))
	l.mu.Lock()
	l.limit, l.startRate, l.ansRate, l.latency = 200, 0, 50, rtt.Seconds() // answers at 50/s: 10 in flight's worth
	l.mu.Unlock()
	limited := func(now time.Time) {
		t.Helper()
		tk := tkAt(t, l, now)
		r := Result{Signal: RateLimited, Reached: true, Latency: rtt, Limits: reqHeaders(now.Add(rtt), 120000, 110000, 5*time.Second), Date: now.Add(rtt)}
		l.Done(now.Add(rtt), tk, r)
	}
	limited(now)
	now = now.Add(rtt)
	if got := l.Limit(now.Add(rtt)); got != 10 {
		t.Fatalf("held at %d, want 10 (50 answers/s × 0.2 s)", got)
	}
	// At the held limit, after the hold, 50 a second where the limit
	// refills 2,000: no bucket of that limit a second deep refuses it, so
	// it is acceleration still — held lower, and the ramp not slowed
	// again (the rate did not rise since the last hold).
	l.mu.Lock()
	rl := l.rampLat
	l.mu.Unlock()
	now = now.Add(holdLatencies * rtt)
	limited(now)
	now = now.Add(rtt)
	if st := l.State(now).Stats; st.Acceleration != 2 {
		t.Fatalf("a 429 at the held limit, far under the headers' limit: acceleration %d, want 2", st.Acceleration)
	}
	l.mu.Lock()
	lim, rl2 := l.limit, l.rampLat
	l.mu.Unlock()
	if lim != 9 || rl2 != rl {
		t.Fatalf("after the second hold: limit %g (want 0.9 × 10), %g latencies a doubling (want %g: no rise since)", lim, rl2, rl)
	}
	// The admitted rate rose a fifth: acceleration again, and the ramp
	// after it half as fast.
	l.mu.Lock()
	l.limit, l.riseAt, l.pausedUntil, l.ansRate, l.startRate = 30, now.Add(time.Millisecond), time.Time{}, 60, 0
	l.mu.Unlock()
	now = now.Add(rtt)
	limited(now)
	if st := l.State(now.Add(rtt)).Stats; st.Acceleration != 3 {
		t.Fatalf("a 429 after a rise above the held limit: acceleration %d, want 3", st.Acceleration)
	}
	l.mu.Lock()
	rl2 = l.rampLat
	l.mu.Unlock()
	if rl2 != 2*rl {
		t.Fatalf("after a hold that followed a rise: %g latencies a doubling, want %g", rl2, 2*rl)
	}
}

// TestColdStartReserveOutlivesStaleHeaders: during the initial burst, an
// answer's requests remaining under the lane's model by no more than the
// refill since its send (and a request of rounding) keeps the cold start's
// exemption from the reserve — the headers may be that old; a few
// requests more than that ends it.
func TestColdStartReserveOutlivesStaleHeaders(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12})
	tk := tkAt(t, l, t0)
	now := t0.Add(3 * time.Second) // a mean latency of 3 s: the burst lasts that long
	l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: 3 * time.Second, Limits: reqHeaders(now, 1200, 1199, 50*time.Millisecond), Date: now})
	reserve := func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.reserve()
	}
	answer := func(age time.Duration, under float64) {
		t.Helper()
		tk := tkAt(t, l, now)
		now = now.Add(age)
		level := l.State(now).Buckets[budget.Requests].Level
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: age, Limits: reqHeaders(now, 1200, int64(level-under), 10*time.Second), Date: now})
	}
	answer(time.Second, 15) // 20 requests of refill in its second
	if r := reserve(); r != 0 {
		t.Fatalf("headers a second old, 15 under the model: reserve %g, want still none", r)
	}
	answer(10*time.Millisecond, 5)
	if r := reserve(); r != 0.15 {
		t.Fatalf("5 under the model 10 ms after the send: reserve %g, want 0.15", r)
	}
}

// TestColdStartReserveOnlyForTheInitialBurst: with no sign of anyone
// else's use, the exemption from the reserve still ends one mean latency
// after the first answer — a colleague refused by a bucket the lane keeps
// empty uses nothing, so its refusals show in no header the lane reads.
func TestColdStartReserveOnlyForTheInitialBurst(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 1200, 1199, 50*time.Millisecond))
	reserve := func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.reserve()
	}
	answer := func(after time.Duration) {
		t.Helper()
		tk := tkAt(t, l, now)
		now = now.Add(after)
		level := l.State(now).Buckets[budget.Requests].Level
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: reqHeaders(now, 1200, int64(level), 10*time.Second), Date: now})
	}
	answer(rtt / 2)
	if r := reserve(); r != 0 {
		t.Fatalf("half a latency after the first answer: reserve %g, want none yet", r)
	}
	answer(rtt)
	if r, want := reserve(), coldShare*0.15; math.Abs(r-want) > 1e-9 {
		t.Fatalf("a latency and a half after the first answer, headers as the model says: reserve %g, want %g (coldShare of it)", r, want)
	}
	// Anyone else's use shows: the whole reserve.
	tk := tkAt(t, l, now)
	now = now.Add(10 * time.Millisecond)
	level := l.State(now).Buckets[budget.Requests].Level
	l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: reqHeaders(now, 1200, int64(level-5), 10*time.Second), Date: now})
	if r := reserve(); r != 0.15 {
		t.Fatalf("5 requests under the model 10 ms after the send: reserve %g, want 0.15", r)
	}
}

// TestColdStartSignNetOfOwnSpending: the headers may be as old as the
// send, so an answer's remaining may miss the refill since — but the
// lane's own spending since is missing from it too: 5 under the model a
// second after the send, the lane having spent the second's refill (20)
// since, is a sign of someone else's use; with nothing spent since, 15
// under is not.
func TestColdStartSignNetOfOwnSpending(t *testing.T) {
	for _, c := range []struct {
		spent, under int
		sign         bool
	}{{0, 15, false}, {20, 5, true}, {20, 2, false}} {
		l := newLane(Config{Cap: 100, Start: 12})
		now := firstAnswer(t, l, reqHeaders(t0.Add(3*time.Second), 1200, 1199, 50*time.Millisecond))
		tk := tkAt(t, l, now)
		for range c.spent {
			tkAt(t, l, now.Add(500*time.Millisecond))
		}
		now = now.Add(time.Second)
		level := l.State(now).Buckets[budget.Requests].Level
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: time.Second, Limits: reqHeaders(now, 1200, int64(math.Ceil(level))-int64(c.under), 10*time.Second), Date: now})
		l.mu.Lock()
		sign := !l.unshared
		l.mu.Unlock()
		if sign != c.sign {
			t.Errorf("%d spent since the send, %d under the model: a sign %v, want %v", c.spent, c.under, sign, c.sign)
		}
	}
}

// TestStepRefusedBeforeAnyAnswer: the start's step into full buckets is
// refused by an acceleration limit whose 429s come back before any clean
// answer: the hold is at Config.Start (what was admitted is not known
// yet), not 0.9 × the step, and the 429s of the step that come after the
// hold are still acceleration — no depth is halved.
func TestStepRefusedBeforeAnyAnswer(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 12000, 11999, 5*time.Millisecond))
	depth := l.State(now).Buckets[budget.Requests].Depth
	tks, _ := acquireAll(l, now)
	if len(tks) <= 40 {
		t.Fatalf("the start let %d go at once, want a step above 40", len(tks))
	}
	refuse := func(at time.Time, tks []Ticket) {
		for _, tk := range tks {
			l.Done(at, tk, Result{Signal: RateLimited, Reached: true, Latency: 20 * time.Millisecond, RetryAfter: 50 * time.Millisecond, Limits: reqHeaders(at, 12000, 11900, time.Second), Date: at})
		}
	}
	at := now.Add(20 * time.Millisecond)
	refuse(at, tks[5:]) // 5 admitted
	if got := l.Limit(at); got > 12 {
		t.Fatalf("held at %d after a step refused before any answer, want at most Start (12)", got)
	}
	// A 429 of an attempt sent during the hold, before any clean answer:
	// the same acceleration, not a shorter interval.
	at = at.Add(100*time.Millisecond + rtt) // past the pause and the held limit's return
	late := tkAt(t, l, at)
	refuse(at.Add(20*time.Millisecond), []Ticket{late})
	st := l.State(at)
	if st.Stats.Acceleration != int64(len(tks)-5+1) || st.Buckets[budget.Requests].Depth < depth {
		t.Fatalf("acceleration %d (want %d), depth %g → %g (want kept)", st.Stats.Acceleration, len(tks)-5+1, depth, st.Buckets[budget.Requests].Depth)
	}
}

// TestAccelerationEpisodeOutlivesTheHold: a 429 of an attempt sent before
// the last hold belongs to that hold's episode: it is acceleration even
// when it comes while the rate is held (when a fresh 429 would be read as
// a shorter interval's), and halves no depth.
func TestAccelerationEpisodeOutlivesTheHold(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 120000, 119999, time.Millisecond))
	l.mu.Lock()
	l.limit, l.startRate, l.ansRate, l.latency = 200, 0, 500, rtt.Seconds()
	l.riseAt = now
	l.mu.Unlock()
	depth := l.State(now).Buckets[budget.Requests].Depth
	early, first := tkAt(t, l, now), tkAt(t, l, now)
	limited := func(at time.Time, tk Ticket) {
		l.Done(at, tk, Result{Signal: RateLimited, Reached: true, Latency: rtt, Limits: reqHeaders(at, 120000, 110000, 5*time.Second), Date: at})
	}
	now = now.Add(rtt)
	limited(now, first) // the hold
	if st := l.State(now).Stats; st.Acceleration != 1 {
		t.Fatalf("the first 429 during the rise: acceleration %d, want 1", st.Acceleration)
	}
	now = now.Add(rtt) // the rate is held now
	limited(now, early)
	st := l.State(now)
	if st.Stats.Acceleration != 2 || st.Buckets[budget.Requests].Depth < depth {
		t.Fatalf("a 429 of an attempt sent before the hold: acceleration %d (want 2), depth %g → %g (want kept)", st.Stats.Acceleration, depth, st.Buckets[budget.Requests].Depth)
	}
}

// TestAccelerationUnderEveryLimit: a 429 with room in every bucket, long
// after the lane's last rise, while it sends far under the headers'
// limit (50 a second where the limit refills 2,000, 10 in flight where a
// second of it is 2,000): no bucket of that limit enforced over a second
// or more refuses it, so it is read as acceleration — the limit held
// lower, no depth halved; the same 429 while the lane sends above the
// limit's refill is a shorter interval's (the depth halved).
func TestAccelerationUnderEveryLimit(t *testing.T) {
	for _, c := range []struct {
		name      string
		rpm       int64
		wantAccel bool
	}{
		{"50 a second under a limit of 2,000 a second", 120000, true},
		{"50 a second over a limit of 40 a second", 2400, false},
	} {
		l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
		now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), c.rpm, c.rpm-1, time.Millisecond))
		now = now.Add(time.Minute) // long after the start: no rise lately
		l.mu.Lock()
		l.limit, l.startRate, l.ansRate, l.latency = 10, 0, 50, rtt.Seconds()
		l.mu.Unlock()
		depth := l.State(now).Buckets[budget.Requests].Depth
		tk := tkAt(t, l, now)
		now = now.Add(rtt)
		l.Done(now, tk, Result{Signal: RateLimited, Reached: true, Latency: rtt, Limits: reqHeaders(now, c.rpm, c.rpm/2, 30*time.Second), Date: now})
		st := l.State(now)
		gotAccel := st.Stats.Acceleration == 1
		halved := st.Buckets[budget.Requests].Depth < depth*0.6
		if gotAccel != c.wantAccel || halved == c.wantAccel {
			t.Errorf("%s: acceleration %d, depth %g → %g; want acceleration %v", c.name, st.Stats.Acceleration, depth, st.Buckets[budget.Requests].Depth, c.wantAccel)
		}
	}
}

// TestAccelerationHoldsDoNotLengthen: every acceleration hold lasts
// holdLatencies mean latencies — the second as the first — and each hold
// that follows a rise of the rate halves the ramp's speed, below the old
// floor of a doubling per 8 latencies: an acceleration limit's windows
// are seconds, not latencies, and a ramp too fast for them is refused
// again and again.
func TestAccelerationHoldsDoNotLengthen(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 120000, 119999, time.Millisecond))
	for i := range 6 {
		l.mu.Lock()
		l.limit, l.startRate, l.ansRate, l.latency, l.riseAt, l.pausedUntil = 10, 0, 50, rtt.Seconds(), now, time.Time{}
		l.mu.Unlock()
		now = now.Add(time.Millisecond)
		tk := tkAt(t, l, now)
		now = now.Add(rtt)
		l.Done(now, tk, Result{Signal: RateLimited, Reached: true, Latency: rtt, Limits: reqHeaders(now, 120000, 110000, 5*time.Second), Date: now})
		l.mu.Lock()
		hold, rl := l.holdUntil.Sub(now), l.rampLat
		l.mu.Unlock()
		if want := time.Duration(holdLatencies) * rtt; hold != want {
			t.Fatalf("hold %d lasts %v, want %v", i+1, hold, want)
		}
		if want := RampDoublingLatencies * float64(int(2)<<i); rl != want {
			t.Fatalf("after hold %d: %g latencies a doubling, want %g", i+1, rl, want)
		}
		now = now.Add(holdLatencies * rtt)
	}
}

// TestStepAdmittedRaisesTheHold: a hold made before any clean answer is at
// Config.Start at most; as the answers of the step that the server
// admitted come in, the hold rises to what they show it admitted: 0.9 ×
// their count.
func TestStepAdmittedRaisesTheHold(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 12000, 11999, 5*time.Millisecond))
	tks, _ := acquireAll(l, now)
	if len(tks) < 60 {
		t.Fatalf("the start let %d go at once, want 60 or more", len(tks))
	}
	at := now.Add(20 * time.Millisecond)
	for _, tk := range tks[40:] { // 40 admitted, the rest refused at once
		l.Done(at, tk, Result{Signal: RateLimited, Reached: true, Latency: 20 * time.Millisecond, RetryAfter: 50 * time.Millisecond, Limits: reqHeaders(at, 12000, 11900, time.Second), Date: at})
	}
	l.mu.Lock()
	held := l.limit
	l.mu.Unlock()
	if held > 12 {
		t.Fatalf("held at %g before any clean answer, want at most Start (12)", held)
	}
	// The 40 admitted answer over the next latency.
	for i, tk := range tks[:40] {
		a := now.Add(rtt + time.Duration(i)*rtt/40)
		l.Done(a, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: reqHeaders(a, 12000, 11900, time.Second), Date: a})
	}
	l.mu.Lock()
	got := l.limit
	l.mu.Unlock()
	if got != 36 {
		t.Fatalf("the step's 40 admitted answers in: limit %g, want 36 (0.9 × 40)", got)
	}
}

// TestAccelerationRefusedAgainWhileHeld: an attempt sent at the held rate
// and refused again, with a retry-after shorter than a latency, lowers the
// requests bucket's level to the reserve, so the lane waits for a
// request's refill instead of resending as fast as 429s come back (a limit
// enforced over less than a second reads this way too); its depth is not
// halved. With a retry-after of a latency or more the pause paces the lane
// and the level stays.
func TestAccelerationRefusedAgainWhileHeld(t *testing.T) {
	for _, c := range []struct {
		name       string
		retryAfter time.Duration
		wantLow    bool
	}{
		{"retry-after 20 ms", 20 * time.Millisecond, true},
		{"retry-after of two latencies", 2 * rtt, false},
	} {
		l := newLane(Config{Cap: 1000, Start: 12, Reserve: 0.15})
		now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 120000, 119999, time.Millisecond))
		l.mu.Lock()
		l.limit, l.startRate, l.ansRate, l.latency, l.riseAt, l.pausedUntil = 10, 0, 50, rtt.Seconds(), now, time.Time{}
		l.unshared, l.burst = false, false
		l.mu.Unlock()
		// The first refusal: a rise refused, a hold.
		now = now.Add(time.Millisecond)
		tk := tkAt(t, l, now)
		now = now.Add(rtt)
		l.Done(now, tk, Result{Signal: RateLimited, Reached: true, Latency: rtt, RetryAfter: c.retryAfter, Limits: reqHeaders(now, 120000, 110000, 5*time.Second), Date: now})
		if l.State(now).Stats.Acceleration != 1 {
			t.Fatalf("%s: the first refusal is not read as acceleration", c.name)
		}
		// An attempt sent during the hold, refused again.
		now = now.Add(max(c.retryAfter, time.Millisecond))
		tk = tkAt(t, l, now)
		now = now.Add(20 * time.Millisecond)
		before := l.State(now).Buckets[budget.Requests]
		l.Done(now, tk, Result{Signal: RateLimited, Reached: true, Latency: 20 * time.Millisecond, RetryAfter: c.retryAfter,
			Limits: reqHeaders(now, 120000, 109000, 5*time.Second), Date: now})
		after := l.State(now).Buckets[budget.Requests]
		low := after.Level <= 0.15*after.Depth+1
		if low != c.wantLow || after.Depth < before.Depth*0.9 {
			t.Errorf("%s: level %.0f of depth %.0f (was %.0f of %.0f): want lowered to the reserve %v, depth kept",
				c.name, after.Level, after.Depth, before.Level, before.Depth, c.wantLow)
		}
	}
}

// TestDepthCapProbed: a depth halved by a 429 that no bucket the headers
// show explains (a shorter interval's reading; an acceleration limit's
// looks the same) is a reading only a burst can test: after
// probeLatencies mean latencies without a halving the cap doubles, the
// headers may raise the level again (what the cap left unspent shows only
// there) and the limit restarts from what is in flight; a halving of the
// probe halves it back and doubles the wait for the next.
func TestDepthCapProbed(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	room := func(now time.Time, sig Signal) Result {
		return Result{Signal: sig, Reached: true, Latency: rtt, Limits: reqHeaders(now, 600, 590, time.Second), Date: now}
	}
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 600, 599, 100*time.Millisecond)) // 10 a second, a full minute deep
	l.mu.Lock()
	l.limit, l.startRate, l.riseAt = 50, 0, time.Time{} // no rise of the lane's rate explains a 429
	l.mu.Unlock()
	tk := tkAt(t, l, now)
	now = now.Add(rtt)
	l.Done(now, tk, room(now, RateLimited))
	b := l.State(now).Buckets[budget.Requests]
	if b.Depth > 301 || b.Level > 1 {
		t.Fatalf("after a 429 with room: depth %g, level %g; want halved to 300 and empty", b.Depth, b.Level)
	}
	capped := now
	answer := func(at time.Time) budget.BucketState {
		t.Helper()
		tk := tkAt(t, l, at)
		l.Done(at.Add(rtt), tk, room(at.Add(rtt), Clean))
		return l.State(at.Add(rtt)).Buckets[budget.Requests]
	}
	// Work held back by the bucket before the probe's time: no probe.
	early := capped.Add(2 * rtt)
	first, _ := acquireAll(l, early)
	for _, tk := range first {
		l.Done(early.Add(rtt/10), tk, room(early.Add(rtt/10), Clean))
	}
	if b = l.State(early.Add(rtt / 10)).Buckets[budget.Requests]; b.Depth > 301 || b.Level > 50 {
		t.Fatalf("work held back %v after the halving: depth %g, level %g; want no probe before %g latencies", early.Sub(capped), b.Depth, b.Level, probeLatencies)
	}
	// Before the probe (and after its time, while no bucket held work
	// back: a lull), the headers' 590 do not raise the level.
	probeAt := capped.Add(time.Duration(probeLatencies * 1.01 * float64(rtt)))
	for at := early.Add(rtt / 2); at.Before(probeAt.Add(5 * rtt)); at = at.Add(rtt / 2) { // at the refill's pace
		if b = answer(at); b.Depth > 301 || b.Level > 50 {
			t.Fatalf("before the probe, at %v: depth %g, level %g; want the cap and the refill alone", at.Sub(capped), b.Depth, b.Level)
		}
	}
	// The probe: work held back by the bucket, the cap doubles (to the
	// 600 the headers bound), the limit restarts from what is in flight,
	// and the headers raise the level to what they show.
	probeAt = probeAt.Add(5 * rtt)
	held, g := acquireAll(l, probeAt)
	if g != budget.ByRequests {
		t.Fatalf("at the probe: refused by %v after %d, want the requests bucket", g, len(held))
	}
	if len(held) == 0 {
		t.Fatalf("at the probe: nothing let go, want what a request's refill pays for")
	}
	l.Done(probeAt.Add(rtt/10), held[0], room(probeAt.Add(rtt/10), Clean))
	if got, want := l.Limit(probeAt), len(held); got != want {
		t.Fatalf("at the probe the limit is %d, want %d: what was in flight and one more", got, want)
	}
	for _, tk := range held[1:] {
		l.Done(probeAt.Add(rtt/10), tk, room(probeAt.Add(rtt/10), Clean))
	}
	// The answers before the probe were calm: the level rises at once.
	if b = l.State(probeAt.Add(rtt / 10)).Buckets[budget.Requests]; b.Depth < 590 || b.Level < 500 {
		t.Fatalf("after the probe: depth %g, level %g; want the headers' 600 and their remaining", b.Depth, b.Level)
	}
	// A 429 with room of an attempt sent within a latency of the probe,
	// no rise since (a rise reads it as acceleration, the probe standing):
	// the probe's answer halves the depth back at once, not a latency on
	// as an episode's would, and the next probe is twice as far.
	now = probeAt.Add(rtt / 5)
	tk = tkAt(t, l, now)
	now = now.Add(20 * time.Millisecond)
	l.Done(now, tk, room(now, RateLimited))
	l.mu.Lock()
	c, wait, probing := l.depthCap[budget.Requests], l.probeLat[budget.Requests], l.probing[budget.Requests]
	l.mu.Unlock()
	if c < 290 || c > 300 || wait != 2*probeLatencies || probing {
		t.Fatalf("after the probe's 429: cap %g, next probe after %g latencies, probing %v; want ≈ 300, %g, false", c, wait, probing, 2*probeLatencies)
	}
	// A new limit (a tier change): its bucket starts with no cap and no
	// wait of the old one's.
	now = now.Add(time.Second) // a request's refill
	tk = tkAt(t, l, now)
	now = now.Add(rtt)
	l.Done(now, tk, Result{Signal: Clean, Reached: true, Latency: rtt, Limits: reqHeaders(now, 6000, 5900, time.Second), Date: now})
	l.mu.Lock()
	c, wait = l.depthCap[budget.Requests], l.probeLat[budget.Requests]
	l.mu.Unlock()
	if c != 0 || wait != 0 {
		t.Fatalf("after a new limit: cap %g, probe wait %g; want none", c, wait)
	}
}

// TestAccelerationEpisodeLowersTheHold: the refusals of a held episode
// that come after its first (attempts sent before the hold) lower the
// held limit to what the server admitted of the lane's sends — each takes
// back a send — never under MinLimit; the first sets the hold, the rest
// only lower it.
func TestAccelerationEpisodeLowersTheHold(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 120000, 119999, time.Millisecond))
	l.mu.Lock()
	l.limit, l.startRate, l.ansRate, l.latency = 200, 0, 200, rtt.Seconds() // answers at 200 a second: 40 in flight's worth
	l.mu.Unlock()
	var tks []Ticket
	for range 40 {
		tks = append(tks, tkAt(t, l, now))
	}
	refuse := func(at time.Time, tk Ticket) {
		l.Done(at, tk, Result{Signal: RateLimited, Reached: true, Latency: 20 * time.Millisecond, Limits: reqHeaders(at, 120000, 110000, 5*time.Second), Date: at})
	}
	at := now.Add(20 * time.Millisecond)
	refuse(at, tks[0])
	l.mu.Lock()
	first := l.limit
	l.mu.Unlock()
	if first < 30 || first > 40 {
		t.Fatalf("held at %g after the first refusal, want 0.9 × 40 or the answers' 40", first)
	}
	for _, tk := range tks[1:30] { // 30 of the 40 refused
		refuse(at, tk)
	}
	l.mu.Lock()
	lowered, adm := l.limit, l.admRate*l.lat().Seconds()
	l.mu.Unlock()
	if lowered > 11 || lowered < 1 || math.Abs(lowered-math.Max(1, adm)) > 1e-9 {
		t.Fatalf("held at %g after 30 of 40 refused (admitted %g a latency), want what was admitted, ≈ 10", lowered, adm)
	}
	if st := l.State(at); st.Stats.Acceleration != 30 {
		t.Fatalf("acceleration %d, want 30: one episode", st.Stats.Acceleration)
	}
}

// TestProbeNotTriggeredByA429: a 429 that comes when a probe is due is
// read as what it is — it halves the cap — and never first doubles it
// (which would also shield it and the rest of its burst from the halving).
func TestProbeNotTriggeredByA429(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 12, Reserve: -1})
	now := firstAnswer(t, l, reqHeaders(t0.Add(rtt), 600, 599, 100*time.Millisecond))
	tk := tkAt(t, l, now.Add(time.Minute-rtt)) // sent after the last halving
	now = now.Add(time.Minute)
	l.mu.Lock()
	l.limit, l.startRate, l.riseAt = 50, 0, time.Time{} // no rise explains a 429
	l.depthCap[budget.Requests], l.probeLat[budget.Requests] = 300, probeLatencies
	l.lastCap[budget.Requests] = now.Add(-time.Duration(2 * probeLatencies * float64(rtt)))
	l.bucketAt[budget.Requests] = now // work held back: a probe is due
	l.mu.Unlock()
	l.Done(now, tk, Result{Signal: RateLimited, Reached: true, Latency: rtt, Limits: reqHeaders(now, 600, 590, time.Second), Date: now})
	l.mu.Lock()
	c, probing := l.depthCap[budget.Requests], l.probing[budget.Requests]
	l.mu.Unlock()
	if c != 150 || probing {
		t.Fatalf("a 429 when a probe was due: cap %g, probing %v; want halved to 150, no probe", c, probing)
	}
}
