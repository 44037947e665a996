package lane

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newLane(cfg Config) *Lane { return New(cfg, budget.NewLocal(), t0) }

// warmLane is a lane whose header probe has been answered (no headers):
// its limit is Start from here on.
func warmLane(cfg Config) *Lane {
	l := newLane(cfg)
	tk, _, _ := l.TryAcquire(t0, budget.Demand{}, 0)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true})
	return l
}

var one = budget.Demand{1, 100, 100, 200}

const rtt = 200 * time.Millisecond

// round fills the lane to its limit at now and answers every request one
// latency later with r (latency and Reached filled in); it returns the
// time of the answers.
func round(t *testing.T, l *Lane, now time.Time, r Result) time.Time {
	t.Helper()
	tks, _ := acquireAll(l, now)
	if len(tks) == 0 {
		t.Fatalf("round at %v: nothing admitted", now.Sub(t0))
	}
	end := now.Add(rtt)
	r.Latency, r.Reached = rtt, true
	for _, tk := range tks {
		l.Done(end, tk, r)
	}
	return end
}

// acquireAll takes every request of one the lane lets go at now and says
// what refused the next.
func acquireAll(l *Lane, now time.Time) ([]Ticket, budget.Refusal) {
	var tks []Ticket
	for {
		tk, g, _ := l.TryAcquire(now, one, 100)
		if g != budget.Granted {
			return tks, g
		}
		tks = append(tks, tk)
	}
}

// TestHeaderProbeFirst: a lane sends one request until an answer comes
// back, whatever its limit; a request that never reached the server does
// not count as one.
func TestHeaderProbeFirst(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	probe := tkAt(t, l, t0)
	if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.ByConcurrency {
		t.Fatalf("a second request before any answer: %v", r)
	}
	l.Done(t0, probe, Result{Signal: Aborted})
	probe = tkAt(t, l, t0)
	if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.ByConcurrency {
		t.Fatalf("after an attempt that did not reach the server: %v", r)
	}
	l.Done(t0, probe, Result{Signal: Failed, Reached: true}) // a refused or reset connection: no answer
	probe = tkAt(t, l, t0)
	if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.ByConcurrency {
		t.Fatalf("after a lost connection: %v", r)
	}
	l.Done(t0, probe, Result{Signal: Overloaded, Reached: true}) // any answer: the API is there
	for i := range 10 {
		if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.Granted {
			t.Fatalf("answered: acquire #%d %v", i+1, r)
		}
	}
}

func TestConcurrencyLimitHolds(t *testing.T) {
	l := warmLane(Config{Cap: 3, Start: 3})
	var tickets []Ticket
	for i := range 3 {
		tk, r, _ := l.TryAcquire(t0, one, 100)
		if r != budget.Granted {
			t.Fatalf("acquire #%d refused: %v", i+1, r)
		}
		tickets = append(tickets, tk)
	}
	if _, r, wait := l.TryAcquire(t0, one, 100); r != budget.ByConcurrency || wait != 0 {
		t.Fatalf("4th acquire = %v, %v; want ByConcurrency, 0", r, wait)
	}
	l.Done(t0, tickets[0], Result{Signal: Clean, Reached: true})
	if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.Granted {
		t.Fatalf("acquire after a release = %v", r)
	}
}

