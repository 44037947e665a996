package lane

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// The start of a lane and the acceleration hold (docs/control.md, "The
// concurrency limit" and "The reserve on a cold start").
//
// The docs give the buckets' state in every answer's headers ("The API
// uses the token bucket algorithm … your capacity is continuously
// replenished up to your maximum limit") and warn of acceleration limits
// without a figure ("ramp up your traffic gradually"). So the lane starts
// at what its buckets, as its first answer shows them, can pay for over
// one latency; grows while its answers are clean and its headers show
// room; and on a 429 that no bucket explains during a rise of its own
// rate it holds its rate instead of reading a shallower bucket into it.

// fullShare: a bucket the first answer shows at least this full has not
// been used by anyone lately.
const fullShare = 0.9

// coldShare of the reserve is held on a cold start into full buckets,
// after the initial burst and until anyone else's use shows (shared): all
// of it. Less would give a finite job back what it does not rebuild by
// its end, but a colleague arriving meanwhile whose bursts do not fit in
// what is held is refused and, refused, shows in no header: two thirds
// measured 0.927 of the ideal in start-rt-60s where all of it measures
// 0.909 (the goal is 0.93), and a colleague's bursts of 60 at 30 % of the
// limit got 4.7 % 429s where all of it gives 2.3 %; a third measured
// 0.944 and gave bursts of 40 and 60 at 10 % 5.3 and 8.3 % where all of it
// gives none (TestReadingsLateColleague; docs/control.md, "The reserve on
// a cold start"). A variable so the test can measure the others.
var coldShare = 1.0

// signSlack is how many requests an answer's remaining may be under the
// lane's model, beyond what the headers' age explains, without being a
// sign of anyone else's use (rounding, a send's timing).
const signSlack = 2

// reserve is the share of every bucket left for colleagues now. Requires
// l.mu.
func (l *Lane) reserve() float64 {
	switch {
	case !l.unshared:
		return l.cfg.Reserve
	case l.burst:
		return 0
	}
	return coldShare * l.cfg.Reserve
}

// start sets the limit at the lane's first answer, from the buckets as
// the answer left them (snap). When every bucket shown is full (no one
// else used the organization lately), the limit is what one mean latency
// of them can pay for
// (the level above the reserve plus a latency's refill, in requests of the
// largest charge yet), within the etiquette cap and never under the
// burst below (not Config.Start, which may be more than a second of a
// small limit). The lane does not send it at once: over the first
// latency it lets go the burst one second of the limit pays for (at
// least one request) — the shortest interval the docs say a limit may be
// enforced over ("60 RPM might be enforced as 1 request per second") —
// and then requests at the limit's rate (limitAt): at the limit from the
// first second, and never faster than a limit enforced per second
// allows. Every bucket full and the reserve not given up by the user:
// the initial burst may spend the reserve too, for one mean latency from
// the first answer at most (shared). No bucket shown:
// Config.Start, at once; buckets that show others' use (not full):
// Config.Start, the ramp growing from it and the budget pacing the refill.
// Requires l.mu.
func (l *Lane) start(now time.Time, snap *budget.Snapshot) {
	l.riseAt = now
	known, full := false, true
	for _, b := range snap.Buckets {
		if b.Known && b.Limit > 0 {
			known = true
			full = full && b.Depth > 0 && b.Level >= fullShare*b.Depth
		}
	}
	if !known || !full {
		return // others use the organization: ramp from Start, the budget pacing the refill
	}
	l.unshared = l.cfg.Reserve > 0
	l.burst = l.unshared
	lat := l.lat().Seconds()
	n, burst, rate := float64(l.cfg.Cap), float64(l.cfg.Cap), math.Inf(1)
	for i, b := range snap.Buckets {
		if !b.Known || b.Limit <= 0 {
			continue
		}
		per := math.Max(1, l.largest[i])
		avail := math.Max(0, b.Level-b.Reserve(l.reserve()))
		n = math.Min(n, (avail+b.Limit/60*lat)/per)
		burst = math.Min(burst, math.Min(avail, minDepthSeconds*b.Limit/60)/per)
		rate = math.Min(rate, b.Limit/60/per)
	}
	burst = math.Max(1, math.Floor(burst))
	l.limit = math.Min(float64(l.cfg.Cap), math.Max(burst, math.Floor(n)))
	l.startAt, l.startBurst, l.startRate = now, burst, rate
}

