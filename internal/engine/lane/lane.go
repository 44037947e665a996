// Package lane is the controller of one organization × model pool: how many
// requests it may have in flight and when it may send the next one.
//
// One lane combines, as one controller (docs/control.md gives the rules
// and the documented API semantics each rests on):
//   - the Budget: permits, and token buckets fed by the rate-limit headers
//     of every answer, whose depth the lane learns from remaining, reset
//     and the answer's Date (a limit may be enforced over a shorter
//     interval than a minute);
//   - signals kept apart: a 429 the headers explain is the bucket's
//     business; a 429 they do not explain is congestion, cut once per
//     episode; 529s, 5xx and lost connections pause growth when more than
//     noise and cut only when a sustained share; consecutive failures open
//     a breaker;
//   - a concurrency limit that starts with one header probe, then at
//     what one latency of its buckets can pay for (start.go), ramps by
//     slow start (timed by answers, so a world ten times faster ramps ten
//     times faster), holds its rate on an acceleration 429, returns
//     quickly to the last good limit after a cut, and restarts the ramp
//     after the lane sat idle;
//   - a pause of the whole lane for the retry-after of a congestion 429;
//   - a reserve for colleagues: the lane never spends the last Reserve
//     share of what a bucket holds — save for the initial burst (one mean
//     latency at most) of a cold start into buckets the first answer
//     shows full, until anyone else's use shows.
//
// Every method takes the time; the lane never sleeps. It is safe for
// concurrent use.
package lane

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// Config tunes a lane. Zero fields take the defaults noted.
type Config struct {
	// Cap is the etiquette cap on concurrency (required, ≥ 1).
	Cap int
	// Start is the first concurrency limit unless the first answer shows
	// every bucket full (start.go: then it is the least the start lets go
	// at once), and where the ramp restarts after the lane sat idle
	// (default max(4, Cap/8), at most Cap).
	Start int
	// Decrease multiplies the limit on a congestion episode (default 0.8).
	Decrease float64
	// Reserve is the share of every bucket left for colleagues
	// (default 0.15; negative means none).
	Reserve float64
	// MinLimit is the floor of the concurrency limit (default 1).
	MinLimit int
	// InitialOutput is the output-token expectation before any answer
	// (default min(max_tokens, 256) per request, see Demand).
	InitialOutput float64
}

func (c *Config) defaults() {
	if c.Cap < 1 {
		c.Cap = 1
	}
	if c.Start <= 0 {
		c.Start = max(4, c.Cap/8)
	}
	c.Start = min(c.Start, c.Cap)
	if c.Decrease <= 0 || c.Decrease >= 1 {
		c.Decrease = 0.8
	}
	if c.Reserve == 0 {
		c.Reserve = 0.15
	}
	if c.Reserve < 0 {
		c.Reserve = 0
	}
	if c.MinLimit <= 0 {
		c.MinLimit = 1
	}
}

// The control constants. None is a wall-clock duration: the lane's
// clocks are its own latency and its answers, so the same world run
// faster is controlled the same way.
const (
	// RampDoublingLatencies is how many mean latencies the ramp takes to
	// double the limit while its answers are clean and its headers show
	// room (the planner models the ramp with it): ln 2 ÷ it is added to
	// the limit per clean answer that finds the lane full, below the
	// target. Each acceleration hold after a rise doubles it for the lane
	// (up to maxRampLatencies: an acceleration limit's windows are
	// seconds, which may be tens of latencies) until the ramp reaches the
	// cap.
	RampDoublingLatencies = 1.0
	maxRampLatencies      = 64.0
	// returnShare is the share of the limit before a congestion cut that
	// slow start returns to (the last good limit).
	returnShare = 0.9
	// idleLatencies of nothing admitted and nothing in flight restart the
	// ramp.
	idleLatencies = 8
	// An acceleration 429 (start.go) comes within riseLatencies of a rise
	// of the lane's rate, and after a hold only once the admitted rate rose
	// accelRise-fold, or while the lane sends under accelBelow × every
	// limit's refill; it holds the limit at the admitted rate (at most
	// accelBack × the limit the refused attempt was sent under) for
	// holdLatencies.
	riseLatencies = 16
	accelBack     = 0.9
	accelRise     = 1.1
	accelBelow    = 0.95
	holdLatencies = 4
	// sustainedShare of 529s, or of failures, over the recent answers
	// cuts the limit; overloadFloor × the last good limit is as low as
	// such cuts go.
	sustainedShare = 0.25
	overloadFloor  = 0.5
	// breakerFailures consecutive failures open the breaker for
	// breakerLatencies mean latencies, doubling per re-open up to
	// breakerMaxLatencies of them and at most breakerMax.
	breakerFailures     = 10
	breakerLatencies    = 4
	breakerMaxLatencies = 32
	breakerMax          = 60 * time.Second
	// namedShare of a limit named only by a 429's message (its headers
	// absent) is what the lane paces that dimension at: a cushion for
	// what it cannot see.
	namedShare = 0.98
	// depthDecay lets the depth bound forget, per answer, so a bucket that
	// got shallower is followed.
	depthDecay = 1e-3
	// minDepthSeconds: no bucket is taken to hold less than a second of
	// its limit — the shortest interval the docs mention ("60 RPM might be
	// enforced as 1 request per second").
	minDepthSeconds = 1.0

	// A capped depth (capDepth) is probed: doubled after probeLatencies
	// mean latencies without a halving, a wait that doubles with each
	// halving up to maxProbeLatencies. A 429 with room in every bucket,
	// sent above a limit's refill, may be a shorter interval's or an
	// acceleration limit's; read as the first, a bucket the headers show
	// full would be left unspent for good, and no passive sign tells the
	// two apart (docs/control.md, "A capped depth is probed").
	probeLatencies    = 32.0
	maxProbeLatencies = 1024.0

	// tokenRounding is the error of a token remaining header (rounded to
	// the nearest thousand).
	tokenRounding = 500
	// unknownLatency stands in for the mean latency before any answer.
	unknownLatency = time.Second
)

