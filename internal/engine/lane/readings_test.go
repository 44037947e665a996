package lane

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// A closed-loop harness (first written by the independent review of the
// engine issue): one lane against a server-side token bucket that follows
// the docs, with a knob for each thing they leave open — the bucket's
// depth, how a whole-second reset is rounded, the server's clock and
// whether it sends Date, 429s without headers, a colleague on the same
// bucket, a shorter-interval bucket the headers do not show, a fixed
// window, token buckets rounded to the thousand. Time is the loop's own
// millisecond steps: exact and fast.

type resetMode int

const (
	resetFine    resetMode = iota // milliseconds
	resetCeil                     // whole seconds rounded up (the simulator)
	resetFloor                    // whole seconds truncated (e.g. Go's RFC3339 formatting)
	resetNearest                  // whole seconds rounded to nearest
)

type world struct { // one reading of the API
	rpm        float64       // per-minute limit
	depth      float64       // bucket depth (requests)
	skew       time.Duration // server clock − ours
	noDate     bool
	reset      resetMode
	lat        time.Duration // latency of an answer
	lat429     time.Duration // latency of a 429
	colleague  float64       // colleague arrivals per second (open loop, dropped on refusal)
	colDemand  float64
	startEmpty bool
	// resetAhead, if >0, replaces the documented reset by now+resetAhead
	// (a different reading: e.g. "the current window's end").
	noHeaders429 bool // 429s carry no rate-limit headers
	dur          time.Duration
	// hidden > 0: a second, unreported bucket of that depth refilling at
	// the same rate (the headers show the per-minute bucket only).
	hidden float64
	// fixed > 0: a fixed window of that length instead of a bucket; reset
	// is the window's end.
	fixed time.Duration
	// tokens > 0: the bucket is input tokens, each request costs tokens,
	// remaining is rounded to the nearest thousand (as documented).
	tokens float64
	// stale: the answer's rate-limit headers and Date are those of its
	// admission (a streamed answer: headers at its start, Done at its end).
	stale bool
	// staleLimits: only the rate-limit headers are the admission's (the
	// server computes them when it admits); Date is the answer's.
	staleLimits bool
	// latSpread > 0: an answer's latency is lat + uniform[0, latSpread).
	latSpread time.Duration
	// accel, when its window is set, refuses a rise of the admitted rate
	// (an acceleration limit; the docs publish no rule, so it is a knob).
	accel accelRule
	// colStart delays the colleague's first arrival.
	colStart time.Duration
	// trace, if set, sees the lane every 500 ms.
	trace func(now time.Time, l *Lane, admitted int)
	// n > 0: a finite job of n requests (the backlog ends; outcome.done
	// is when the last answer came).
	n int
}

// accelRule is an acceleration limit: the admitted rate over window
// (a decayed count, as sim.Acceleration) may not exceed factor × the
// rate over long × window, once above floor (per second).
type accelRule struct {
	window       time.Duration
	long, factor float64
	floor        float64
}

type outcome struct {
	admitted, limited       int
	colAdmitted, colLimited int
	rate                    float64 // admitted per second over the last half
	binding                 float64
	accelLimited            int
	done                    time.Duration // a finite job's last answer, from t0
	st                      State
}

