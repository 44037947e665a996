package lane

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/budget"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func newLane(cfg Config) *Lane { return New(cfg, budget.NewLocal(), t0) }

var one = budget.Demand{1, 100, 100}

func TestRampDoublesToCap(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 12, RampDoubling: 5 * time.Second})
	for _, tt := range []struct {
		at   time.Duration
		want int
	}{{0, 12}, {5 * time.Second, 24}, {10 * time.Second, 48}, {15 * time.Second, 96}, {16 * time.Second, 100}, {time.Hour, 100}} {
		if got := l.Limit(at(tt.at)); got != tt.want {
			t.Errorf("Limit(t0+%v) = %d want %d", tt.at, got, tt.want)
		}
	}
}

func TestConcurrencyLimitHolds(t *testing.T) {
	l := newLane(Config{Cap: 3, Start: 3})
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

// TestDecreaseDamped: ten 429s from one burst cut the limit once; a 429 on
// an attempt sent after the cut, a window later, cuts again.
func TestDecreaseDamped(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Decrease: 0.5, Window: 2 * time.Second})
	var burst []Ticket
	for range 10 {
		tk, r, _ := l.TryAcquire(t0, one, 100)
		if r != budget.Granted {
			t.Fatal(r)
		}
		burst = append(burst, tk)
	}
	for i, tk := range burst {
		l.Done(at(time.Second+time.Duration(i)*time.Millisecond), tk, Result{Signal: Congested, Reached: true})
	}
	if got := l.Limit(at(2 * time.Second)); got != 50 {
		t.Fatalf("after one burst of 429s limit = %d want 50 (one cut)", got)
	}
	tk, _, _ := l.TryAcquire(at(2*time.Second), one, 100)
	l.Done(at(2500*time.Millisecond), tk, Result{Signal: Congested, Reached: true})
	if got := l.Limit(at(3 * time.Second)); got != 50 {
		t.Fatalf("a 429 inside the window must not cut: limit %d", got)
	}
	tk, _, _ = l.TryAcquire(at(3*time.Second), one, 100)
	l.Done(at(3500*time.Millisecond), tk, Result{Signal: Congested, Reached: true})
	if got := l.Limit(at(4 * time.Second)); got != 25 {
		t.Fatalf("a 429 a window later cuts again: limit %d want 25", got)
	}
	if st := l.State(at(4 * time.Second)).Stats; st.Decreases != 2 || st.Congested != 12 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAdditiveIncrease(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Decrease: 0.5, Window: time.Second})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: Congested, Reached: true}) // limit 50
	now := at(time.Second)
	// Keep the lane busy (≥ half the limit in flight) and complete 50
	// (and a couple more, for the shrinking step 1/limit) clean attempts: +1.
	var held []Ticket
	for range 30 {
		tk, _, _ := l.TryAcquire(now, one, 100)
		held = append(held, tk)
	}
	for range 52 {
		tk, r, _ := l.TryAcquire(now, one, 100)
		if r != budget.Granted {
			t.Fatal(r)
		}
		l.Done(now, tk, Result{Signal: Clean, Reached: true})
	}
	if got := l.Limit(now); got != 51 {
		t.Fatalf("after 50 clean answers at limit 50: %d want 51", got)
	}
	for _, tk := range held {
		l.Done(now, tk, Result{Signal: Clean, Reached: true})
	}
}

func TestRetryAfterPausesLane(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: Congested, RetryAfter: 3 * time.Second, Reached: true})
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

func limits(rpm, rpmRem, in, inRem, out, outRem int64) api.RateLimitHeaders {
	st := func(l, r int64) api.LimitState {
		return api.LimitState{Present: true, Limit: l, Remaining: r, Reset: t0}
	}
	return api.RateLimitHeaders{Requests: st(rpm, rpmRem), InputTokens: st(in, inRem), OutputTokens: st(out, outRem)}
}

// TestHeadersPaceAndReserve: after headers say 60 RPM with 20 left, the lane
// spends down to the 15% reserve (9) and then waits for refill at 1/s.
func TestHeadersPaceAndReserve(t *testing.T) {
	l := newLane(Config{Cap: 100, Start: 100, Reserve: 0.15})
	tk, _, _ := l.TryAcquire(t0, one, 100)
	l.Done(t0, tk, Result{Signal: Clean, Reached: true, Limits: limits(60, 20, 1e6, 1e6, 1e6, 1e6), InputTokens: 100, OutputTokens: 100})
	granted := 0
	for {
		_, r, wait := l.TryAcquire(t0, one, 100)
		if r != budget.Granted {
			if r != budget.ByRequests || wait != time.Second {
				t.Fatalf("refusal %v wait %v, want ByRequests 1s", r, wait)
			}
			break
		}
		granted++
	}
	if granted != 11 { // 20 remaining, 9 reserved
		t.Fatalf("granted %d requests, want 11 (20 remaining less a reserve of 9)", granted)
	}
	if s := l.State(t0); !s.LowHeadroom {
		// 20/60 is above 15%, so the lane was not low when the headers came.
		if s.Buckets[budget.Requests].Level != 9 {
			t.Fatalf("level %v want 9", s.Buckets[budget.Requests].Level)
		}
	}
}

func TestLearnsInputScaleAndOutputMean(t *testing.T) {
	l := newLane(Config{Cap: 10, Start: 10})
	if d := l.Demand(100, 64); d[budget.OutputTokens] != 64 || d[budget.InputTokens] != 100 {
		t.Fatalf("initial demand %v: output min(256, max_tokens), input as estimated", d)
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
	a, b := newLane(Config{Cap: 10, Start: 10}), newLane(Config{Cap: 10, Start: 10})
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
	l := newLane(Config{Cap: 2, Start: 1, RampDoubling: 10 * time.Second})
	s := func(d int) time.Time { return at(time.Duration(d) * time.Second) }
	a, _, _ := l.TryAcquire(s(0), one, 100) // limit 1 (ramp): taken
	for _, d := range []int{1, 2, 3} {      // asked three times, one period
		if _, r, _ := l.TryAcquire(s(d), one, 100); r != budget.ByConcurrency {
			t.Fatalf("t=%ds: %v, want ByConcurrency", d, r)
		}
	}
	l.Done(s(4), a, Result{Signal: Clean, Reached: true})
	b, r, _ := l.TryAcquire(s(5), one, 100) // ramp period 1 s → 5 s: 4 s
	if r != budget.Granted {
		t.Fatal(r)
	}
	c, _, _ := l.TryAcquire(s(10), one, 100) // limit 2 (the cap) at 10 s
	if _, r, _ := l.TryAcquire(s(10), one, 100); r != budget.ByConcurrency {
		t.Fatalf("at the cap: %v", r)
	}
	l.Idle(s(13)) // cap period 10 s → 13 s: 3 s
	l.Done(s(14), b, Result{Signal: Congested, RetryAfter: 6 * time.Second, Reached: true})
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
	l.Done(s(30), tkAt(t, l, s(30)), Result{Signal: Congested, RetryAfter: 10 * time.Second, Reached: true})
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
