package sim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// lane is the simulated server-side rate limiting of one organization ×
// model pool: RPM, ITPM and OTPM buckets, the optional acceleration limit,
// the in-flight count, the colleagues that share the buckets and the lane's
// statistics. All fields are guarded by mu.
//
// Colleague arrivals are processed lazily: every method that reads or
// charges a bucket first calls catchUp(now), so each arrival is admitted at
// its own time against buckets last touched no later than it.
type lane struct {
	mu    sync.Mutex
	org   *org
	pool  api.Pool
	scale float64
	// per-minute limits in real time (configured × scale); 0 = unlimited.
	rpm, itpm, otpm int64
	req, in, out    bucket

	omit   map[api.Limiter]bool // limiters whose headers are left out
	coarse bool                 // whole-second resets even when time-scaled
	clock  serverClock

	colleagues []*colleague

	accel              Acceleration
	accelFast, accelSl float64 // decayed admission counts
	accelLast          time.Time

	inFlight int
	stats    LaneStats
	epoch    time.Time // stats start; perSecond[i] counts admissions in second i
}

// Reasons a request was not admitted.
const (
	limitedRequests     = "requests"
	limitedInput        = "input_tokens"
	limitedOutput       = "output_tokens"
	limitedAcceleration = "acceleration"
)

func newLane(o *org, p api.Pool, lim Limits, cfg *Config, now time.Time) *lane {
	k := cfg.TimeScale
	l := &lane{org: o, pool: p, scale: k, accel: cfg.Acceleration, epoch: now, accelLast: now, coarse: cfg.CoarseHeaders,
		clock: serverClock{skew: cfg.ClockSkew.D(), rounding: cfg.ResetRounding}}
	for _, name := range cfg.OmitHeaders {
		if l.omit == nil {
			l.omit = map[api.Limiter]bool{}
		}
		l.omit[api.Limiter(name)] = true
	}
	l.rpm, l.itpm, l.otpm = scaleLimit(lim.RPM, k), scaleLimit(lim.ITPM, k), scaleLimit(lim.OTPM, k)
	window := cfg.BucketWindow.D().Seconds() / 60 // fraction of a minute a full bucket holds
	mk := func(perMin int64) bucket {
		b := newBucket(float64(perMin)*window, float64(perMin)/60, now)
		if cfg.BucketsStartEmpty {
			b.level = 0
		}
		return b
	}
	l.req, l.in, l.out = mk(l.rpm), mk(l.itpm), mk(l.otpm)
	l.stats.LimitedBy = map[string]int64{}
	return l
}

func scaleLimit(perMin int64, k float64) int64 {
	if perMin <= 0 {
		return 0
	}
	return int64(math.Round(float64(perMin) * k))
}

// admission is the outcome of lane.admit.
type admission struct {
	ok         bool
	limitedBy  string        // which limit refused it
	retryAfter time.Duration // when it would fit
}

// admit decides whether a request of in input tokens (those that count
// toward ITPM) and outCharge output tokens fits now, and if so charges it
// and counts it in flight.
func (l *lane) admit(now time.Time, in, outCharge int64) admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.catchUp(now)
	var refused admission
	refuse := func(why string, b *bucket, n float64) {
		if w := b.wait(n, now); !refused.ok && (refused.limitedBy == "" || w > refused.retryAfter) {
			refused = admission{limitedBy: why, retryAfter: w}
		}
	}
	if !l.req.fits(1, now) {
		refuse(limitedRequests, &l.req, 1)
	}
	if !l.in.fits(float64(in), now) {
		refuse(limitedInput, &l.in, float64(in))
	}
	if !l.out.fits(float64(outCharge), now) {
		refuse(limitedOutput, &l.out, float64(outCharge))
	}
	if refused.limitedBy == "" && l.accel.Enabled {
		if w, ok := l.accelerationRefuses(now); ok {
			refused = admission{limitedBy: limitedAcceleration, retryAfter: w}
		}
	}
	if refused.limitedBy != "" {
		l.stats.RateLimited++
		l.stats.LimitedBy[refused.limitedBy]++
		return refused
	}
	l.req.take(1, now)
	l.in.take(float64(in), now)
	l.out.take(float64(outCharge), now)
	if l.accel.Enabled {
		l.accelFast++
		l.accelSl++
	}
	l.inFlight++
	l.stats.Admitted++
	l.stats.PeakConcurrency = max(l.stats.PeakConcurrency, l.inFlight)
	sec := int(now.Sub(l.epoch) / time.Second)
	if sec >= 0 && sec < maxHistogramSeconds {
		for len(l.stats.AdmittedPerSecond) <= sec {
			l.stats.AdmittedPerSecond = append(l.stats.AdmittedPerSecond, 0)
		}
		l.stats.AdmittedPerSecond[sec]++
	}
	return admission{ok: true}
}