// TestSlowStartTimedByAnswers: saturated, the limit doubles every
// RampDoublingLatencies rounds, whatever the clock says; a lane that is
// not full does not grow at all.
func TestSlowStartTimedByAnswers(t *testing.T) {
	for _, lat := range []time.Duration{rtt, 10 * rtt} { // the same world, ten times slower
		l := warmLane(Config{Cap: 100, Start: 10})
		now := t0
		for range 2 * int(RampDoublingLatencies) {
			end := now
			var tks []Ticket
			for {
				tk, g, _ := l.TryAcquire(now, one, 100)
				if g != budget.Granted {
					break
				}
				tks = append(tks, tk)
			}
			end = now.Add(lat)
			for _, tk := range tks {
				l.Done(end, tk, Result{Signal: Clean, Reached: true, Latency: lat})
			}
			now = end
		}
		// Two doublings' worth of rounds: 2² in a continuous ramp; rounds
		// are discrete (every answer of a round at its end), so each
		// multiplies by 1 + ln 2 ÷ RampDoublingLatencies.
		want := 10 * math.Pow(1+math.Ln2/RampDoublingLatencies, 2*RampDoublingLatencies)
		if got := float64(l.Limit(now)); got < 0.9*want || got > 1.1*want {
			t.Errorf("latency %v: after %d saturated rounds the limit is %g, want about %.0f", lat, 2*int(RampDoublingLatencies), got, want)
		}
	}
	l := newLane(Config{Cap: 100, Start: 10})
	for i := range 50 { // one request at a time: never full
		tk, _, _ := l.TryAcquire(at(time.Duration(i)*rtt), one, 100)
		l.Done(at(time.Duration(i+1)*rtt), tk, Result{Signal: Clean, Reached: true, Latency: rtt})
	}
	if got := l.Limit(t0); got != 10 {
		t.Errorf("a lane that is never full grew to %d", got)
	}
}

// TestEpisodeCutsOnce: ten 429s from one burst cut the limit once; a 429
// on an attempt sent after the cut, a latency later, cuts again.
func TestEpisodeCutsOnce(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100})
	// One clean round to learn the latency.
	now := round(t, l, t0, Result{Signal: Clean})
	var burst []Ticket
	for range 10 {
		tk, _, _ := l.TryAcquire(now, one, 100)
		burst = append(burst, tk)
	}
	for i, tk := range burst {
		l.Done(now.Add(rtt+time.Duration(i)*time.Millisecond), tk, Result{Signal: RateLimited, Reached: true, Latency: rtt})
	}
	if got := l.Limit(now); got != 80 {
		t.Fatalf("after one burst of 429s limit = %d want 80 (one cut ×0.8)", got)
	}
	now = now.Add(rtt + 10*time.Millisecond)
	tk, _, _ := l.TryAcquire(now, one, 100)
	l.Done(now.Add(time.Millisecond), tk, Result{Signal: RateLimited, Reached: true})
	if got := l.Limit(now); got != 80 {
		t.Fatalf("a 429 within a latency of the cut must not cut: limit %d", got)
	}
	now = now.Add(2 * rtt)
	tk, _, _ = l.TryAcquire(now, one, 100)
	l.Done(now.Add(time.Millisecond), tk, Result{Signal: RateLimited, Reached: true})
	if got := l.Limit(now); got != 64 {
		t.Fatalf("a 429 a latency later cuts again: limit %d want 64", got)
	}
	if st := l.State(now).Stats; st.Decreases != 2 || st.RateLimited != 12 || st.Explained != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestQuickReturnToTheLastGoodLimit: after a cut from 100 to 80, slow start
// regains 90 (0.9 of the limit that met the 429) within a few rounds, then
// probes by +1 per round.
func TestQuickReturnToTheLastGoodLimit(t *testing.T) {
	l := newLane(Config{Cap: 200, Start: 100})
	now := round(t, l, t0, Result{Signal: Clean})
	l.mu.Lock()
	l.limit = 100
	l.mu.Unlock()
	tk, _, _ := l.TryAcquire(now, one, 100)
	l.Done(now.Add(rtt), tk, Result{Signal: RateLimited, Reached: true, Latency: rtt})
	now = now.Add(rtt)
	if got := l.Limit(now); got != 80 {
		t.Fatalf("cut to %d, want 80", got)
	}
	now = round(t, l, now, Result{Signal: Clean})
	if got := l.Limit(now); got != 90 {
		t.Fatalf("after one round the limit is %d, want back at 90", got)
	}
	for range 5 {
		now = round(t, l, now, Result{Signal: Clean})
	}
	if got := l.Limit(now); got != 95 {
		t.Fatalf("after five more rounds %d, want 90 + 1 per round", got)
	}
}