// Signal is what an attempt's outcome means to the lane.
type Signal int

// Signals.
const (
	// Clean: an answer (any 2xx).
	Clean Signal = iota
	// RateLimited: 429 rate_limit_error (the lane's limits).
	RateLimited
	// Overloaded: 529 overloaded_error (the API's own load).
	Overloaded
	// Failed: 5xx or no answer.
	Failed
	// Aborted: nothing reached the server (canceled before sending).
	Aborted
	// Neutral: an answer that says nothing about capacity (a 4xx the
	// request caused, a dead key).
	Neutral
)

// Ticket is what TryAcquire charged; hand it back to Done.
type Ticket struct {
	charged budget.Demand // what the request was expected to cost
	grant   budget.Grant  // what the budget deducted for it
	est     float64       // the input estimate before correction
	at      time.Time
	limit   float64 // the concurrency limit it was admitted under
	adm     int64   // the lane's admissions, this one included, when it was admitted
}

// Result is what the lane learns from a finished attempt.
type Result struct {
	Signal Signal
	// Limits are the rate-limit headers of the answer, if any.
	Limits api.RateLimitHeaders
	// Date is the answer's Date header (zero when absent).
	Date time.Time
	// Named is the limit a 429's message named, if any.
	Named api.NamedLimit
	// RetryAfter is the server's hint, already capped by the caller.
	RetryAfter time.Duration
	// Usage of an answer: input tokens that count toward ITPM (uncached +
	// cache writes) and output tokens. Zero when the server did not answer.
	InputTokens, OutputTokens float64
	// Reached is false when the request surely did not reach the server.
	Reached bool
	// Answered: a response came back (any status). A lost connection may
	// have reached the server but told the lane nothing.
	Answered bool
	Latency  time.Duration
}

type breakerState int

const (
	closed breakerState = iota
	open
	halfOpen
)

// Lane is the controller. Create it with New.
type Lane struct {
	cfg    Config
	budget budget.Budget

	mu sync.Mutex
	// The concurrency limit (float: growth comes in fractions), the target
	// slow start grows it to, and the last good limit.
	limit, target, good float64
	lastCut             time.Time // the last cut of the limit
	pausedUntil         time.Time // a congestion 429's retry-after
	lastActive          time.Time // the last admission or answer
	busyAt              time.Time // the lane last had every slot in use (or refused for want of one)
	inFlight            int
	latency             float64 // EWMA of clean answers' latency, seconds
	anyLatency          float64 // EWMA of every reached attempt's latency, seconds
	inScale             float64 // EWMA of actual / estimated input tokens
	outMean             float64 // EWMA of output tokens; 0 until the first answer
	share529, shareFail float64 // EWMAs of the share of answers that were 529s, failures
	consecFail          int
	lastAnswer          Signal // the signal of the last answered attempt (Trouble)
	breaker             breakerState
	breakerUntil        time.Time
	breakerAt           time.Time // when the breaker last went half-open
	opens               int       // consecutive opens
	// answered: an attempt reached the server and came back. Until then
	// the lane sends one request (a header probe): the buckets' state is
	// unknown, and a blind first wave into an org a colleague has drained
	// is a wave of 429s.
	answered bool
	// clockHi bounds (server clock − ours) from above, in seconds: from
	// Date (whole seconds, truncated: the server's time is below Date + 1)
	// and from every reset (never in the server's past), each taken
	// against the attempt's send (the headers may be older than Done).
	clockHi    float64
	clockKnown bool
	depth      [budget.NumDims]float64 // the largest lower bound on the depth, decaying
	depthFor   [budget.NumDims]int64   // the limit depth is for
	seenLo     [budget.NumDims]float64 // the most remaining surely seen (less rounding)
	// depthCap caps a dimension's depth after 429s its headers said had
	// room (a limit enforced over a shorter interval than the headers
	// describe, or an acceleration limit's that looks the same); while it
	// holds, the headers do not raise the level. It is probed (doubled,
	// the headers heard again) after probeLat mean latencies without a
	// halving, a wait that doubles with each halving (probeDepth).
	depthCap    [budget.NumDims]float64
	lastCap     [budget.NumDims]time.Time // each cap was last halved or probed
	probeLat    [budget.NumDims]float64
	probing     [budget.NumDims]bool      // probed since the last halving
	bucketAt    [budget.NumDims]time.Time // each bucket last held work back (TryAcquire)
	largest     [budget.NumDims]float64   // the largest charge of a request
	visible     [budget.NumDims]bool      // headers seen
	named       [budget.NumDims]bool      // paced from a 429's message only
	lowHeadroom bool
	// The start and the acceleration hold (start.go).
	unshared  bool      // a cold start into full buckets, no one else's use seen since: the reserve is coldShare of it after the burst
	burst     bool      // and within a latency of it: no reserve (the initial burst)
	rampLat   float64   // mean latencies per doubling of the ramp now
	riseAt    time.Time // the lane's rate last rose: its start, a growth of the limit
	holdUntil time.Time // no growth before then: an acceleration hold
	lastAccel time.Time // the last acceleration signal that held the limit
	accelRate float64   // ansRate at the last hold
	// stepAdmitted counts the clean answers of attempts sent before a
	// hold made before any clean answer (admittedStep).
	stepAdmitted float64
	ansRate      float64   // clean answers a second, averaged over about a mean latency
	ansAt        time.Time // the last clean answer
	// admRate is the lane's sends a second the server admitted, averaged
	// over about a mean latency: a send counts when granted and is taken
	// back when its 429 comes (admitted).
	admRate float64
	admAt   time.Time
	lowSeen float64 // the requests bucket's Lowered at the last answer
	// The start lets go startBurst at startAt and startRate a second
	// after, until that passes the limit (startRate 0: over).
	startAt               time.Time
	startBurst, startRate float64
	stats                 Stats
	waiting               bool // a Waited period is open: since waitSince, for waitWhy
	waitWhy               Wait
	waitSince             time.Time
}