func (w world) run(t *testing.T, cfg Config) outcome {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	l := New(cfg, budget.NewLocal(), t0)
	level := w.depth
	if w.startEmpty {
		level = 0
	}
	last := t0
	rate := w.rpm / 60
	hl := w.hidden
	if w.startEmpty {
		hl = 0
	}
	winStart := t0
	adv := func(now time.Time) {
		if w.fixed > 0 {
			for !now.Before(winStart.Add(w.fixed)) {
				winStart = winStart.Add(w.fixed)
				level = w.depth
			}
			last = now
			return
		}
		if dt := now.Sub(last).Seconds(); dt > 0 {
			level = math.Min(w.depth, level+dt*rate)
			hl = math.Min(w.hidden, hl+dt*rate)
			last = now
		}
	}
	fmtReset := func(sn time.Time) (time.Time, bool) {
		switch w.reset {
		case resetCeil:
			r := sn.Truncate(time.Second)
			if r.Before(sn) {
				r = r.Add(time.Second)
			}
			return r, false
		case resetFloor:
			return sn.Truncate(time.Second), false
		case resetNearest:
			return sn.Round(time.Second), false
		}
		return sn.Truncate(time.Millisecond), true
	}
	headers := func(now time.Time) (api.RateLimitHeaders, time.Time) {
		sn := now.Add(w.skew)
		full := sn.Add(time.Duration((w.depth - level) / rate * float64(time.Second)))
		if w.fixed > 0 {
			full = winStart.Add(w.fixed).Add(w.skew)
		}
		reset, fine := fmtReset(full)
		h := api.RateLimitHeaders{Requests: api.LimitState{Present: true, Limit: int64(w.rpm), Remaining: int64(math.Max(0, math.Floor(level))), Reset: reset, ResetFine: fine}}
		if w.tokens > 0 {
			h = api.RateLimitHeaders{InputTokens: api.LimitState{Present: true, Limit: int64(w.rpm), Remaining: api.RoundThousand(int64(math.Max(0, level))), Reset: reset, ResetFine: fine}}
		}
		date := sn.Truncate(time.Second)
		if w.noDate {
			date = time.Time{}
		}
		return h, date
	}
	type ev struct {
		at   time.Time
		tk   Ticket
		ok   bool
		sent time.Time
		ra   time.Duration
		h    api.RateLimitHeaders
		date time.Time
	}
	var evs []ev
	var retries []time.Time // due times of queued retries
	var out outcome
	nextCol := t0
	if w.colleague > 0 {
		nextCol = t0.Add(w.colStart + time.Duration(rng.ExpFloat64()/w.colleague*float64(time.Second)))
	}
	half := t0.Add(w.dur / 2)
	admittedHalf := 0
	var accFast, accSlow float64
	accLast := t0
	accelRefuses := func(now time.Time) (time.Duration, bool) {
		if w.accel.window <= 0 {
			return 0, false
		}
		tf := w.accel.window.Seconds()
		ts := w.accel.long * tf
		if dt := now.Sub(accLast).Seconds(); dt > 0 {
			accFast *= math.Exp(-dt / tf)
			accSlow *= math.Exp(-dt / ts)
			accLast = now
		}
		allowed := math.Max(w.accel.floor, w.accel.factor*accSlow/ts)
		if (accFast+1)/tf <= allowed {
			return 0, false
		}
		wait := tf
		if target := allowed*tf - 1; target > 0 {
			wait = tf * math.Log(accFast/target)
		}
		return time.Duration(wait * float64(time.Second)), true
	}
	sent, answered, refusing := 0, 0, 0 // refusing: refused attempts not yet answered
	d := budget.Demand{1, 100, 100, 200}
	unit := 1.0
	if w.tokens > 0 {
		unit = w.tokens
		d = budget.Demand{1, w.tokens, 100, w.tokens + 100}
	}
	for now := t0; now.Before(t0.Add(w.dur)); now = now.Add(time.Millisecond) {
		if w.trace != nil && now.Sub(t0)%(500*time.Millisecond) == 0 {
			w.trace(now, l, sent)
		}
		// colleague arrivals
		for w.colleague > 0 && !nextCol.After(now) {
			adv(nextCol)
			if level >= w.colDemand {
				level -= w.colDemand
				out.colAdmitted++
			} else {
				out.colLimited++
			}
			nextCol = nextCol.Add(time.Duration(rng.ExpFloat64() / w.colleague * float64(time.Second)))
		}
		// answers due
		keep := evs[:0]
		for _, e := range evs {
			if e.at.After(now) {
				keep = append(keep, e)
				continue
			}
			adv(now)
			h, date := headers(now)
			if !e.ok || w.stale {
				h, date = e.h, e.date // decided at admission
			} else if w.staleLimits {
				h = e.h
			}
			r := Result{Reached: true, Latency: e.at.Sub(e.sent), Limits: h, Date: date}
			if e.ok {
				r.Signal = Clean
				answered++
				if w.n > 0 && answered == w.n {
					out.done = now.Sub(t0)
				}
			} else {
				r.Signal = RateLimited
				r.RetryAfter = e.ra
				if w.noHeaders429 {
					r.Limits, r.Date = api.RateLimitHeaders{}, time.Time{}
				}
				retries = append(retries, now.Add(e.ra))
				refusing--
			}
			l.Done(now, e.tk, r)
		}
		evs = keep
		// admissions: the queue is never empty (a backlog); retries due go
		// first but the lane decides either way.
		for w.n == 0 || sent+refusing < w.n {
			tk, g, _ := l.TryAcquire(now, d, d[1])
			if g != budget.Granted {
				break
			}
			// consume one due retry if any (bookkeeping only)
			for i, r := range retries {
				if !r.After(now) {
					retries = append(retries[:i], retries[i+1:]...)
					break
				}
			}
			adv(now)
			accW, accRefused := time.Duration(0), false
			if level >= unit && (w.hidden == 0 || hl >= 1) {
				accW, accRefused = accelRefuses(now)
			}
			if accRefused {
				out.limited++
				out.accelLimited++
				refusing++
				h, date := headers(now)
				evs = append(evs, ev{at: now.Add(w.lat429), tk: tk, ok: false, sent: now, ra: accW, h: h, date: date})
			} else if level >= unit && (w.hidden == 0 || hl >= 1) {
				accFast++
				accSlow++
				sent++
				level -= unit
				hl--
				out.admitted++
				if now.After(half) {
					admittedHalf++
				}
				lat := w.lat
				if w.latSpread > 0 {
					lat += time.Duration(rng.Float64() * float64(w.latSpread))
				}
				h, date := headers(now)
				evs = append(evs, ev{at: now.Add(lat), tk: tk, ok: true, sent: now, h: h, date: date})
			} else {
				out.limited++
				refusing++
				ra := time.Duration((unit - math.Min(level, hl)) / rate * float64(time.Second))
				if w.hidden == 0 {
					ra = time.Duration((unit - level) / rate * float64(time.Second))
				}
				if w.reset != resetFine {
					ra = max(time.Second, ra.Round(time.Second)+time.Second/2).Truncate(time.Second)
				}
				h, date := headers(now)
				evs = append(evs, ev{at: now.Add(w.lat429), tk: tk, ok: false, sent: now, ra: ra, h: h, date: date})
			}
		}
	}
	out.rate = float64(admittedHalf) / (w.dur / 2).Seconds()
	out.binding = (rate - w.colleague*w.colDemand) / unit
	out.st = l.State(t0.Add(w.dur))
	return out
}