// maxHistogramSeconds bounds the per-second histogram (one day).
const maxHistogramSeconds = 86400

// accelerationRefuses decays the admission counters to now and reports
// whether one more admission would make the short-window rate exceed
// Factor × the long-window rate (and the floor); if so, how long until the
// short-window count decays enough. Requires l.mu.
func (l *lane) accelerationRefuses(now time.Time) (time.Duration, bool) {
	tauFast := l.accel.Window.D().Seconds() / l.scale
	tauSlow := l.accel.longWindows() * tauFast
	if dt := now.Sub(l.accelLast).Seconds(); dt > 0 {
		l.accelFast *= math.Exp(-dt / tauFast)
		l.accelSl *= math.Exp(-dt / tauSlow)
		l.accelLast = now
	}
	allowed := math.Max(l.accel.FloorRPM*l.scale/60, l.accel.Factor*l.accelSl/tauSlow) // per second
	if (l.accelFast+1)/tauFast <= allowed {
		return 0, false
	}
	// accelFast·e^(-t/τ) + 1 = allowed·τ  →  t = τ·ln(accelFast / (allowed·τ − 1))
	target := allowed*tauFast - 1
	wait := tauFast
	if target > 0 {
		wait = tauFast * math.Log(l.accelFast/target)
	}
	return time.Duration(wait * float64(time.Second)), true
}

// finish ends an admitted request: it leaves flight, and under
// reserve-max-tokens accounting the unused reservation is refunded.
func (l *lane) finish(now time.Time, refund int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.catchUp(now)
	l.inFlight--
	if refund > 0 {
		l.out.give(float64(refund), now)
	}
}

// count applies f to the lane's stats under the lock.
func (l *lane) count(f func(s *LaneStats)) {
	l.mu.Lock()
	f(&l.stats)
	l.mu.Unlock()
}

// setHeaders writes the anthropic-ratelimit-* family for the lane's state now.
func (l *lane) setHeaders(h http.Header, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.catchUp(now)
	// Sub-second resets only matter in a time-scaled world, unless the
	// world models an API whose precision does not follow the scale.
	fine := l.scale != 1 && !l.coarse
	put := func(name api.Limiter, limit, remaining int64, reset time.Time) {
		if l.omit[name] {
			return
		}
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "limit"))] = []string{strconv.FormatInt(limit, 10)}
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "remaining"))] = []string{strconv.FormatInt(remaining, 10)}
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "reset"))] = []string{l.clock.formatReset(reset, fine)}
	}
	if l.rpm > 0 {
		put(api.LimiterRequests, l.rpm, l.req.remaining(now), l.req.resetAt(now))
	}
	if l.itpm > 0 {
		put(api.LimiterInputTokens, l.itpm, api.RoundThousand(l.in.remaining(now)), l.in.resetAt(now))
	}
	if l.otpm > 0 {
		put(api.LimiterOutputTokens, l.otpm, api.RoundThousand(l.out.remaining(now)), l.out.resetAt(now))
	}
	if l.itpm > 0 && l.otpm > 0 {
		reset := l.in.resetAt(now)
		if r := l.out.resetAt(now); r.After(reset) {
			reset = r
		}
		put(api.LimiterTokens, l.itpm+l.otpm, api.RoundThousand(l.in.remaining(now)+l.out.remaining(now)), reset)
	}
}

// colleague is one Colleague's Poisson arrival process on a lane.
type colleague struct {
	cfg  *Colleague
	rng  *rng
	rate float64   // arrivals per real second
	next time.Time // the first arrival not yet processed
}

