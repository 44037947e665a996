// Package budget holds what one lane (organization × model pool) may spend:
// concurrency permits and the token buckets of the API's limits — requests,
// input tokens, output tokens and the combined (or workspace) token limit —
// kept level with the server's view from the rate-limit headers. Local is
// the in-process implementation; a fleet-wide one shared by several
// processes implements the same interface.
//
// A bucket refills at its per-minute limit ÷ 60 per second up to its depth,
// which the lane learns from the headers (the API may enforce a limit over
// a shorter interval than a minute, so a bucket can hold much less than
// its limit). docs/control.md gives the rules and why.
package budget

import (
	"math"
	"sync"
	"time"
)

// Dim indexes the rate-limited dimensions.
type Dim int

// The dimensions, in header order.
const (
	Requests Dim = iota
	InputTokens
	OutputTokens
	// Tokens is the anthropic-ratelimit-tokens-* family: input plus output,
	// or the most restrictive (workspace) token limit when one applies.
	Tokens
	NumDims
)

var dimNames = [NumDims]string{"requests", "input_tokens", "output_tokens", "tokens"}

func (d Dim) String() string { return dimNames[d] }

// Demand is what one request is charged: one request, its estimated input
// tokens, its expected output tokens, and their sum.
type Demand [NumDims]float64

// Refusal says why TryTake said no.
type Refusal int

// Refusals.
const (
	// Granted: not a refusal.
	Granted Refusal = iota
	// ByConcurrency: every permit is in use; wait for a release.
	ByConcurrency
	// ByRequests … ByTokens: a bucket (less the reserve) cannot hold the
	// demand yet; the wait says how long until it can.
	ByRequests
	ByInputTokens
	ByOutputTokens
	ByTokens
	NumRefusals
)

var refusalNames = [NumRefusals]string{"granted", "concurrency", "requests", "input_tokens", "output_tokens", "tokens"}

func (r Refusal) String() string { return refusalNames[r] }

// ByDim returns the refusal of bucket d.
func ByDim(d Dim) Refusal { return ByRequests + Refusal(d) }

// DimView is what the lane knows of one dimension after an answer: the
// server's per-minute limit and remaining, and the learned depth.
type DimView struct {
	Known     bool
	Limit     float64 // per minute; the refill is Limit/60 per second
	Depth     float64 // what a full bucket holds; ≤ 0 means Limit
	Remaining float64 // the server's remaining at the answer
	// Slack is how far the true remaining may lie from Remaining (the
	// API rounds token counts to the nearest thousand: 500).
	Slack float64
	// NoRaise: a Remaining higher than the model is not believed (the
	// lane has seen 429s this dimension's headers said had room: they do
	// not describe the bucket that is enforced).
	NoRaise bool
}

// Grant is what one TryTake deducted: hand it back to Settle, and to
// Observe with the answer's view.
type Grant struct {
	// Taken is what the buckets were charged (zero for a bucket unknown
	// then: the server's remaining, when it comes, already counts it).
	Taken Demand
	// Mark is the budget's cumulative spending, per dimension, before this
	// grant: what was spent since is what the server's answer to this
	// request may not have seen yet.
	Mark Demand
}

// View is one answer's view of every dimension; an unknown dimension is
// left as it was.
type View [NumDims]DimView

// Any reports whether the view knows a dimension.
func (v *View) Any() bool {
	for _, d := range v {
		if d.Known {
			return true
		}
	}
	return false
}

// Budget is what a lane spends through. Every method takes the time; none
// blocks. Implementations are safe for concurrent use.
type Budget interface {
	// TryTake takes one permit, if fewer than limit are in use, and the
	// demand's tokens, if every known bucket holds them above its reserve
	// (a fraction of the bucket left for colleagues, see
	// BucketState.Reserve). It returns the Grant to hand back to Settle and
	// Observe. On refusal it says why and, for a bucket, how long until it
	// would fit; which reason wins when several hold is the
	// implementation's.
	TryTake(now time.Time, limit int, reserve float64, d Demand) (Grant, Refusal, time.Duration)
	// Settle returns the permit of g and trues the buckets it charged up
	// to actual (zero when the server charged nothing).
	Settle(now time.Time, g Grant, actual Demand)
	// Observe corrects the buckets from the answer to the request of g:
	// limit and depth are set; a lower remaining is the truth (a
	// colleague spent, a charge the model missed); a higher one, less
	// what was spent since g (the server may not have seen it) and the
	// rounding slack, is the truth too (the model over-charged).
	Observe(now time.Time, v View, g Grant)
	// Snapshot reports permits in use and bucket levels.
	Snapshot(now time.Time) Snapshot
}