func (o outcome) eff() float64 { return o.rate / o.binding }

func (o outcome) share429() float64 {
	return float64(o.limited) / math.Max(1, float64(o.admitted+o.limited))
}

func (o outcome) colleague429() float64 {
	return float64(o.colLimited) / math.Max(1, float64(o.colAdmitted+o.colLimited))
}

func (o outcome) report(t *testing.T, name string) {
	t.Helper()
	b := o.st.Buckets[budget.Requests]
	if !b.Known {
		b = o.st.Buckets[budget.InputTokens]
	}
	share429 := float64(o.limited) / math.Max(1, float64(o.admitted+o.limited))
	col := ""
	if o.colAdmitted+o.colLimited > 0 {
		col = " colleague429=" + ftoa(100*float64(o.colLimited)/float64(o.colAdmitted+o.colLimited)) + "%"
	}
	t.Logf("%-28s eff=%.3f 429=%.2f%% depth=%.1f limit=%d cuts=%d explained=%d%s",
		name, o.rate/o.binding, 100*share429, b.Depth, o.st.Limit, o.st.Stats.Decreases, o.st.Stats.Explained, col)
}

func ftoa(x float64) string { return fmt.Sprintf("%.2f", x) }

// TestReadings: in every reading of the documented API the lane runs at
// ≥ 0.95 of the binding limit with ≤ 1 % of its requests answered 429, and
// a colleague sending within the reserve gets ≤ 1 % 429s.
func TestReadings(t *testing.T) {
	base := world{rpm: 6000, depth: 100, lat: 200 * time.Millisecond, lat429: 20 * time.Millisecond, dur: 60 * time.Second}
	for _, c := range []struct {
		name string
		mod  func(*world)
	}{
		{"1 s bucket, fine resets", func(w *world) {}},
		{"1 s, resets rounded up", func(w *world) { w.reset = resetCeil }},
		{"1 s, resets truncated", func(w *world) { w.reset = resetFloor }},
		{"1 s, resets to the nearest second", func(w *world) { w.reset = resetNearest }},
		{"1 s, truncated, drained at start", func(w *world) { w.reset = resetFloor; w.startEmpty = true }},
		{"1 s, nearest, drained at start", func(w *world) { w.reset = resetNearest; w.startEmpty = true }},
		{"1 s, server 30 s ahead, with Date", func(w *world) { w.skew = 30 * time.Second }},
		{"1 s, server 30 s ahead, no Date", func(w *world) { w.skew = 30 * time.Second; w.noDate = true }},
		{"1 s, server 30 s behind, no Date", func(w *world) { w.skew = -30 * time.Second; w.noDate = true }},
		{"1 s, server 15 s ahead, no Date, drained", func(w *world) { w.skew = 15 * time.Second; w.noDate = true; w.startEmpty = true }},
		{"10 s, server 30 s ahead, no Date, drained", func(w *world) { w.depth = 1000; w.skew = 30 * time.Second; w.noDate = true; w.startEmpty = true }},
		{"60 s bucket, drained", func(w *world) { w.depth = 6000; w.startEmpty = true }},
		{"1 s, 429s without headers", func(w *world) { w.noHeaders429 = true }},
		{"1 s, colleague at 10 %", func(w *world) { w.colleague, w.colDemand = 10, 1 }},
		{"1 s, truncated, drained, colleague at 10 %", func(w *world) { w.reset, w.startEmpty, w.colleague, w.colDemand = resetFloor, true, 10, 1 }},
		{"1 s, drained, colleague at 30 %", func(w *world) { w.startEmpty, w.colleague, w.colDemand = true, 30, 1 }},
		{"1 s, drained, colleague bursts of 5 at 10 %", func(w *world) { w.startEmpty, w.colleague, w.colDemand = true, 2, 5 }},
		{"10 s, drained, colleague bursts of 10 at 10 %", func(w *world) { w.depth, w.startEmpty, w.colleague, w.colDemand = 1000, true, 1, 10 }},
		{"minute headers, a hidden 1 s bucket", func(w *world) {
			w.depth, w.hidden, w.lat, w.dur, w.startEmpty = 6000, 100, 2*time.Second, 300*time.Second, true
		}},
		{"minute headers, a hidden 1 s bucket, coarse, full", func(w *world) {
			w.depth, w.hidden, w.lat, w.dur, w.reset = 6000, 100, 2*time.Second, 300*time.Second, resetCeil
		}},
		{"60 RPM enforced as 1 per second", func(w *world) {
			w.rpm, w.depth, w.hidden, w.lat, w.lat429, w.dur, w.startEmpty, w.reset = 60, 60, 1, 2*time.Second, 50*time.Millisecond, 300*time.Second, true, resetCeil
		}},
		{"60 s bucket, full at start, colleague bursts of 5 at 10 %", func(w *world) {
			w.rpm, w.depth, w.lat, w.dur, w.colleague, w.colDemand = 1200, 1200, 2800*time.Millisecond, 300*time.Second, 0.4, 5
		}},
		{"60 s bucket, full at start, colleague at 10 %", func(w *world) {
			w.rpm, w.depth, w.lat, w.dur, w.colleague, w.colDemand = 1200, 1200, 2800*time.Millisecond, 300*time.Second, 2, 1
		}},
		{"ITPM 30,000 over 1 s (500 deep), 330-token requests", func(w *world) {
			w.rpm, w.depth, w.tokens, w.lat, w.lat429, w.dur, w.startEmpty, w.reset = 30_000, 500, 330, time.Second, 50*time.Millisecond, 300*time.Second, true, resetCeil
		}},
		{"ITPM 450,000 over 1 s, 3,000-token requests", func(w *world) {
			w.rpm, w.depth, w.tokens, w.lat, w.lat429, w.dur, w.startEmpty, w.reset = 450_000, 7500, 3000, time.Second, 50*time.Millisecond, 300*time.Second, true, resetCeil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := base
			c.mod(&w)
			o := w.run(t, Config{Cap: 400})
			o.report(t, c.name)
			if e := o.eff(); e < 0.95 {
				t.Errorf("efficiency %.3f < 0.95", e)
			}
			// The depth is a bound: under no reading larger than the bucket
			// the headers describe (or the reserve could outgrow it).
			b := o.st.Buckets[budget.Requests]
			if !b.Known {
				b = o.st.Buckets[budget.InputTokens]
			}
			if b.Depth > w.depth*1.001 {
				t.Errorf("learned depth %.1f above the true %.0f", b.Depth, w.depth)
			}
			if s := o.share429(); s > 0.01 {
				t.Errorf("%.2f %% of the lane's requests answered 429, want ≤ 1 %%", 100*s)
			}
			if w.colleague > 0 {
				if s := o.colleague429(); s > 0.01 {
					t.Errorf("the colleague got %.2f %% 429s, want ≤ 1 %%", 100*s)
				}
			}
		})
	}
}