// Stats counts a lane's life.
type Stats struct {
	Admitted    int64
	Clean       int64
	RateLimited int64 // 429s
	// Explained 429s are those the headers (or the message) put on a
	// bucket: no cut. Acceleration (below) are read as an acceleration
	// limit. The rest are congestion.
	Explained int64
	// OrgLimited counts the 429s, on this lane or another of its
	// organization, that named a limit on the organization's usage across
	// all models: each slows every lane of it (orgwide.go).
	OrgLimited int64
	Overloaded int64 // 529s
	Failed     int64
	Decreases  int64
	Restarts   int64 // ramps restarted after the lane sat idle
	// Acceleration counts the 429s read as an acceleration limit (a rise
	// of the lane's rate refused while every bucket showed room).
	Acceleration int64
	Breaker      int64 // times the breaker opened
	Pauses       int64
	Refusals     [budget.NumRefusals]int64 // counted when work was waiting
	PausedTime   time.Duration
	// Waited is how long work waited on the lane, by what held it back:
	// a period starts at a refusal and ends at the next admission, at a
	// refusal for another reason, or at Idle (the dispatcher's: nothing of
	// the lane's pool queued, the lane dead, or the run stopping). Unlike
	// Refusals, which count how often the dispatcher asked, it says which
	// limit bound the lane. When a bucket and the concurrency limit both
	// refuse, the in-process budget names the bucket; the fleet's names
	// its permits.
	Waited [NumWaits]time.Duration
}

// Wait says what held work back on a lane.
type Wait int

// Waits.
const (
	WaitCap          Wait = iota // concurrency at the etiquette cap
	WaitRamp                     // concurrency under the cap: the ramp or a cut
	WaitRequests                 // the requests bucket (less the reserve)
	WaitInputTokens              // the input-tokens bucket
	WaitOutputTokens             // the output-tokens bucket
	WaitTokens                   // the combined (or workspace) token bucket
	WaitPause                    // a pause after a congestion 429 (retry-after)
	WaitBreaker                  // the breaker, open after consecutive failures
	NumWaits
)

var waitNames = [NumWaits]string{"etiquette cap", "concurrency (ramp/AIMD)", "requests", "input_tokens", "output_tokens", "tokens", "retry-after pause", "circuit breaker"}

func (w Wait) String() string { return waitNames[w] }

// New returns a lane whose ramp starts now.
func New(cfg Config, b budget.Budget, now time.Time) *Lane {
	cfg.defaults()
	return &Lane{cfg: cfg, budget: b, limit: float64(cfg.Start), target: float64(cfg.Cap), inScale: 1, rampLat: RampDoublingLatencies}
}

// Config returns the lane's effective configuration.
func (l *Lane) Config() Config { return l.cfg }

// Limit returns the concurrency limit at now.
func (l *Lane) Limit(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limitAt(now)
}

func (l *Lane) limitLocked() int {
	return max(l.cfg.MinLimit, int(math.Min(float64(l.cfg.Cap), l.limit)))
}

// lat is the mean latency of answers; before any, of failed attempts;
// before any attempt ended, a stand-in.
func (l *Lane) lat() time.Duration {
	switch {
	case l.latency > 0:
		return time.Duration(l.latency * float64(time.Second))
	case l.anyLatency > 0:
		return time.Duration(l.anyLatency * float64(time.Second))
	}
	return unknownLatency
}

// MeanLatency is the lane's mean latency of answers (of failed attempts
// before any answer; a stand-in of 1 s before any attempt ended): the
// clock the lane's own rules, and the dispatcher's backoff, are timed by.
func (l *Lane) MeanLatency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lat()
}