func limits(rpm, rpmRem, in, inRem, out, outRem int64) api.RateLimitHeaders {
	st := func(l, r int64) api.LimitState {
		return api.LimitState{Present: true, Limit: l, Remaining: r, Reset: t0.Add(time.Duration(float64(l-r) / float64(l) * float64(time.Minute))), ResetFine: true}
	}
	return api.RateLimitHeaders{Requests: st(rpm, rpmRem), InputTokens: st(in, inRem), OutputTokens: st(out, outRem)}
}

// TestExplainedRateLimitIsTheBuckets: a 429 whose headers show the bucket
// empty does not cut, does not pause the lane, charges nothing, and the
// bucket holds the lane until it refills.
func TestExplainedRateLimitIsTheBuckets(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Reserve: -1})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: RateLimited, Reached: true, RetryAfter: 3 * time.Second, Limits: limits(600, 0, 1e6, 1e6, 1e6, 1e6)})
	if got := l.Limit(t0); got != 100 {
		t.Fatalf("an explained 429 cut the limit to %d", got)
	}
	_, r, w := l.TryAcquire(t0, one, 100)
	if r != budget.ByRequests || w != 100*time.Millisecond {
		t.Fatalf("after the 429: %v wait %v, want the requests bucket for 0.1 s (600 RPM), not the 3 s retry-after", r, w)
	}
	if _, r, _ := l.TryAcquire(at(100*time.Millisecond), one, 100); r != budget.Granted {
		t.Fatalf("after refill: %v", r)
	}
	if st := l.State(t0).Stats; st.Explained != 1 || st.Pauses != 0 || st.Decreases != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCongestionPausesTheLane: a 429 with nothing to explain it (no
// headers, no limit named) pauses the lane for its retry-after.
func TestCongestionPausesTheLane(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: RateLimited, RetryAfter: 3 * time.Second, Reached: true})
	if _, r, wait := l.TryAcquire(at(time.Second), one, 100); r == budget.Granted || wait != 2*time.Second {
		t.Fatalf("during the pause: %v wait %v, want refused for 2s", r, wait)
	}
	if l.Headroom(at(time.Second)) != 0 {
		t.Fatal("a paused lane has no headroom")
	}
	if _, r, _ := l.TryAcquire(at(3*time.Second), one, 100); r != budget.Granted {
		t.Fatalf("after the pause: %v", r)
	}
}

// TestOverloadIsNotCongestion: 529s at a few percent never cut and do not
// stop growth; a storm (half the answers) cuts, but never below half the
// last good limit, and slow start returns to it once the storm ends.
func TestOverloadIsNotCongestion(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 50})
	now := t0
	for range 10 { // ramp to the cap
		now = round(t, l, now, Result{Signal: Clean})
	}
	if got := l.Limit(now); got != 100 {
		t.Fatalf("ramped to %d", got)
	}
	for i := range 2000 { // 5 % 529s, one at a time through a full lane
		sig := Clean
		if i%20 == 7 {
			sig = Overloaded
		}
		tk, g, _ := l.TryAcquire(now, one, 100)
		if g != budget.Granted {
			// the lane is full: answer one of the round's to free a slot
			t.Fatalf("refused at %d: %v", i, g)
		}
		now = now.Add(time.Millisecond)
		l.Done(now, tk, Result{Signal: sig, Reached: true, Latency: rtt})
	}
	if got := l.Limit(now); got != 100 {
		t.Fatalf("5 %% 529s moved the limit to %d", got)
	}
	if st := l.State(now).Stats; st.Decreases != 0 || st.Overloaded != 100 {
		t.Fatalf("stats %+v", st)
	}
	// A storm: every other answer a 529, for many latencies.
	for range 40 {
		var tks []Ticket
		for {
			tk, g, _ := l.TryAcquire(now, one, 100)
			if g != budget.Granted {
				break
			}
			tks = append(tks, tk)
		}
		now = now.Add(rtt)
		for i, tk := range tks {
			sig := Clean
			if i%2 == 0 {
				sig = Overloaded
			}
			l.Done(now, tk, Result{Signal: sig, Reached: true, Latency: rtt})
		}
	}
	if got := l.Limit(now); got != 50 {
		t.Fatalf("in a long storm the limit is %d, want the floor: half the last good 100", got)
	}
	for range 12 {
		now = round(t, l, now, Result{Signal: Clean})
	}
	if got := l.Limit(now); got != 100 {
		t.Fatalf("after the storm the limit is %d, want back at 100", got)
	}
}