// TestReadingsBeyondThePromise records what the reserve cannot promise:
// a colleague whose bursts are as large as the reserve itself (15 of a
// 100-deep bucket) is refused when it comes while sluice holds the bucket
// at its reserve; a fixed-window reading (reset = the window's end, which
// the docs do not describe) costs a quarter of the limit. Measured, not
// goals: docs/control.md quotes them.
func TestReadingsBeyondThePromise(t *testing.T) {
	base := world{rpm: 6000, depth: 100, lat: 200 * time.Millisecond, lat429: 20 * time.Millisecond, dur: 60 * time.Second, startEmpty: true}
	for _, c := range []struct {
		name string
		w    world
		min  float64 // the lane's efficiency at least
	}{
		{"1 s, colleague bursts of 10 at 10 %", world{colleague: 1, colDemand: 10}, 0.95},
		{"1 s, colleague bursts of 20 at 10 %", world{colleague: 0.5, colDemand: 20}, 0.95},
		{"fixed 60 s windows", world{depth: 6000, fixed: time.Minute, reset: resetCeil}, 0.7},
	} {
		w := base
		if c.w.depth > 0 {
			w.depth = c.w.depth
		}
		w.colleague, w.colDemand, w.fixed, w.reset = c.w.colleague, c.w.colDemand, c.w.fixed, c.w.reset
		if w.fixed > 0 {
			w.dur = 5 * w.fixed // windows start empty: several of them
		}
		o := w.run(t, Config{Cap: 400})
		o.report(t, c.name)
		if o.eff() < c.min {
			t.Errorf("%s: efficiency %.3f < %.2f", c.name, o.eff(), c.min)
		}
	}
}

