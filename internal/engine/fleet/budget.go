package fleet

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// laneBudget is one lane's budget.Budget, shared through Redis. The process
// counts its own permits (inUse) and every script sets its Redis count to
// that number; Snapshot answers from the state the last script returned.
//
// Settle makes no Redis call of its own: the released permit and the
// refund ride on the next script — the Observe that follows it when the
// answer had headers, the next TryTake, or else the heartbeat. Redis may
// so count a permit a moment too long, never too short.
//
// Every script carries a sequence number (seq) and the lane's refunds as a
// running total; Redis keeps the last applied of both, so a call repeated
// or overtaken (a lost reply, a heartbeat sent before a TryTake but
// arriving after it) changes nothing twice.
type laneBudget struct {
	f    *Fleet
	name string // laneName
	org  string
	pool api.Pool
	cap  int
	keys []string
	// local is the fallback's buckets: headers scaled by 1/members. Its own
	// permit count is kept at 0 (every take is paired at once with a
	// settle); the permits are inUse.
	local *budget.Local
	// provisional: a key whose probe named no organization ("key:LABEL"):
	// never shared (labels collide between users); always spends as the
	// fallback does, at 1/members of the cap and of the headers.
	provisional bool

	mu    sync.Mutex
	inUse int
	// fallbackOut counts permits the fallback granted (from the local
	// buckets) since the lane last had no permit out: while it is above
	// zero a Settle cannot tell whose permit it is, so it sends Redis
	// charges only — a refund of tokens Redis never gave would over-fill
	// its buckets. It clears when inUse reaches 0.
	fallbackOut  int
	blockedUntil time.Time // after a fleet-wide refusal, until a Settle or Poll
	cache        [budget.NumDims]budget.BucketState
	cacheAt      time.Time
	peak         int // most permits held during the current outage

	seq int64 // last sequence number sent
	// refund is the running total of taken − actual sent to Redis (charges
	// and refunds of Settles); applied is its value at the last call Redis
	// applied (what Snapshot has not seen in the cache yet is the rest).
	refund, applied budget.Demand
	// What Redis last reported holding for this member: its permits as of
	// sequence number ackSeq. doubt is the least count sent by a failed
	// call since (it may have been applied, or may still be); doubtSeq the
	// latest such call. acked() is the lower of the two.
	ackSeq, doubtSeq int64
	ackHeld, doubt   int
}

// reply is a lane script's answer.
type reply struct {
	code    budget.Refusal
	wait    time.Duration
	taken   budget.Demand
	marks   budget.Demand
	buckets [budget.NumDims]budget.BucketState
	members int64
	lost    bool
	ackSeq  int64
	ackHeld int
}

// fnum formats x for a script: exact, and without an exponent (the Lua of
// some Redis implementations reads "1e+06" as nothing).
func fnum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func replyStrings(v any, n int) ([]string, error) {
	a, ok := v.([]any)
	if !ok || (n > 0 && len(a) != n) {
		return nil, fmt.Errorf("fleet: unexpected script reply %T", v)
	}
	s := make([]string, len(a))
	for i, x := range a {
		if s[i], ok = x.(string); !ok {
			return nil, fmt.Errorf("fleet: unexpected script reply element %T", x)
		}
	}
	return s, nil
}

func parseReply(v any) (reply, error) {
	var r reply
	const n = int(budget.NumDims)
	s, err := replyStrings(v, 2+2*n+4*n+4)
	if err != nil {
		return r, err
	}
	f := func(i int) float64 { x, _ := strconv.ParseFloat(s[i], 64); return x }
	code, _ := strconv.Atoi(s[0])
	r.code = budget.Refusal(code)
	r.wait = time.Duration(f(1))
	for i := range n {
		r.taken[i] = f(2 + i)
		r.marks[i] = f(2 + n + i)
		if o := 2 + 2*n + 4*i; s[o] != "" {
			r.buckets[i] = budget.BucketState{Known: true, Limit: f(o), Depth: f(o + 1), Level: f(o + 2), Seen: f(o + 3)}
		}
	}
	tail := 2 + 2*n + 4*n
	r.members, _ = strconv.ParseInt(s[tail], 10, 64)
	r.lost = s[tail+1] == "1"
	r.ackSeq = int64(f(tail + 2))
	r.ackHeld = int(f(tail + 3))
	return r, nil
}