// TestBreaker: ten consecutive failures open the lane for four latencies;
// then one probe; a failed probe re-opens it for twice as long; an answer
// closes it.
func TestBreaker(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	now := round(t, l, t0, Result{Signal: Clean}) // latency 200 ms
	for range 10 {
		tk, _, _ := l.TryAcquire(now, one, 100)
		l.Done(now, tk, Result{Signal: Failed, Reached: true, Latency: rtt})
	}
	if _, r, w := l.TryAcquire(now, one, 100); r == budget.Granted || w != 4*rtt {
		t.Fatalf("after 10 failures: %v wait %v, want refused for 4 latencies", r, w)
	}
	if l.Headroom(now) != 0 || !l.State(now).BreakerOpen {
		t.Fatal("an open lane has headroom")
	}
	now = now.Add(4 * rtt)
	probe, r, _ := l.TryAcquire(now, one, 100)
	if r != budget.Granted {
		t.Fatalf("half-open: %v", r)
	}
	if _, r, _ := l.TryAcquire(now, one, 100); r != budget.ByConcurrency {
		t.Fatalf("a second request while the probe is out: %v", r)
	}
	l.Done(now, probe, Result{Signal: Failed, Reached: true, Latency: rtt})
	if _, r, w := l.TryAcquire(now, one, 100); r == budget.Granted || w != 8*rtt {
		t.Fatalf("after a failed probe: %v wait %v, want 8 latencies", r, w)
	}
	now = now.Add(8 * rtt)
	probe, _, _ = l.TryAcquire(now, one, 100)
	l.Done(now, probe, Result{Signal: Clean, Reached: true, Latency: rtt})
	// Closed: more than one probe at a time again. (The failures were a
	// sustained share, so the limit was cut, to no less than half.)
	for i := range 5 {
		if _, r, _ := l.TryAcquire(now, one, 100); r != budget.Granted {
			t.Fatalf("closed again, acquire #%d: %v", i+1, r)
		}
	}
	if st := l.State(now).Stats; st.Breaker != 2 {
		t.Fatalf("opened %d times", st.Breaker)
	}
}

// TestShortBucketLearnedFromOneAnswer: a 6000 RPM limit enforced over a
// second (100 deep) is learned from one answer, despite a server clock
// 3 s ahead of ours that Date reveals; the reserve is then 15 of it.
func TestShortBucketLearnedFromOneAnswer(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 1000})
	serverNow := t0.Add(3*time.Second + 400*time.Millisecond)
	h := api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: 6000, Remaining: 40,
		Reset: serverNow.Add(600 * time.Millisecond), ResetFine: true}}
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: serverNow.Truncate(time.Second)})
	b := l.State(t0).Buckets[budget.Requests]
	// Date says the server is 3–4 s ahead: the first answer cannot tell
	// where in that second, so the depth is within 100 of the truth.
	if b.Depth < 100 || b.Depth > 200 {
		t.Fatalf("depth %v from one answer, want about 100 (≤ 200)", b.Depth)
	}
	// More answers pin the clock: Dates of answers at other phases.
	for i := 1; i <= 20; i++ {
		now := t0.Add(time.Duration(i) * 37 * time.Millisecond)
		sn := serverNow.Add(now.Sub(t0))
		h.Requests.Reset = sn.Add(600 * time.Millisecond)
		tk, _, _ := l.TryAcquire(now, one, 100)
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: sn.Truncate(time.Second)})
	}
	for i := 21; i <= 60; i++ {
		now := t0.Add(time.Duration(i) * 37 * time.Millisecond)
		sn := serverNow.Add(now.Sub(t0))
		h.Requests.Reset = sn.Add(600 * time.Millisecond)
		tk, _, _ := l.TryAcquire(now, one, 100)
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: sn.Truncate(time.Second)})
	}
	b = l.State(t0).Buckets[budget.Requests]
	if math.Abs(b.Depth-100) > 10 {
		t.Fatalf("depth %v after 60 answers, want 100 ± 10", b.Depth)
	}
	// With clocks that agree, three answers suffice.
	l = newLane(Config{Cap: 1000, Start: 1000})
	for i := range 3 {
		now := t0.Add(time.Duration(i) * 310 * time.Millisecond)
		h.Requests.Reset = now.Add(600 * time.Millisecond)
		tk, _, _ := l.TryAcquire(now, one, 100)
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: now.Truncate(time.Second)})
	}
	if d := l.State(t0).Buckets[budget.Requests].Depth; math.Abs(d-100) > 1 {
		t.Fatalf("depth %v after 3 answers from a server whose clock agrees, want 100", d)
	}
	if r := b.Reserve(0.15); r < 13.5 || r > 16.5 {
		t.Fatalf("reserve %v: 15 %% of the depth", r)
	}
}