// TestReadingsHiddenSecondFromFull: a limit enforced per second that the
// headers do not show ("60 RPM might be enforced as 1 request per
// second"), on buckets full at the start: the start lets go one second of
// the limit (at least one request), not Config.Start, at once. Measured
// (60 RPM: 1.07 % 429s, 600 RPM: 0.76 % at 0.92 of the limit; with
// Config.Start as the floor 60 RPM drew 23.8 %, the review measured), so
// the bounds are looser than TestReadings' goals, which these readings do
// not meet yet. Probing a capped depth (probeDepth) costs the 60 RPM
// world's ~300 requests 3–4 429s more: 2.17 % where it drew 1.06 %, so
// its bound is 2.5 % (docs/control.md, "A capped depth is probed").
func TestReadingsHiddenSecondFromFull(t *testing.T) {
	for _, c := range []struct {
		name string
		w    world
	}{
		{"60 RPM enforced as 1 per second, full at start", world{rpm: 60, depth: 60, hidden: 1, lat: 2 * time.Second, lat429: 50 * time.Millisecond, dur: 300 * time.Second, reset: resetCeil}},
		{"600 RPM enforced as 10 per second, full at start", world{rpm: 600, depth: 600, hidden: 10, lat: 3 * time.Second, lat429: 50 * time.Millisecond, dur: 300 * time.Second}},
	} {
		o := c.w.run(t, Config{Cap: 400})
		o.report(t, c.name)
		if e := o.eff(); e < 0.9 {
			t.Errorf("%s: efficiency %.3f < 0.9", c.name, e)
		}
		if s := o.share429(); s > 0.025 {
			t.Errorf("%s: %.2f %% of the lane's requests answered 429, want ≤ 2.5 %%", c.name, 100*s)
		}
	}
}

// TestBreakerFloorBeforeAnyAnswer: an API that fails in a millisecond from
// the job's start (a refused connection, a gateway's 503) is no clock for
// the breaker's cool-down: a minute of it costs a handful of attempts, not
// thousands of requests' failure budgets.
func TestBreakerFloorBeforeAnyAnswer(t *testing.T) {
	l := New(Config{Cap: 100}, budget.NewLocal(), t0)
	attempts := 0
	now := t0
	for end := t0.Add(time.Minute); now.Before(end); {
		tk, r, w := l.TryAcquire(now, one, 100)
		if r != budget.Granted {
			now = now.Add(max(w, time.Millisecond))
			continue
		}
		attempts++
		now = now.Add(time.Millisecond)
		l.Done(now, tk, Result{Signal: Failed, Reached: true, Answered: true, Latency: time.Millisecond})
	}
	if attempts > 40 {
		t.Errorf("%d attempts in a minute of 1 ms failures: the cool-down followed the failures' latency", attempts)
	}
}