// limitAt is the concurrency limit at now: the limit, and during the
// start no more than the start lets go by now (start): its one-second
// burst (at least one request) and the limit's rate since. Requires l.mu.
func (l *Lane) limitAt(now time.Time) int {
	lim := l.limitLocked()
	if l.startRate <= 0 {
		return lim
	}
	c := l.startBurst + l.startRate*math.Max(0, now.Sub(l.startAt).Seconds())
	if c >= float64(lim) {
		l.startRate = 0 // the start is over
		return lim
	}
	return int(c)
}

// shared ends a cold start's exemption from the reserve one mean latency
// after the first answer — the initial burst; after it the reserve
// applies, since a colleague's refused request uses nothing and so
// shows in no header — or sooner at the first sign
// of anyone else's use of the organization: a 429 (its buckets were
// shorter than the lane's own spending explains, or a limit it cannot
// see), or an answer whose requests remaining is lower than the lane's own
// spending explains by more than the answer's age and rounding can: more
// than one request beyond the refill between t's send and now (the
// headers were made in between, so they may lag the refill by that
// much). Requests are counted exactly; token counts carry the lane's
// estimates, so a lower token remaining is no proof. Requires l.mu.
func (l *Lane) shared(now time.Time, t Ticket, r Result, snap *budget.Snapshot) {
	b := snap.Buckets[budget.Requests]
	lowered := b.Lowered - l.lowSeen
	l.lowSeen = b.Lowered
	if !l.unshared {
		return
	}
	lag := 0.0
	if !t.at.IsZero() && now.After(t.at) {
		lag = math.Max(0, b.Limit/60*now.Sub(t.at).Seconds()-float64(l.stats.Admitted-t.adm))
	}
	if r.Signal == RateLimited || lowered > signSlack+lag {
		l.unshared, l.burst = false, false
		return
	}
	if now.Sub(l.startAt) >= l.lat() {
		l.burst = false
	}
}

// accelerationRead reports whether a 429 of attempt t that no bucket
// explains is read as an acceleration limit: the attempt was in flight at
// the last hold (the same episode), or the last hold came before any clean
// answer after the first (a refused start step: what the server admits
// is not known yet, so the next 429 is the same episode's, not a shorter
// interval's), or the lane sent t under every limit the headers show
// (underEveryLimit: no bucket of theirs enforced over a second or more
// refuses that), or the lane's rate rose lately — within
// riseLatencies of its start or of a growth of its limit — and grew since
// the last hold, and the server now admits accelRise × the rate it
// admitted at the last hold or more (an acceleration limit admits more as
// its longer average catches up). Otherwise a 429 that comes while the
// rate is held, or again at about the rate refused last time, is not
// acceleration: the rule of a limit enforced over a shorter interval
// reads it. Requires l.mu.
func (l *Lane) accelerationRead(now time.Time, t Ticket) bool {
	if l.riseAt.IsZero() {
		return false
	}
	if !l.lastAccel.IsZero() && (!t.at.After(l.lastAccel) || l.accelRate == 0) {
		return true // the same episode, or a hold made before any clean answer showed what the server admits
	}
	if l.underEveryLimit(t) {
		return true // no bucket of the limits shown, a second deep or more, refuses this rate
	}
	if !l.lastAccel.IsZero() && (!l.riseAt.After(l.lastAccel) || l.ansRate < accelRise*l.accelRate) {
		return false // the rate held, or refused again at about the rate refused last time
	}
	return now.Sub(l.riseAt) <= time.Duration(riseLatencies*l.lat().Seconds()*float64(time.Second))
}