// Snapshot is a budget's state at one instant.
type Snapshot struct {
	InUse   int
	Buckets [NumDims]BucketState
}

// BucketState is one bucket. Known is false until headers gave a limit.
type BucketState struct {
	Known bool
	Limit float64 // per minute
	Depth float64 // capacity
	Level float64
	// Seen is the most the server has shown remaining since the limit last
	// changed: the bucket surely holds that much (the lane's lower bound
	// on the depth).
	Seen     float64
	Fraction float64 // Level / Depth, 1 when unknown
	// Lowered sums what the headers took off the level that the budget's
	// own charges did not explain: a colleague's spending, or a charge the
	// model missed (cumulative; the history's "share others used").
	Lowered float64
}

// Reserve is how much of the bucket is left for colleagues at the share
// reserve: a share of the depth. (Not of Seen: an organization whose
// buckets a colleague keeps drained never shows them full, and that is
// exactly when the reserve matters.)
func (b BucketState) Reserve(reserve float64) float64 {
	return reserve * b.Depth
}

// Headroom is the share of the depth above the reserve (1 when unknown).
func (b BucketState) Headroom(reserve float64) float64 {
	if !b.Known || b.Depth <= 0 {
		return 1
	}
	return (b.Level - b.Reserve(reserve)) / b.Depth
}

// Local is the in-process Budget. The zero value is not usable; call
// NewLocal.
type Local struct {
	mu      sync.Mutex
	inUse   int
	buckets [NumDims]bucket
	spent   Demand // cumulative charges, grown by corrections above a charge, never cut by refunds (Grant.Mark)
}

// NewLocal returns a budget with no permits in use and unknown buckets
// (unlimited until the first headers arrive).
func NewLocal() *Local { return &Local{} }

// bucket is a continuous-refill bucket: limit/60 per second up to depth.
// Requires the owner's lock.
type bucket struct {
	known bool
	limit float64 // per minute
	depth float64
	seen  float64
	level float64
	last  time.Time
	// calm counts the answers since one lowered the level: a higher report
	// is believed only when no lower one came for RaiseAfter answers.
	calm int
	// lowered sums the level cuts to a lower report (BucketState.Lowered).
	lowered float64
}

// RaiseAfter is how many answers in a row must have lowered nothing before
// a report higher than the model raises it. If the server computes its
// headers when it admits a request rather than when it answers, a higher
// report is stale by a latency and misses a colleague's spending in it; a
// colleague's spending keeps lowering the level, which keeps raises off.
const RaiseAfter = 20

func (b *bucket) advance(now time.Time) {
	if !b.known {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		if b.level < b.depth {
			b.level = math.Min(b.depth, b.level+dt*b.limit/60)
		}
		b.last = now
	}
}

func (b *bucket) state() BucketState {
	st := BucketState{Known: b.known, Limit: b.limit, Depth: b.depth, Level: b.level, Seen: b.seen, Fraction: 1, Lowered: b.lowered}
	if b.known && b.depth > 0 {
		st.Fraction = math.Max(0, b.level/b.depth)
	}
	return st
}

// Wait returns how long until a bucket in state b, refilling at its
// limit, holds n above the reserve; 0 if now. A demand larger than the
// usable bucket fits once the bucket is full, so an oversized request is
// slow, never stuck. It is the one rule of admission: the fleet's Redis
// script computes the same.
func (b BucketState) Wait(n, reserve float64) time.Duration {
	if !b.Known || n <= 0 || b.Limit <= 0 {
		return 0
	}
	res := b.Reserve(reserve)
	usable := b.Level - res
	want := math.Min(n, b.Depth-res)
	if usable >= want {
		return 0
	}
	return time.Duration((want - usable) / (b.Limit / 60) * float64(time.Second))
}