// cutSpacing is the least time between two cuts: one mean latency (none
// before the first answer: the sent-after-the-cut rule alone holds then).
func (l *Lane) cutSpacing() time.Duration {
	return time.Duration(l.latency * float64(time.Second))
}

// Demand returns what a request of estInput input tokens and maxTokens is
// charged: input corrected by the learned ratio, output by the learned mean
// (capped by maxTokens), and their sum for the combined token bucket.
func (l *Lane) Demand(estInput, maxTokens float64) budget.Demand {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.outMean
	if out == 0 {
		out = l.cfg.InitialOutput
		if out == 0 {
			out = 256
		}
	}
	if maxTokens > 0 {
		out = math.Min(out, maxTokens)
	}
	in, o := math.Ceil(estInput*l.inScale), math.Ceil(out)
	return budget.Demand{1, in, o, in + o}
}

// TryAcquire admits one request of demand d at now, or says why not and,
// when the wait is known (a pause, the breaker or a bucket), for how long.
// A refusal by concurrency has wait 0: wait for a Done.
func (l *Lane) TryAcquire(now time.Time, d budget.Demand, estInput float64) (Ticket, budget.Refusal, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.restartIfIdle(now)
	if now.Before(l.pausedUntil) {
		l.waitFor(now, WaitPause)
		return Ticket{}, budget.ByRequests, l.pausedUntil.Sub(now)
	}
	limit := l.limitAt(now)
	if !l.answered {
		limit = 1
	}
	switch l.breaker {
	case open:
		if now.Before(l.breakerUntil) {
			l.waitFor(now, WaitBreaker)
			return Ticket{}, budget.ByRequests, l.breakerUntil.Sub(now)
		}
		l.breaker, l.breakerAt = halfOpen, now
		fallthrough
	case halfOpen:
		limit = 1 // one probe at a time until an answer closes it
	}
	grant, r, wait := l.budget.TryTake(now, limit, l.reserve(), d)
	if r != budget.Granted {
		if r == budget.ByConcurrency {
			l.busyAt = now
		}
		l.stats.Refusals[r]++
		var why Wait
		switch r {
		case budget.ByConcurrency:
			switch {
			case l.breaker == halfOpen:
				why = WaitBreaker
			case limit >= l.cfg.Cap:
				why = WaitCap
			default:
				why = WaitRamp
			}
		case budget.ByRequests:
			why = WaitRequests
			l.bucketAt[budget.Requests] = now
		case budget.ByInputTokens:
			why = WaitInputTokens
			l.bucketAt[budget.InputTokens] = now
		case budget.ByOutputTokens:
			why = WaitOutputTokens
			l.bucketAt[budget.OutputTokens] = now
		case budget.ByTokens:
			why = WaitTokens
			l.bucketAt[budget.Tokens] = now
		default:
			panic(fmt.Sprintf("lane: refusal %d has no wait kind", r))
		}
		l.waitFor(now, why)
		return Ticket{}, r, wait
	}
	l.endWait(now)
	l.admitted(now, 1, now)
	l.stats.Admitted++
	l.inFlight++
	l.lastActive = now
	if l.inFlight >= limit {
		l.busyAt = now
	}
	for i, x := range d {
		l.largest[i] = math.Max(l.largest[i], x)
	}
	return Ticket{charged: d, grant: grant, est: estInput, at: now, limit: float64(limit), adm: l.stats.Admitted}, budget.Granted, 0
}

// restartIfIdle restarts the ramp of a lane that sent and heard nothing
// for idleLatencies mean latencies: a step from idle to full speed is what
// trips acceleration limits. Slow start then returns it to the limit it
// had. Requires l.mu.
func (l *Lane) restartIfIdle(now time.Time) {
	if l.inFlight > 0 || l.lastActive.IsZero() || l.latency <= 0 {
		return
	}
	if now.Sub(l.lastActive) < time.Duration(idleLatencies*l.latency*float64(time.Second)) {
		return
	}
	if start := float64(l.cfg.Start); l.limit > start {
		l.target = math.Max(l.target, l.limit)
		l.limit = start
		l.stats.Restarts++
	}
	l.lastActive = time.Time{} // once per idle spell
}

// Idle says no work waits for the lane at now: an open Waited period
// ends.
func (l *Lane) Idle(now time.Time) {
	l.mu.Lock()
	l.endWait(now)
	l.mu.Unlock()
}

// waitFor opens a Waited period for why at now, ending one for another
// reason. Requires l.mu.
func (l *Lane) waitFor(now time.Time, why Wait) {
	if l.waiting && l.waitWhy == why {
		return
	}
	l.endWait(now)
	l.waiting, l.waitWhy, l.waitSince = true, why, now
}

// endWait ends the open Waited period, if any, at now. Requires l.mu.
func (l *Lane) endWait(now time.Time) {
	if l.waiting {
		l.stats.Waited[l.waitWhy] += max(now.Sub(l.waitSince), 0)
		l.waiting = false
	}
}