// grew notes a growth of the limit from was: a rise of the lane's rate
// when it lets one more request go. Requires l.mu.
func (l *Lane) grew(now time.Time, was float64) {
	if math.Floor(l.limit) <= math.Floor(was) {
		return
	}
	l.riseAt = now
	if l.limit >= float64(l.cfg.Cap) {
		l.rampLat = RampDoublingLatencies
	}
}

// acceleration reads a 429 of attempt t that no bucket explains, during a
// rise of the lane's rate, as an acceleration limit: once per episode (an
// attempt sent after the last hold, a latency on) the limit is held at
// accelBack × the limit t was sent under, or at the rate answers came at
// over the last latency if lower (what the server admitted; before any
// clean answer after the first, at Config.Start if lower), for
// holdLatencies mean latencies; the ramp that resumes after it is half as
// fast when the lane's rate rose since the last hold (a hold that follows
// a hold, the rate not risen, only lowers the rate: the ramp that was too
// fast was slowed already); the lane pauses for the retry-after, as on
// congestion (429s come back fast, and a held limit alone would resend
// into the refusal at once), and after the pause the held limit comes
// back at its rate over a latency, not as one clump of every free slot.
// No depth is halved: the buckets are not what refused. Requires l.mu.
func (l *Lane) acceleration(now time.Time, t Ticket, retryAfter time.Duration) {
	l.stats.Acceleration++
	l.pause(now, retryAfter)
	if !t.at.After(l.lastAccel) || now.Sub(l.lastAccel) < l.cutSpacing() {
		// The same episode: each of its refusals lowers the hold to what
		// the server admitted (a hold before any clean answer is
		// admittedStep's).
		if !l.lastAccel.IsZero() && l.accelRate > 0 {
			l.limit = math.Min(l.limit, math.Max(float64(l.cfg.MinLimit), l.admRate*l.lat().Seconds()))
		}
		return
	}
	rose := l.lastAccel.IsZero() || l.riseAt.After(l.lastAccel)
	l.lastAccel = now
	sent := t.limit
	if sent <= 0 {
		sent = l.limit
	}
	held := accelBack * math.Min(math.Min(float64(l.cfg.Cap), l.limit), sent)
	if l.ansRate > 0 {
		// What the server admitted over the last latency: a rate an
		// acceleration limit of any window and ratio above 1 keeps
		// admitting while the lane holds it.
		held = math.Min(held, l.ansRate*l.lat().Seconds())
	} else {
		// No clean answer since the first yet (a step refused before
		// its answers came): what it admitted is unknown, Config.Start
		// is what the lane would have ramped from.
		held = math.Min(held, float64(l.cfg.Start))
	}
	l.limit = math.Max(float64(l.cfg.MinLimit), held)
	l.stepAdmitted = 0
	// After the pause the held limit comes back at its rate, a request
	// at a time over a latency, not as one clump of every free slot: a
	// clump after a pause is a sharp rise over any short window.
	l.startAt, l.startBurst = l.pausedUntil, 1
	if l.startAt.Before(now) {
		l.startAt = now
	}
	l.startRate = l.limit / l.lat().Seconds()
	l.accelRate = l.ansRate
	hold := float64(holdLatencies)
	l.holdUntil = now.Add(time.Duration(hold * l.lat().Seconds() * float64(time.Second)))
	if rose {
		l.rampLat = math.Min(maxRampLatencies, 2*l.rampLat)
	}
	l.stats.Decreases++
}