// addColleague starts cl's arrivals on the lane at now. Its rate is
// Share × the lane's RPM, which is already × K.
func (l *lane) addColleague(cl *Colleague, r *rng, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &colleague{cfg: cl, rng: r, rate: cl.Share * float64(l.rpm) / 60}
	if c.rate <= 0 {
		return // Validate refuses a colleague on a lane without an RPM limit
	}
	c.next = now.Add(time.Duration(float64(cl.Start.D()) / l.scale)).Add(c.gap())
	l.colleagues = append(l.colleagues, c)
}

// maxGap bounds an inter-arrival time (about 146 years): a tiny share's
// gap would overflow time.Duration, and a negative one would never end
// catchUp.
const maxGap = time.Duration(1 << 62)

// gap draws an exponential inter-arrival time.
func (c *colleague) gap() time.Duration {
	g := -math.Log(1-c.rng.float()) / c.rate * float64(time.Second)
	if g >= float64(maxGap) {
		return maxGap
	}
	return time.Duration(g)
}

// catchUp processes every colleague arrival due by now, earliest first,
// each at its own arrival time. Requires l.mu.
func (l *lane) catchUp(now time.Time) {
	for len(l.colleagues) > 0 {
		c := l.colleagues[0]
		for _, x := range l.colleagues[1:] {
			if x.next.Before(c.next) {
				c = x
			}
		}
		if c.next.After(now) {
			return
		}
		l.colleagueArrives(c.cfg, c.next)
		c.next = c.next.Add(c.gap())
	}
}

// colleagueArrives admits one colleague request at its arrival time against
// the lane's buckets, or drops it as a 429 would refuse it (open loop: it is
// not retried). Only the colleague counters record it. Requires l.mu.
func (l *lane) colleagueArrives(cl *Colleague, at time.Time) {
	in, out := float64(cl.InputTokens), float64(cl.OutputTokens)
	if l.org.cfg.SpendCapReached || !l.req.fits(1, at) || !l.in.fits(in, at) || !l.out.fits(out, at) {
		l.stats.ColleagueLimited++
		return
	}
	l.req.take(1, at)
	l.in.take(in, at)
	l.out.take(out, at)
	l.stats.ColleagueAdmitted++
}

// serverClock is the simulated server's clock: skewed from the real one,
// and rounding whole-second resets one way.
type serverClock struct {
	skew     time.Duration
	rounding string // "up" (default), "down", "nearest"
}

// formatReset renders a reset instant in RFC 3339 on the server's clock:
// whole seconds (rounded up unless configured otherwise), or milliseconds
// (rounded up) when fine.
func (c serverClock) formatReset(t time.Time, fine bool) string {
	t = t.Add(c.skew).UTC()
	if fine {
		if t.Truncate(time.Millisecond).Before(t) {
			t = t.Truncate(time.Millisecond).Add(time.Millisecond)
		}
		return t.Format("2006-01-02T15:04:05.000Z07:00")
	}
	switch c.rounding {
	case "down":
		t = t.Truncate(time.Second)
	case "nearest":
		t = t.Round(time.Second)
	default:
		// Up, so the bucket is full by the stated instant.
		if t.Truncate(time.Second).Before(t) {
			t = t.Truncate(time.Second).Add(time.Second)
		}
	}
	return t.Format(time.RFC3339)
}

// limitMessage is the text of a rate-limit 429, in the API's wording.
func (l *lane) limitMessage(why, model string) string {
	var n int64
	unit := ""
	switch why {
	case limitedRequests:
		n, unit = l.rpm, "requests"
	case limitedInput:
		n, unit = l.itpm, "input tokens"
	case limitedOutput:
		n, unit = l.otpm, "output tokens"
	default:
		return fmt.Sprintf("This request was rate limited because your organization's usage increased too sharply (org: %s, model: %s). Ramp up your traffic gradually and maintain consistent usage patterns.", l.org.cfg.ID, model)
	}
	return fmt.Sprintf("This request would exceed your organization's rate limit of %s %s per minute (org: %s, model: %s). For details, refer to: https://docs.claude.com/en/api/rate-limits.", commas(n), unit, l.org.cfg.ID, model)
}

// commas renders 1200000 as "1,200,000".
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