// observe applies one dimension of a view; unseen is what was spent on
// the bucket since the request the view answers was granted. Requires the
// owner's lock.
func (b *bucket) observe(now time.Time, v DimView, unseen float64) {
	if !v.Known || v.Limit <= 0 {
		return
	}
	depth := v.Depth
	if depth <= 0 || depth > v.Limit {
		depth = v.Limit
	}
	rem := math.Max(0, v.Remaining)
	if !b.known {
		*b = bucket{known: true, limit: v.Limit, depth: depth, seen: rem, level: math.Min(rem, depth), last: now}
		return
	}
	b.advance(now)
	if b.limit != v.Limit {
		// A new limit (a tier change, another workspace): the old bucket's
		// evidence no longer holds, but the level keeps the deductions of
		// requests still in flight.
		b.limit, b.seen = v.Limit, 0
	}
	b.depth = depth
	b.seen = math.Max(b.seen, rem)
	switch {
	case rem+v.Slack < b.level:
		// Surely lower than the model: a colleague spent, or a charge the
		// model missed. (Within the rounding slack it may not be, and
		// lowering on rounding noise alone would bias the level down.)
		b.lowered += b.level - rem
		b.level, b.calm = rem, 0
	case rem-v.Slack-unseen > b.level && b.calm >= RaiseAfter && !v.NoRaise:
		// Higher than the model, even counting everything spent since
		// (whether or not the server saw it), and nothing lowered it
		// lately: the model over-charges (a workspace limit in tokens-*
		// that counts input only, an estimate too high).
		b.level = rem - v.Slack - unseen
	default:
		b.calm++
	}
	b.level = math.Min(b.level, depth)
}

// TryTake implements Budget.
func (l *Local) TryTake(now time.Time, limit int, reserve float64, d Demand) (Grant, Refusal, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The buckets first: when a bucket and the permits both refuse, the
	// bucket is what binds (a free permit would not let the request go),
	// and its wait is the one worth waking for.
	worst, wait := Granted, time.Duration(0)
	for i := range l.buckets {
		b := &l.buckets[i]
		b.advance(now)
		if w := b.state().Wait(d[i], reserve); w > wait {
			worst, wait = ByDim(Dim(i)), w
		}
	}
	if worst != Granted {
		return Grant{}, worst, wait
	}
	if l.inUse >= limit {
		return Grant{}, ByConcurrency, 0
	}
	l.inUse++
	g := Grant{Mark: l.spent}
	for i := range l.buckets {
		if l.buckets[i].known {
			l.buckets[i].level -= d[i]
			g.Taken[i] = d[i]
			l.spent[i] += d[i]
		}
	}
	return g, Granted, 0
}

// Settle implements Budget. A bucket the grant did not charge (unknown
// then) is not charged now: the server's remaining, which made it known,
// already counts the request.
func (l *Local) Settle(now time.Time, g Grant, actual Demand) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse--
	for i := range l.buckets {
		b := &l.buckets[i]
		if b.known && g.Taken[i] != 0 {
			b.advance(now)
			b.level = math.Min(b.depth, b.level+g.Taken[i]-actual[i])
			// Spending only grows: a refund (a 429, an actual below the
			// estimate) is not spending that a later grant's answer may
			// not have seen, and taking it off would let a raise count
			// it as such — the level would rise above the server's.
			l.spent[i] += math.Max(0, actual[i]-g.Taken[i])
		}
	}
}

// Adjust adds delta to the known buckets (negative: a charge), without a
// permit: the fleet's fallback keeps its local buckets with it.
func (l *Local) Adjust(now time.Time, delta Demand) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.buckets {
		b := &l.buckets[i]
		if b.known && delta[i] != 0 {
			b.advance(now)
			b.level = math.Min(b.depth, b.level+delta[i])
		}
	}
}

// Observe implements Budget.
func (l *Local) Observe(now time.Time, v View, g Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.buckets {
		l.buckets[i].observe(now, v[i], l.spent[i]-g.Mark[i])
	}
}

// Snapshot implements Budget.
func (l *Local) Snapshot(now time.Time) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{InUse: l.inUse}
	for i := range l.buckets {
		b := &l.buckets[i]
		b.advance(now)
		s.Buckets[i] = b.state()
	}
	return s
}