// TestDepthFromWholeSecondResets: resets rounded up to whole seconds, a
// 10 s bucket (1000 deep at 6000 RPM): the smoothed depth is within a
// second's refill of the truth, never the per-minute limit.
func TestDepthFromWholeSecondResets(t *testing.T) {
	l := newLane(Config{Cap: 1000, Start: 1000})
	for i := range 200 {
		now := t0.Add(time.Duration(i) * 73 * time.Millisecond)
		rem := int64(300 + (i*37)%400)
		full := now.Add(time.Duration(float64(1000-rem) / 100 * float64(time.Second)))
		reset := full.Truncate(time.Second)
		if reset.Before(full) {
			reset = reset.Add(time.Second)
		}
		h := api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: 6000, Remaining: rem, Reset: reset}}
		tk, _, _ := l.TryAcquire(now, one, 100)
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: now.Truncate(time.Second)})
	}
	if d := l.State(t0).Buckets[budget.Requests].Depth; math.Abs(d-1000) > 100 {
		t.Fatalf("depth %v, want 1000 ± 100 (a second of refill)", d)
	}
}

// TestNamedLimitPacesAnInvisibleDimension: no input-token headers; a 429
// naming 60,000 input tokens per minute makes that dimension a bucket
// paced at 97 % of it, empty now, with no cut.
func TestNamedLimitPacesAnInvisibleDimension(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Reserve: -1})
	h := limits(6000, 5000, 0, 0, 1e6, 1e6)
	h.InputTokens = api.LimitState{}
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: h, InputTokens: 100, OutputTokens: 100})
	if st := l.State(t0); st.Visible[budget.InputTokens] || st.Buckets[budget.InputTokens].Known {
		t.Fatal("input tokens must be unknown without headers")
	}
	tk, _, _ = l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: RateLimited, Reached: true, Limits: h, Named: api.NamedLimit{Limiter: api.LimiterInputTokens, PerMinute: 60000}})
	st := l.State(t0)
	if !st.Named[budget.InputTokens] || st.Buckets[budget.InputTokens].Limit != 58800 || st.Limit != 100 || st.Stats.Explained != 1 {
		t.Fatalf("after the named 429: %+v", st)
	}
	// 100 tokens at 980 per second: 102 ms.
	if _, r, w := l.TryAcquire(t0, one, 100); r != budget.ByInputTokens || w < 100*time.Millisecond || w > 110*time.Millisecond {
		t.Fatalf("then %v wait %v, want input tokens for ~102 ms", r, w)
	}
}

// TestMissingDimensionTolerated: a dimension whose headers never come is
// unlimited; the others pace.
func TestMissingDimensionTolerated(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Reserve: -1})
	h := api.RateLimitHeaders{Requests: limits(60, 2, 1, 1, 1, 1).Requests}
	tk, _, _ := l.TryAcquire(t0, budget.Demand{1, 1e9, 1e9, 2e9}, 1e9)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: h, InputTokens: 1e9, OutputTokens: 1e9})
	l.mu.Lock()
	l.startRate = 0 // the start (one a second here) is TestStartFromTheHeaders'
	l.mu.Unlock()
	for range 2 {
		if _, r, _ := l.TryAcquire(t0, budget.Demand{1, 1e9, 1e9, 2e9}, 1e9); r != budget.Granted {
			t.Fatalf("requests left, tokens invisible: %v", r)
		}
	}
	if _, r, _ := l.TryAcquire(t0, one, 100); r != budget.ByRequests {
		t.Fatalf("requests spent: %v", r)
	}
}