// Done settles an admitted attempt with what came of it.
func (l *Lane) Done(now time.Time, t Ticket, r Result) {
	actual := budget.Demand{}
	if r.Reached {
		switch r.Signal {
		case Neutral:
			actual = budget.Demand{1} // refused before the model ran
		case Clean:
			actual = t.charged
			if r.InputTokens > 0 || r.OutputTokens > 0 {
				actual = budget.Demand{1, r.InputTokens, r.OutputTokens, r.InputTokens + r.OutputTokens}
			}
		case RateLimited, Overloaded:
			// Refused before admission: nothing charged. If the server did
			// charge it, its remaining says so and Observe takes it.
		default:
			actual = t.charged // the server may have run it
		}
	}
	l.budget.Settle(now, t.grant, actual)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight = max(0, l.inFlight-1)
	l.lastActive = now
	first := false
	if r.Reached && r.Signal != Aborted && (r.Signal != Failed || r.Answered) {
		first = !l.answered
		l.answered = true
	}
	if r.Reached && r.Latency > 0 {
		if l.anyLatency == 0 {
			l.anyLatency = r.Latency.Seconds()
		} else {
			l.anyLatency += 0.05 * (r.Latency.Seconds() - l.anyLatency)
		}
	}
	v := l.learn(now, t.at, r)
	if r.Signal == RateLimited {
		l.admitted(now, -1, t.at)
		l.rateLimited(now, t, r, &v)
	}
	if v.Any() {
		l.budget.Observe(now, v, t.grant)
	}
	snap := l.budget.Snapshot(now)
	l.shared(now, t, r, &snap)
	if first {
		l.start(now, &snap)
	}
	l.lowHeadroom = false
	for _, b := range snap.Buckets {
		if b.Known && b.Headroom(l.reserve()) < 0 {
			l.lowHeadroom = true
		}
	}

	switch r.Signal {
	case Clean, RateLimited, Overloaded, Failed:
		if r.Reached {
			l.lastAnswer = r.Signal
		}
	}
	switch r.Signal {
	case Clean:
		l.clean(now, t, r)
	case Overloaded, Failed:
		l.failure(now, t, r.Signal)
	}
}

// learn reads the clock and every dimension's depth from an answer's
// headers and returns the view for the budget; sent is when the attempt
// was granted. Requires l.mu.
//
// Every figure it keeps is a bound that holds under any reading the docs
// allow, so no reading can make the depth (and the reserve, a share of it)
// larger than the bucket: the server's clock is bounded from above by Date
// and by the resets; a whole-second reset may be rounded up, down or to
// the nearest second; a token remaining is rounded to the thousand. Each
// answer gives a lower bound on the depth; the depth is the largest of
// them (decaying slowly), never under what was seen remaining nor a
// second of the limit.
//
// The headers may be older than the moment the lane hears them: a
// stream's arrive at its start and the lane hears it at its end, and a
// server may compute them when it admits the request. All the docs allow
// is that they were made between the send and now, so the clock offset is
// bounded against the send (never against now, which would put the
// server's clock behind by up to the latency and every later shorter
// answer's depth too high), and this answer's own Date and resets bound
// the moment its headers describe.
func (l *Lane) learn(now, sent time.Time, r Result) budget.View {
	var v budget.View
	states := limitStates(&r.Limits)
	if sent.IsZero() || sent.After(now) {
		sent = now
	}
	var ownBuf [1 + budget.NumDims]time.Time // on the stack: one an answer was three allocations
	own := ownBuf[:0]                        // upper bounds on the server's time when these headers were made
	if !r.Date.IsZero() {
		own = append(own, r.Date.Add(time.Second))
	}
	for _, s := range states {
		if s.Present && s.Limit > 0 {
			own = append(own, s.Reset.Add(time.Duration(resetSlack(s)*float64(time.Second))))
		}
	}
	for _, at := range own {
		if h := at.Sub(sent).Seconds(); !l.clockKnown || h < l.clockHi {
			l.clockHi, l.clockKnown = h, true
		}
	}
	if l.clockKnown {
		l.clockHi += 0.001 // widen per answer: drift
	}
	serverHi := now.Add(time.Duration(l.clockHi * float64(time.Second)))
	for _, at := range own {
		if at.Before(serverHi) {
			serverHi = at
		}
	}
	for i, s := range states {
		if !s.Present || s.Limit <= 0 {
			continue
		}
		l.visible[i], l.named[i] = true, false
		limit := float64(s.Limit)
		slack := 0.0
		if budget.Dim(i) != budget.Requests {
			slack = tokenRounding
		}
		if l.depthFor[i] != s.Limit {
			l.depth[i], l.seenLo[i], l.depthCap[i], l.depthFor[i] = 0, 0, 0, s.Limit
			l.probeLat[i], l.probing[i] = 0, false
		}
		remLo := math.Max(0, float64(s.Remaining)-slack)
		l.seenLo[i] = math.Max(l.seenLo[i], remLo)
		fullAfter := s.Reset.Sub(serverHi).Seconds() - resetSlack(s)
		sample := remLo + math.Max(0, fullAfter)*limit/60
		l.depth[i] = math.Max(sample, l.depth[i]*(1-depthDecay))
		d := math.Max(math.Max(l.depth[i], l.seenLo[i]), math.Max(l.largest[i], minDepthSeconds*limit/60))
		if r.Signal == Clean {
			l.probeDepth(now, budget.Dim(i), d, limit) // a 429 is read first (rateLimited), never a probe's trigger
		}
		if c := l.depthCap[i]; c > 0 {
			d = math.Min(d, c)
		}
		v[i] = budget.DimView{Known: true, Limit: limit, Depth: math.Min(limit, d), Remaining: float64(s.Remaining), Slack: slack,
			NoRaise: l.depthCap[i] > 0 && !l.probing[i]}
	}
	return v
}