// acked is the most permits Redis may be counting for this member, as far
// as the member knows: what it last reported, lowered by any failed call
// that may have set less. Requires b.mu.
func (b *laneBudget) acked() int { return min(b.ackHeld, b.doubt) }

// ack takes in what Redis reported storing for this member. Requires b.mu.
func (b *laneBudget) ack(seq int64, held int) {
	if seq >= b.ackSeq {
		b.ackSeq, b.ackHeld = seq, held
	}
	if seq >= b.doubtSeq {
		// Every failed call is now overtaken: Redis ignores it if it
		// arrives, and has overwritten it if it did.
		b.doubtSeq, b.doubt = 0, math.MaxInt
	}
}

// failed notes a call (sequence number seq, count sent) whose outcome is
// unknown. Requires b.mu.
func (b *laneBudget) failed(seq int64, sent int) {
	b.doubtSeq = max(b.doubtSeq, seq)
	b.doubt = min(b.doubt, sent)
}

// common are the lane scripts' first ARGV: now, member, ttl, expect, seq,
// mine, refunds. It takes the next sequence number. Requires b.mu.
func (b *laneBudget) common(now time.Time) []any {
	f := b.f
	b.seq++
	args := []any{f.at(now), f.id, f.ttlMicros(), f.expect(), b.seq, b.inUse}
	for _, x := range b.refund {
		args = append(args, fnum(x))
	}
	return args
}

// script runs a lane script and takes in its state. Requires b.mu.
func (b *laneBudget) script(now time.Time, s *redis.Script, extra ...any) (reply, error) {
	args := append(b.common(now), extra...)
	seq, sent, refund := b.seq, b.inUse, b.refund
	v, err := b.f.run(s, b.keys, args...)
	if err != nil {
		b.failed(seq, sent)
		return reply{}, err
	}
	r, err := parseReply(v)
	if err != nil {
		b.failed(seq, sent)
		return r, err
	}
	b.cache, b.cacheAt = r.buckets, now
	if r.ackSeq == seq && seq >= b.ackSeq { // never move applied back
		b.applied = refund
	}
	b.ack(r.ackSeq, r.ackHeld)
	b.f.renewed(r.members, r.lost)
	return r, nil
}

// TryTake implements budget.Budget.
func (b *laneBudget) TryTake(now time.Time, limit int, reserve float64, d budget.Demand) (budget.Grant, budget.Refusal, time.Duration) {
	b.mu.Lock()
	g, r, wait, err := b.tryTake(now, limit, reserve, d)
	b.mu.Unlock()
	if err != nil {
		b.f.suspect(err)
	}
	return g, r, wait
}

// localMark marks a grant of the local fallback: its marks are not Redis's
// (the lane's spending there is unknown to it), so its answer's view
// raises nothing in Redis.
var localMark = budget.Demand{math.MaxFloat64, math.MaxFloat64, math.MaxFloat64, math.MaxFloat64}