// TestIdleRestartsTheRamp: a lane that sat idle for eight latencies
// starts again from Start and slow-starts back to its old limit.
func TestIdleRestartsTheRamp(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12})
	now := t0
	for range 10 {
		now = round(t, l, now, Result{Signal: Clean})
	}
	if got := l.Limit(now); got != 100 {
		t.Fatalf("ramped to %d", got)
	}
	now = now.Add(7 * rtt)
	l.TryAcquire(now, budget.Demand{}, 0) // seven latencies: not idle yet
	if got := l.Limit(now); got != 100 {
		t.Fatalf("after 7 latencies the limit is %d", got)
	}
	l = newLane(Config{Cap: 100, Start: 12})
	now = t0
	for range 10 {
		now = round(t, l, now, Result{Signal: Clean})
	}
	now = now.Add(9 * rtt)
	if _, r, _ := l.TryAcquire(now, one, 100); r != budget.Granted || l.Limit(now) != 12 {
		t.Fatalf("after 9 idle latencies: %v limit %d, want the ramp restarted at 12", r, l.Limit(now))
	}
	for range 8 {
		now = round(t, l, now, Result{Signal: Clean})
	}
	if got := l.Limit(now); got != 100 {
		t.Fatalf("slow start back to %d, want 100", got)
	}
	if st := l.State(now).Stats; st.Restarts != 1 {
		t.Fatalf("restarts %d", st.Restarts)
	}
}

// TestRefusedAttemptsChargeNothing: a 429 or 529 gives back what it took;
// a lost connection keeps it (the server may have run it).
func TestRefusedAttemptsChargeNothing(t *testing.T) {
	for _, tt := range []struct {
		sig  Signal
		want float64
	}{{RateLimited, 100}, {Overloaded, 100}, {Failed, 99}} {
		l := newLane(Config{Cap: 10, Start: 10, Reserve: -1})
		tk, _, _ := l.TryAcquire(t0, one, 100)
		l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: limits(6000, 100, 1e6, 1e6, 1e6, 1e6)})
		tk = tkAt(t, l, t0)
		l.Done(t0, tk, Result{Signal: tt.sig, Reached: true})
		if lvl := l.State(t0).Buckets[budget.Requests].Level; lvl != tt.want {
			t.Errorf("%v: requests level %v want %v", tt.sig, lvl, tt.want)
		}
	}
}

// TestHeadersPaceAndReserve: after headers say 60 RPM with 20 left of a
// full-minute bucket, the lane spends down to the 15 % reserve (9 of 60)
// and then waits for refill at 1/s.
func TestHeadersPaceAndReserve(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Reserve: 0.15})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	h := limits(60, 20, 1e6, 1e6, 1e6, 1e6)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: h, Date: t0, InputTokens: 100, OutputTokens: 100})
	// A full-minute bucket: the reserve is 15 % of 60 (9). (The depth is
	// a lower bound: Date's second of uncertainty makes it 59.)
	granted := 0
	for {
		_, r, wait := l.TryAcquire(t0, one, 100)
		if r != budget.Granted {
			if r != budget.ByRequests || wait < 950*time.Millisecond || wait > time.Second {
				t.Fatalf("refusal %v wait %v, want ByRequests ~1s", r, wait)
			}
			break
		}
		granted++
	}
	if granted != 11 {
		t.Fatalf("granted %d requests, want 11 (20 remaining less a reserve of 9)", granted)
	}
	if d := l.State(t0).Buckets[budget.Requests].Depth; d < 59 || d > 60 {
		t.Fatalf("depth %v, want the full minute less Date's second (reset 40 s ahead at 1/s)", d)
	}
}