// resetSlack is how far a reset header may be from the true instant, in
// seconds: a whole-second one may be rounded either way.
func resetSlack(s api.LimitState) float64 {
	if s.ResetFine {
		return 0.001
	}
	return 1
}

func limitStates(h *api.RateLimitHeaders) [budget.NumDims]api.LimitState {
	return [budget.NumDims]api.LimitState{h.Requests, h.InputTokens, h.OutputTokens, h.Tokens}
}

func dimOf(l api.Limiter) (budget.Dim, bool) {
	switch l {
	case api.LimiterRequests:
		return budget.Requests, true
	case api.LimiterInputTokens:
		return budget.InputTokens, true
	case api.LimiterOutputTokens:
		return budget.OutputTokens, true
	case api.LimiterTokens:
		return budget.Tokens, true
	}
	return 0, false
}

// rateLimited handles a 429: a bucket's business when the headers or the
// message put it on one, else a congestion episode. Requires l.mu.
func (l *Lane) rateLimited(now time.Time, t Ticket, r Result, v *budget.View) {
	l.stats.RateLimited++
	if r.Named.Org {
		// The organization's limit across all models, not this pool's:
		// no bucket of the lane explains it (orgwide.go).
		l.stats.OrgLimited++
		l.congestion(now, t.at, r.RetryAfter)
		return
	}
	states := limitStates(&r.Limits)
	for i, s := range states {
		tol := 0.0
		if budget.Dim(i) != budget.Requests {
			tol = tokenRounding
		}
		if s.Present && t.charged[i] > 0 && float64(s.Remaining)-tol < math.Max(1, t.charged[i]) {
			l.stats.Explained++ // the bucket was short: Observe lowers the level to it
			return
		}
	}
	if d, ok := dimOf(r.Named.Limiter); ok {
		switch {
		case !l.visible[d]:
			// A limit the headers never show: pace it at a cushion under
			// the named figure, from empty now.
			limit := namedShare * float64(r.Named.PerMinute)
			v[d] = budget.DimView{Known: true, Limit: limit, Depth: math.Max(2*l.largest[d], minDepthSeconds*limit/60), Remaining: 0}
			l.named[d] = true
		case !states[d].Present:
			// Named, known from earlier headers, absent on this answer.
			if b := l.budget.Snapshot(now).Buckets[d]; b.Known {
				v[d] = budget.DimView{Known: true, Limit: b.Limit, Depth: b.Depth, Remaining: 0}
			}
		default:
			// Named, and its headers show room: the limit is enforced over
			// a shorter interval than they describe. A smaller burst is the
			// answer, not a smaller concurrency.
			l.capDepth(now, t, budget.Dim(d), v)
		}
		l.stats.Explained++
		return
	}
	// Nothing named, and every bucket the headers show has room: a limit
	// enforced over a shorter interval than they describe, or an
	// acceleration limit. During a rise of the lane's own rate it is read
	// as acceleration: the rate is held, no depth halved (start.go).
	// Otherwise a smaller burst answers the first; while a depth can still
	// shrink, that is the answer, and only once every depth is at its
	// floor is it congestion (a cut of the concurrency).
	shown := false
	for _, s := range states {
		shown = shown || (s.Present && s.Limit > 0)
	}
	if shown && l.accelerationRead(now, t) {
		if !l.lastAccel.IsZero() && t.at.After(l.lastAccel) && t.at.Before(l.holdUntil) && r.RetryAfter < l.lat() {
			// Sent at the held rate and refused again, with a retry-after
			// shorter than a latency: whatever limit this is, the lane
			// must not resend as fast as 429s come back, and the pause
			// does not stop it. The requests bucket's level goes down to
			// the reserve (no depth halved), so the next send waits for a
			// request's refill.
			if dv := &v[budget.Requests]; states[budget.Requests].Present && dv.Known && dv.Depth > 0 {
				dv.Remaining = math.Min(dv.Remaining, l.reserve()*dv.Depth)
			}
		}
		l.acceleration(now, t, r.RetryAfter)
		return
	}
	atFloor, probe := true, l.probed(t)
	for i, s := range states {
		if s.Present && s.Limit > 0 {
			if probe && !l.probedDim(t, budget.Dim(i)) {
				continue // a probe's answer: the probed depth's, not the others'
			}
			if !l.capDepth(now, t, budget.Dim(i), v) {
				atFloor = false
			}
		}
	}
	if !atFloor {
		return
	}
	l.congestion(now, t.at, r.RetryAfter)
}