// tryTake requires b.mu. An error means a Redis call failed: the request
// was refused, and the heartbeat decides whether Redis is away.
func (b *laneBudget) tryTake(now time.Time, limit int, reserve float64, d budget.Demand) (budget.Grant, budget.Refusal, time.Duration, error) {
	f := b.f
	if b.provisional {
		t, r, w := b.takeFallback(now, min(limit, f.scaled(b.cap)), reserve, d)
		return t, r, w, nil
	}
	if f.degraded.Load() {
		t, r, w := b.takeFallback(now, min(limit, b.fallbackCap()), reserve, d)
		return t, r, w, nil
	}
	lim := limit
	probation := f.restricted()
	if probation {
		lim = min(lim, f.scaled(b.cap))
	}
	if b.inUse >= lim {
		return budget.Grant{}, budget.ByConcurrency, b.idleWait(), nil
	}
	if f.suspected.Load() {
		return budget.Grant{}, budget.ByConcurrency, f.cfg.Poll, nil
	}
	if now.Before(b.blockedUntil) {
		return budget.Grant{}, budget.ByConcurrency, b.blockedUntil.Sub(now), nil
	}
	// In probation the scaled local buckets must admit the demand too: a
	// Redis that restarted empty knows no bucket.
	var local budget.Demand
	if probation {
		t, r, w := b.localTake(now, reserve, d)
		if r != budget.Granted {
			return budget.Grant{}, r, w, nil
		}
		local = t
	}
	args := []any{b.cap, fnum(reserve)}
	for _, x := range d {
		args = append(args, fnum(x))
	}
	args = append(args, f.cfg.ActiveWindow.Microseconds(), b.name, f.job, lim)
	r, err := b.script(now, takeScript, args...)
	if err != nil || r.code != budget.Granted {
		b.localAdjust(now, local) // give the local buckets back
	}
	if err != nil {
		// Never a local grant here: Redis may still count this member's
		// old permits while the others fill the cap.
		return budget.Grant{}, budget.ByConcurrency, f.cfg.Poll, err
	}
	switch r.code {
	case budget.Granted:
		b.inUse++
		return budget.Grant{Taken: r.taken, Mark: r.marks}, budget.Granted, 0, nil
	case budget.ByConcurrency:
		b.blockedUntil = now.Add(f.cfg.Poll)
		return budget.Grant{}, budget.ByConcurrency, f.cfg.Poll, nil
	default:
		return budget.Grant{}, r.code, r.wait, nil
	}
}

// idleWait is the wait of a concurrency refusal: none while a permit is
// out (its Settle will come), else until the fallback's limits may change.
// Requires b.mu.
func (b *laneBudget) idleWait() time.Duration {
	if b.inUse > 0 {
		return 0
	}
	w := b.f.cfg.Retry
	if d := time.Duration(b.f.leaseEnd.Load() - b.f.cfg.Now().UnixNano()); d > 0 {
		w = min(w, d)
	}
	if d := time.Duration(b.f.probation.Load() - b.f.cfg.Now().UnixNano()); d > 0 {
		w = min(w, d)
	}
	return max(w, time.Millisecond)
}

// fallbackCap is the lane's cap in the fallback: the cap divided by the
// last known members; and until this member's lease has surely run out in
// Redis, no more than Redis last counted for it — the others still see
// that count and fill the rest of the cap. Requires b.mu.
func (b *laneBudget) fallbackCap() int {
	c := b.f.scaled(b.cap)
	if b.f.cfg.Now().UnixNano() < b.f.leaseEnd.Load() {
		c = min(c, b.acked())
	}
	return c
}

// takeFallback is the fallback's decision: concurrency against lim, the
// buckets locally. Requires b.mu.
func (b *laneBudget) takeFallback(now time.Time, lim int, reserve float64, d budget.Demand) (budget.Grant, budget.Refusal, time.Duration) {
	b.peak = max(b.peak, b.inUse)
	if b.inUse >= lim {
		return budget.Grant{}, budget.ByConcurrency, b.idleWait()
	}
	taken, r, w := b.localTake(now, reserve, d)
	if r == budget.Granted {
		b.inUse++
		b.peak = max(b.peak, b.inUse)
		b.fallbackOut++
	}
	return budget.Grant{Taken: taken, Mark: localMark}, r, w
}

// localTake deducts d from the local buckets if they hold it, leaving the
// local permit count at 0. Requires b.mu.
func (b *laneBudget) localTake(now time.Time, reserve float64, d budget.Demand) (budget.Demand, budget.Refusal, time.Duration) {
	g, r, w := b.local.TryTake(now, math.MaxInt32, reserve, d)
	if r == budget.Granted {
		b.local.Settle(now, budget.Grant{}, budget.Demand{}) // the permit only
	}
	return g.Taken, r, w
}