func TestLearnsInputScaleAndOutputMean(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	if d := l.Demand(100, 64); d[budget.OutputTokens] != 64 || d[budget.InputTokens] != 100 || d[budget.Tokens] != 164 {
		t.Fatalf("initial demand %v: output min(256, max_tokens), input as estimated, their sum", d)
	}
	for range 200 {
		tk, _, _ := l.TryAcquire(t0, l.Demand(100, 1000), 100)
		l.Done(t0, tk, Result{Signal: Clean, Reached: true, InputTokens: 150, OutputTokens: 40})
	}
	d := l.Demand(100, 1000)
	if d[budget.InputTokens] < 148 || d[budget.InputTokens] > 151 || d[budget.OutputTokens] != 40 {
		t.Fatalf("learned demand %v, want input ≈150 (the server counts 1.5× the estimate) and output 40", d)
	}
}

func TestHeadroomPrefersEmptierLane(t *testing.T) {
	a, b := warmLane(Config{Cap: 10, Start: 10}), warmLane(Config{Cap: 10, Start: 10})
	for range 5 {
		a.TryAcquire(t0, one, 100)
	}
	b.TryAcquire(t0, one, 100)
	if ha, hb := a.Headroom(t0), b.Headroom(t0); !(hb > ha) || ha != 0.5 || hb != 0.9 {
		t.Fatalf("headroom a=%v b=%v, want b (0.9) > a (0.5)", ha, hb)
	}
}

// TestWaitedTimesWhatHeldWorkBack: a waiting period runs from a refusal to
// the next admission, a refusal for another reason, or Idle; refusals of
// one reason repeated inside it do not add time; concurrency is split by
// whether the limit had reached the cap; State includes the open period.
func TestWaitedTimesWhatHeldWorkBack(t *testing.T) {
	l := newLane(Config{Cap: 2, Start: 1})
	s := func(d int) time.Time { return at(time.Duration(d) * time.Second) }
	a, _, _ := l.TryAcquire(s(0), one, 100) // limit 1 (ramp): taken
	for _, d := range []int{1, 2, 3} {      // asked three times, one period
		if _, r, _ := l.TryAcquire(s(d), one, 100); r != budget.ByConcurrency {
			t.Fatalf("t=%ds: %v, want ByConcurrency", d, r)
		}
	}
	l.Done(s(4), a, Result{Signal: Clean, Reached: true, Latency: 4 * time.Second})
	b, r, _ := l.TryAcquire(s(5), one, 100) // ramp period 1 s → 5 s: 4 s
	if r != budget.Granted {
		t.Fatal(r)
	}
	for l.Limit(s(5)) < 2 { // saturated answers ramp the limit to the cap
		l.Done(s(5), b, Result{Signal: Clean, Reached: true, Latency: 4 * time.Second})
		b = tkAt(t, l, s(5))
	}
	c, _, _ := l.TryAcquire(s(10), one, 100)
	if _, r, _ := l.TryAcquire(s(10), one, 100); r != budget.ByConcurrency {
		t.Fatalf("at the cap: %v", r)
	}
	l.Idle(s(13)) // cap period 10 s → 13 s: 3 s
	l.Done(s(14), b, Result{Signal: RateLimited, RetryAfter: 6 * time.Second, Reached: true})
	l.TryAcquire(s(15), one, 100) // paused 14 s → 20 s: open from 15 s
	st := l.State(s(18))
	want := [NumWaits]time.Duration{WaitRamp: 4 * time.Second, WaitCap: 3 * time.Second, WaitPause: 3 * time.Second}
	if st.Stats.Waited != want {
		t.Errorf("Waited at 18 s = %v, want %v", st.Stats.Waited, want)
	}
	l.Idle(s(16))
	l.Done(s(20), c, Result{Signal: Clean, Reached: true})
	if got := l.State(s(30)).Stats.Waited[WaitPause]; got != time.Second {
		t.Errorf("pause waited %v after Idle at 16 s, want 1 s", got)
	}
	// A clock read out of order never subtracts.
	l.Done(s(30), tkAt(t, l, s(30)), Result{Signal: RateLimited, RetryAfter: 10 * time.Second, Reached: true})
	l.TryAcquire(s(35), one, 100) // a pause period opens at 35 s
	l.Idle(s(34))
	if got := l.State(s(40)).Stats.Waited[WaitPause]; got != time.Second {
		t.Errorf("pause waited %v after an Idle read before its start, want still 1 s", got)
	}
	if got := l.State(s(40)).Stats.Refusals[budget.ByConcurrency]; got != 4 {
		t.Errorf("concurrency refusals %d, want 4 (refusal counts unchanged)", got)
	}
}