// TestBucketFirstKnownMidFlight: requests in flight when a dimension's
// bucket first becomes known (here from a 429 naming it) are not charged
// to it again when they settle: the server's view that made it known
// already counts them.
func TestBucketFirstKnownMidFlight(t *testing.T) {
	l := warmLane(Config{Cap: 100, Start: 100, Reserve: -1})
	d := budget.Demand{1, 330, 144, 474}
	var tks []Ticket
	for range 50 {
		tks = append(tks, tkAt(t, l, t0))
	}
	tk := tkAt(t, l, t0)
	l.Done(t0, tk, Result{Signal: RateLimited, Reached: true, Named: api.NamedLimit{Limiter: api.LimiterInputTokens, PerMinute: 60000}})
	for _, tk := range tks {
		l.Done(t0, tk, Result{Signal: Clean, Reached: true, Latency: rtt, InputTokens: 330, OutputTokens: 144})
	}
	if _, _, w := l.TryAcquire(t0, d, 330); w > time.Second {
		t.Errorf("the next request waits %v: the 50 in flight were charged twice", w)
	}
}

// TestWorkspaceLimitInTokensHeaders: the tokens-* family shows the most
// restrictive limit in effect — here a workspace input-token limit
// (workspace limits are set per limiter type). The lane charges input +
// output to it; the server input only; its higher remaining, once calm,
// corrects the model.
func TestWorkspaceLimitInTokensHeaders(t *testing.T) {
	const (
		limit   = 600_000.0 // tokens per minute
		depth   = 100_000.0
		in, out = 330.0, 144.0
		lat     = 200 * time.Millisecond
	)
	rate := limit / 60
	l := New(Config{Cap: 400}, budget.NewLocal(), t0)
	level, last := 0.0, t0
	adv := func(now time.Time) {
		if dt := now.Sub(last).Seconds(); dt > 0 {
			level = math.Min(depth, level+dt*rate)
			last = now
		}
	}
	hdr := func(now time.Time) api.RateLimitHeaders {
		return api.RateLimitHeaders{Tokens: api.LimitState{Present: true, Limit: int64(limit),
			Remaining: api.RoundThousand(int64(math.Max(0, level))),
			Reset:     now.Add(time.Duration((depth - level) / rate * float64(time.Second))), ResetFine: true}}
	}
	type ev struct {
		at time.Time
		tk Ticket
		ok bool
		h  api.RateLimitHeaders
	}
	var evs []ev
	late := 0
	dur := 120 * time.Second
	for now := t0; now.Before(t0.Add(dur)); now = now.Add(time.Millisecond) {
		keep := evs[:0]
		for _, e := range evs {
			if e.at.After(now) {
				keep = append(keep, e)
				continue
			}
			adv(now)
			r := Result{Reached: true, Answered: true, Latency: lat, Date: now.Truncate(time.Second)}
			if e.ok {
				r.Signal, r.Limits, r.InputTokens, r.OutputTokens = Clean, hdr(now), in, out
			} else {
				r.Signal, r.Limits = RateLimited, e.h
			}
			l.Done(now, e.tk, r)
		}
		evs = keep
		for {
			d := l.Demand(in, 256)
			tk, g, _ := l.TryAcquire(now, d, in)
			if g != budget.Granted {
				break
			}
			adv(now)
			if level >= in {
				level -= in
				if now.After(t0.Add(dur / 2)) {
					late++
				}
				evs = append(evs, ev{at: now.Add(lat), tk: tk, ok: true})
			} else {
				evs = append(evs, ev{at: now.Add(20 * time.Millisecond), tk: tk, h: hdr(now)})
			}
		}
	}
	if eff := float64(late) / (dur / 2).Seconds() / (rate / in); eff < 0.95 {
		t.Errorf("efficiency %.3f < 0.95: the lane kept charging output to a limit the server charges input only", eff)
	}
}