// localAdjust adds delta (negative: a charge) to the local buckets,
// leaving the local permit count at 0. Requires b.mu.
func (b *laneBudget) localAdjust(now time.Time, delta budget.Demand) {
	b.local.Adjust(now, delta)
}

// Settle implements budget.Budget. While Redis is away, in the probation
// after, and on a provisional lane, what the permit deducted may have been
// deducted elsewhere (Redis, or the local fallback): only charges (usage
// above the estimate) are applied then, never refunds.
func (b *laneBudget) Settle(now time.Time, g budget.Grant, actual budget.Demand) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse = max(0, b.inUse-1)
	b.blockedUntil = time.Time{}
	var delta, charges budget.Demand
	for i := range delta {
		if g.Taken[i] == 0 {
			continue // unknown at the grant: the server's remaining counts it
		}
		delta[i] = g.Taken[i] - actual[i]
		charges[i] = min(0, delta[i])
	}
	// Which permit this is cannot be told: while any the fallback granted
	// may be out, every Settle sends charges only; the count clears once
	// no permit is out at all.
	fromFallback := b.fallbackOut > 0
	if b.inUse == 0 {
		b.fallbackOut = 0
	}
	switch {
	case b.provisional:
		b.localAdjust(now, delta) // everything was local
	case b.f.degraded.Load():
		b.localAdjust(now, charges)
	case b.f.restricted() || fromFallback:
		for i := range b.refund {
			b.refund[i] += charges[i]
		}
	default:
		for i := range b.refund {
			b.refund[i] += delta[i]
		}
	}
}

// Observe implements budget.Budget. The fallback's buckets learn the
// view too, divided by the members, so they are warm when needed.
func (b *laneBudget) Observe(now time.Time, v budget.View, g budget.Grant) {
	b.mu.Lock()
	var err error
	if !b.provisional && !b.f.degraded.Load() && !b.f.suspected.Load() {
		var args []any
		for i, d := range v {
			known, noraise := "0", "0"
			if d.Known {
				known = "1"
			}
			if d.NoRaise {
				noraise = "1"
			}
			args = append(args, known, fnum(d.Limit), fnum(d.Depth), fnum(d.Remaining), fnum(d.Slack), noraise, fnum(g.Mark[i]))
		}
		_, err = b.script(now, observeScript, args...)
	}
	n := float64(b.f.assumed()) // as the script just counted them
	var scaled budget.View
	for i, d := range v {
		if d.Known && d.Limit > 0 {
			d.Limit, d.Depth, d.Remaining, d.Slack = math.Max(1, d.Limit/n), d.Depth/n, d.Remaining/n, d.Slack/n
		}
		scaled[i] = d
	}
	b.local.Observe(now, scaled, budget.Grant{}) // raises nothing: its marks are not the fallback's
	b.mu.Unlock()
	if err != nil {
		b.f.suspect(err)
	}
}

// Snapshot implements budget.Budget without calling Redis: InUse is this
// process's permits, the buckets are those of the last script advanced to
// now (the fallback's while Redis is away).
func (b *laneBudget) Snapshot(now time.Time) budget.Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.provisional || b.f.degraded.Load() {
		s := b.local.Snapshot(now)
		s.InUse = b.inUse
		return s
	}
	s := budget.Snapshot{InUse: b.inUse}
	dt := now.Sub(b.cacheAt).Seconds()
	for i, c := range b.cache {
		st := c
		st.Fraction = 1
		if c.Known && c.Limit > 0 && c.Depth > 0 {
			if dt > 0 && st.Level < c.Depth {
				st.Level = math.Min(c.Depth, c.Level+dt*c.Limit/60)
			}
			if p := b.refund[i] - b.applied[i]; p != 0 {
				st.Level = math.Min(c.Depth, st.Level+p)
			}
			st.Fraction = math.Max(0, st.Level/c.Depth)
		}
		s.Buckets[i] = st
	}
	return s
}

// endOutage returns the most permits held during the outage and resets it.
func (b *laneBudget) endOutage() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := max(b.peak, b.inUse)
	b.peak = 0
	return p
}