// tkAt acquires a ticket at now, failing the test if it is refused.
func tkAt(t *testing.T, l *Lane, now time.Time) Ticket {
	t.Helper()
	tk, r, _ := l.TryAcquire(now, one, 100)
	if r != budget.Granted {
		t.Fatalf("acquire at %v: %v", now.Sub(t0), r)
	}
	return tk
}

// TestDepthNeverBelowWhatWasSeen: when the resets carry no information
// (always "now"), the depth is still at least the most remaining ever
// shown, however many answers have come since.
func TestDepthNeverBelowWhatWasSeen(t *testing.T) {
	l := warmLane(Config{Cap: 10, Start: 10, Reserve: -1})
	show := func(now time.Time, rem int64) {
		h := api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: 60000, Remaining: rem, Reset: now, ResetFine: true}}
		tk := tkAt(t, l, now)
		l.Done(now, tk, Result{Signal: Clean, Reached: true, Answered: true, Limits: h, Date: now.Truncate(time.Second)})
	}
	show(t0, 5000)
	for i := range 5000 {
		show(at(time.Duration(i)*time.Millisecond), 10)
	}
	if d := l.State(t0).Buckets[budget.Requests].Depth; d < 5000 {
		t.Fatalf("depth %v after the answers that showed little, want at least the 5000 once seen", d)
	}
}

// TestTroubleFollowsTheLastAnswers: a run of 529s opens the breaker and
// the lane says Overloaded; 5xx answers say Failed; one 429 or one clean
// answer after them says Clean at once — the shares of 529s and failures
// decay only on clean answers, so a lane held by its rate limits after a
// burst of 529s must not keep blaming the API's load. A single 529 among
// clean answers is noise: Clean.
func TestTroubleFollowsTheLastAnswers(t *testing.T) {
	// send waits until the lane grants (the breaker's cool-down, its one
	// probe at a time) and answers that attempt with sig.
	send := func(l *Lane, now time.Time, sig Signal) time.Time {
		t.Helper()
		for range 1000 {
			tk, r, w := l.TryAcquire(now, one, 100)
			if r != budget.Granted {
				now = now.Add(max(w, rtt))
				continue
			}
			now = now.Add(rtt)
			l.Done(now, tk, Result{Signal: sig, Reached: true, Answered: sig != Failed, Latency: rtt})
			return now
		}
		t.Fatalf("the lane never granted an attempt")
		return now
	}
	run := func(sigs ...Signal) *Lane {
		l := warmLane(Config{Cap: 10, Start: 10})
		now := t0
		for _, s := range sigs {
			now = send(l, now, s)
		}
		return l
	}
	burst := func(sig Signal) []Signal {
		var s []Signal
		for range 12 {
			s = append(s, sig)
		}
		return s
	}
	if got := run().Trouble(); got != Clean {
		t.Errorf("a fresh lane: %v", got)
	}
	if got := run(Clean, Clean, Overloaded).Trouble(); got != Clean {
		t.Errorf("one 529 after clean answers: %v, want Clean (noise)", got)
	}
	if got := run(burst(Overloaded)...).Trouble(); got != Overloaded {
		t.Errorf("after a run of 529s: %v, want Overloaded", got)
	}
	if got := run(burst(Failed)...).Trouble(); got != Failed {
		t.Errorf("after a run of 5xx: %v, want Failed", got)
	}
	for _, last := range []Signal{RateLimited, Clean} {
		if got := run(append(burst(Overloaded), last)...).Trouble(); got != Clean {
			t.Errorf("529s, then a %v answer: %v, want Clean", last, got)
		}
	}
}