// congestion is a 429 no bucket explains (an acceleration limit, a limit
// the headers do not describe, the organization's across all models): one
// cut per episode, and a pause for retryAfter. Only an attempt sent after
// the last cut may cut again, and not within a latency of it: the rest of
// a burst was already in flight when the first 429 came back. Requires
// l.mu.
func (l *Lane) congestion(now, sent time.Time, retryAfter time.Duration) {
	if sent.After(l.lastCut) && now.Sub(l.lastCut) >= l.cutSpacing() {
		pre := math.Min(float64(l.cfg.Cap), l.limit)
		minL := float64(l.cfg.MinLimit)
		l.good = math.Max(minL, returnShare*pre)
		l.target = l.good
		l.limit = math.Max(minL, pre*l.cfg.Decrease)
		l.lastCut = now
		l.stats.Decreases++
	}
	l.pause(now, retryAfter)
}

// pause stops the lane for retryAfter from now (a longer pause stands).
// Requires l.mu.
func (l *Lane) pause(now time.Time, retryAfter time.Duration) {
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(l.pausedUntil) {
			if now.Before(l.pausedUntil) {
				l.stats.PausedTime += until.Sub(l.pausedUntil)
			} else {
				l.stats.PausedTime += retryAfter
			}
			l.pausedUntil = until
			l.stats.Pauses++
		}
	}
}

// capDepth takes dimension d's bucket as empty now, in the view of this
// answer, and halves its depth (to no less than a second of its limit or
// the largest request) — once per episode for each dimension, like a cut:
// only for an attempt sent after its last halving, a latency on. It
// reports whether the depth was already at its floor. Requires l.mu.
func (l *Lane) capDepth(now time.Time, t Ticket, d budget.Dim, v *budget.View) bool {
	dv := &v[d]
	if !dv.Known || dv.Limit <= 0 {
		return true
	}
	dv.Remaining = 0
	floor := math.Max(l.largest[d], minDepthSeconds*dv.Limit/60)
	cur := dv.Depth
	if c := l.depthCap[d]; c > 0 {
		cur = math.Min(cur, c)
	}
	dv.Depth = math.Min(dv.Depth, cur)
	if cur <= floor*1.001 {
		return true
	}
	probeRefused := l.probedDim(t, d) // a 429 of the probe's: no episode spacing
	if probeRefused || (t.at.After(l.lastCap[d]) && now.Sub(l.lastCap[d]) >= l.cutSpacing()) {
		l.depthCap[d] = math.Max(floor, cur/2)
		dv.Depth = math.Min(dv.Depth, l.depthCap[d])
		l.lastCap[d], l.probing[d] = now, false
		l.probeLat[d] = math.Min(maxProbeLatencies, math.Max(probeLatencies, 2*l.probeLat[d]))
	}
	return false
}

// shareAlpha weighs one answer in the sustained-share EWMAs: about the
// last max(20, 2 × limit) answers. Requires l.mu.
func (l *Lane) shareAlpha() float64 { return 1 / math.Max(20, 2*l.limit) }

// clean handles an answer. Requires l.mu.
func (l *Lane) clean(now time.Time, t Ticket, r Result) {
	l.stats.Clean++
	if tau := l.lat().Seconds(); !l.ansAt.IsZero() {
		l.ansRate *= math.Exp(-math.Max(0, now.Sub(l.ansAt).Seconds()) / tau)
		l.ansRate += 1 / tau
	}
	l.ansAt = now
	const alpha = 0.05
	if r.Latency > 0 {
		if l.latency == 0 {
			l.latency = r.Latency.Seconds()
		} else {
			l.latency += alpha * (r.Latency.Seconds() - l.latency)
		}
	}
	if r.OutputTokens > 0 {
		if l.outMean == 0 {
			l.outMean = r.OutputTokens
		} else {
			l.outMean += alpha * (r.OutputTokens - l.outMean)
		}
	}
	if r.InputTokens > 0 && t.est > 0 {
		l.inScale += alpha * (r.InputTokens/t.est - l.inScale)
	}
	a := l.shareAlpha()
	l.share529 -= a * l.share529
	l.shareFail -= a * l.shareFail
	l.consecFail = 0
	if l.breaker != closed {
		l.breaker, l.opens = closed, 0
	}
	// Growth pauses while 529s or failures are more than noise (half the
	// share that cuts), and happens only while the limit is what holds the
	// lane back (every slot was in use within the last latency): a
	// bucket-bound lane does not inflate a limit it does not use.
	if l.share529 >= sustainedShare/2 || l.shareFail >= sustainedShare/2 {
		return
	}
	l.good = math.Max(l.good, math.Min(float64(l.cfg.Cap), l.limit))
	l.admittedStep(t)
	if l.busyAt.IsZero() || now.Sub(l.busyAt) > l.lat() || now.Before(l.holdUntil) {
		return
	}
	was := l.limit
	if l.limit < l.target {
		l.limit = math.Min(l.target, l.limit+math.Ln2/l.rampLat)
	} else if l.limit < float64(l.cfg.Cap) {
		l.limit = math.Min(float64(l.cfg.Cap), l.limit+1/math.Max(1, l.limit))
	}
	l.grew(now, was)
}