// underEveryLimit reports whether the lane sent attempt t below the
// refill of every limit the headers show, in a burst no larger than a
// second of each: the answers of the last latency came slower than each
// limit's rate, and the limit t was sent under, in requests of t's charge,
// fits in one second of each. A bucket of such a limit enforced over any
// interval the docs allow (a second or more: "60 RPM might be enforced as
// 1 request per second") does not refuse that; so a 429 with room in
// every bucket is not a shorter interval's, and an acceleration limit is
// the docs' other cause of it. Requires l.mu.
func (l *Lane) underEveryLimit(t Ticket) bool {
	if l.ansRate <= 0 || t.limit <= 0 {
		return false
	}
	snap := l.budget.Snapshot(t.at)
	any := false
	for i, b := range snap.Buckets {
		c := t.charged[i]
		if !b.Known || b.Limit <= 0 || c <= 0 {
			continue
		}
		any = true
		r := b.Limit / 60
		if l.ansRate*c >= accelBelow*r || t.limit*c > minDepthSeconds*r {
			return false
		}
	}
	return any
}

// admitted adds n sends made at sent to admRate at now (n = -1: a send
// refused, taken back). Requires l.mu.
func (l *Lane) admitted(now time.Time, n float64, sent time.Time) {
	tau := l.lat().Seconds()
	if now.After(l.admAt) {
		if !l.admAt.IsZero() {
			l.admRate *= math.Exp(-now.Sub(l.admAt).Seconds() / tau)
		}
		l.admAt = now
	}
	l.admRate = math.Max(0, l.admRate+n/tau*math.Exp(-math.Max(0, now.Sub(sent).Seconds())/tau))
}

// admittedStep counts, after a hold made before any clean answer (at
// Config.Start at most: what the server admitted of the refused step was
// not known), the clean answers of attempts sent before it — what the
// server admitted of the step, at about one time — and raises the hold to
// accelBack × their count when that is higher. Requires l.mu.
func (l *Lane) admittedStep(t Ticket) {
	if l.lastAccel.IsZero() || l.accelRate != 0 || t.at.After(l.lastAccel) {
		return
	}
	l.stepAdmitted++
	if a := math.Min(float64(l.cfg.Cap), accelBack*l.stepAdmitted); a > l.limit {
		l.limit = a
	}
}

// probeDepth doubles dimension d's depth cap (up to shown, the depth
// the headers bound) once it has gone probeLat[d] mean latencies without
// a halving — and as long as the limit (per minute) takes to refill
// probeLat[d] of the largest request, so a small limit is not probed
// more often than every probeLat of its requests — while a bucket held
// work back within the last latency, and lets the headers raise the
// level again until the next halving: the cap is a reading that only a
// burst can test, and what it left unspent shows only in the headers.
// Requires l.mu.
func (l *Lane) probeDepth(now time.Time, d budget.Dim, shown, limit float64) {
	c := l.depthCap[d]
	if c <= 0 || c >= shown || limit <= 0 || l.bucketAt[d].IsZero() || now.Sub(l.bucketAt[d]) > l.lat() {
		return // nothing capped, or no work held back by this bucket lately (a lull: nothing to test it with)
	}
	wait := math.Max(l.lat().Seconds(), math.Max(1, l.largest[d])/(limit/60))
	if now.Sub(l.lastCap[d]).Seconds() < l.probeLat[d]*wait {
		return
	}
	l.lastCap[d], l.probing[d] = now, true
	l.depthCap[d] = math.Min(shown, 2*c)
	// What the deeper bucket lets go comes at the ramp's pace from the
	// rate the cap held the lane to, not as one step to the limit.
	l.limit = math.Min(l.limit, math.Max(float64(l.cfg.MinLimit), float64(l.inFlight+1)))
}

// probedDim reports whether attempt t was sent after a probe of
// dimension d's depth cap, the probe standing: its 429 is the probe's
// answer. Requires l.mu.
func (l *Lane) probedDim(t Ticket, d budget.Dim) bool {
	return l.probing[d] && !t.at.Before(l.lastCap[d])
}

// probed reports whether attempt t was sent after a standing probe of any
// dimension. Requires l.mu.
func (l *Lane) probed(t Ticket) bool {
	for d := range l.probing {
		if l.probedDim(t, budget.Dim(d)) {
			return true
		}
	}
	return false
}