// failure handles a 529, a 5xx or a lost connection: the API's trouble,
// not this lane's rate. Requires l.mu.
func (l *Lane) failure(now time.Time, t Ticket, sig Signal) {
	a := l.shareAlpha()
	if sig == Overloaded {
		l.stats.Overloaded++
		l.share529 += a * (1 - l.share529)
		l.shareFail -= a * l.shareFail
	} else {
		l.stats.Failed++
		l.shareFail += a * (1 - l.shareFail)
		l.share529 -= a * l.share529
	}
	l.consecFail++
	switch {
	case l.breaker == halfOpen && !t.at.Before(l.breakerAt):
		l.openBreaker(now) // the probe failed
	case l.breaker == closed && l.consecFail >= breakerFailures:
		l.openBreaker(now)
	}
	if l.share529 < sustainedShare && l.shareFail < sustainedShare {
		return
	}
	// A sustained share: the API cannot take this lane's load. Cut, at
	// most once per latency, never below half the last good limit, and
	// return to that limit by slow start when it ends.
	if t.at.After(l.lastCut) && now.Sub(l.lastCut) >= l.cutSpacing() {
		floor := math.Max(float64(l.cfg.MinLimit), overloadFloor*math.Max(l.good, float64(l.cfg.Start)))
		if cur := math.Min(float64(l.cfg.Cap), l.limit); cur > floor {
			l.target = math.Max(l.target, l.good)
			l.limit = math.Max(floor, cur*l.cfg.Decrease)
			l.lastCut = now
			l.stats.Decreases++
		}
	}
}

// openBreaker stops sending for breakerLatencies mean latencies, doubling
// with each consecutive open. Requires l.mu.
func (l *Lane) openBreaker(now time.Time) {
	lat := l.lat()
	if l.latency == 0 {
		// No answer yet: failures that come back in a millisecond (a
		// refused connection, a gateway's 503) are no clock to time a
		// cool-down by.
		lat = max(lat, unknownLatency)
	}
	cool := min(breakerLatencies*lat<<min(l.opens, 16), breakerMaxLatencies*lat, breakerMax)
	l.breaker, l.breakerUntil = open, now.Add(cool)
	l.opens++
	l.stats.Breaker++
}

// Blocked is how long the lane is known to send nothing from now: a
// retry-after pause or an open breaker; 0 when it could send.
func (l *Lane) Blocked(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := max(l.pausedUntil.Sub(now), 0)
	if l.breaker == open {
		b = max(b, l.breakerUntil.Sub(now))
	}
	return b
}

// Trouble is the API's trouble holding the lane back, if any: Overloaded
// or Failed when the lane's last answer was a 529 or a failure (5xx, a
// lost connection) and the trouble is more than noise — its breaker is
// not closed, or 529s or failures are a sustained share of its answers;
// Clean otherwise, and at once after a clean answer or a 429 (the shares
// decay only on clean answers, so they alone would still blame 529s
// long after the lane was held by its rate limits). Whoever answers a
// request that waited out its deadline unsent says which (the proxy: a
// 529 of its own, not a 429 that blames the rate limits).
func (l *Lane) Trouble() Signal {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastAnswer != Overloaded && l.lastAnswer != Failed {
		return Clean
	}
	if l.breaker == closed && l.share529 < sustainedShare && l.shareFail < sustainedShare {
		return Clean
	}
	return l.lastAnswer
}

// Headroom scores the lane for routing at now: the smaller of its free
// concurrency share and its fullest-constrained bucket's share above the
// reserve. 0 when paused, open or full; higher is better.
func (l *Lane) Headroom(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.pausedUntil) || (l.breaker == open && now.Before(l.breakerUntil)) {
		return 0
	}
	lim := float64(l.limitAt(now))
	s := l.budget.Snapshot(now)
	h := (lim - float64(s.InUse)) / lim
	for _, b := range s.Buckets {
		if b.Known {
			h = math.Min(h, b.Headroom(l.reserve()))
		}
	}
	return math.Max(0, h)
}

// State is a lane's state for displays and reports.
type State struct {
	Limit       int
	Cap         int
	InFlight    int
	Paused      bool
	BreakerOpen bool
	LowHeadroom bool
	OutMean     float64
	InScale     float64
	Latency     time.Duration
	Buckets     [budget.NumDims]budget.BucketState
	// Visible says which dimensions' headers the lane has seen; Named,
	// which it paces only from a 429's message.
	Visible, Named [budget.NumDims]bool
	Stats          Stats
}

// State returns a snapshot at now.
func (l *Lane) State(now time.Time) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.budget.Snapshot(now)
	st := State{
		Limit: l.limitAt(now), Cap: l.cfg.Cap, InFlight: s.InUse,
		Paused: now.Before(l.pausedUntil), BreakerOpen: l.breaker != closed,
		LowHeadroom: l.lowHeadroom, OutMean: l.outMean, InScale: l.inScale,
		Latency: time.Duration(l.latency * float64(time.Second)),
		Buckets: s.Buckets, Visible: l.visible, Named: l.named, Stats: l.stats,
	}
	if l.waiting { // the open period, up to now
		st.Stats.Waited[l.waitWhy] += max(now.Sub(l.waitSince), 0)
	}
	return st
}
