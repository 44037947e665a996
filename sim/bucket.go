package sim

import (
	"math"
	"time"
)

// bucket is a continuous-refill token bucket: Capacity tokens, refilled at
// Rate tokens per second, as the API documents its limiters. Every method
// takes the time, so the arithmetic is exact under test. Level may go below
// zero when a request larger than the whole bucket is let through a full
// bucket, or when actual usage is charged after the fact; it then refills
// from below.
//
// A bucket is not safe for concurrent use; lane holds the lock.
type bucket struct {
	capacity float64
	rate     float64 // tokens per second
	level    float64
	last     time.Time
}

// newBucket returns a full bucket. A zero or negative limit means unlimited.
func newBucket(capacity, rate float64, now time.Time) bucket {
	return bucket{capacity: capacity, rate: rate, level: capacity, last: now}
}

func (b *bucket) unlimited() bool { return b.capacity <= 0 || b.rate <= 0 }

// advance refills the bucket up to now.
func (b *bucket) advance(now time.Time) {
	if b.unlimited() {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(b.capacity, b.level+dt*b.rate)
		b.last = now
	}
}

// fits reports whether n tokens can be taken at now. A request larger than
// the bucket fits only into a full bucket, so it is slow but never stuck.
func (b *bucket) fits(n float64, now time.Time) bool {
	if b.unlimited() {
		return true
	}
	b.advance(now)
	return n <= b.level || b.level >= b.capacity
}

// take removes n tokens (after fits said yes, or to charge actual usage).
func (b *bucket) take(n float64, now time.Time) {
	if b.unlimited() {
		return
	}
	b.advance(now)
	b.level -= n
}

// give returns n tokens, never above capacity.
func (b *bucket) give(n float64, now time.Time) {
	if b.unlimited() {
		return
	}
	b.advance(now)
	b.level = math.Min(b.capacity, b.level+n)
}

// wait returns how long until n tokens fit.
func (b *bucket) wait(n float64, now time.Time) time.Duration {
	if b.fits(n, now) {
		return 0
	}
	need := math.Min(n, b.capacity) - b.level
	return time.Duration(need / b.rate * float64(time.Second))
}

// levelAt returns the level at now (0 for an unlimited bucket).
func (b *bucket) levelAt(now time.Time) float64 {
	if b.unlimited() {
		return 0
	}
	b.advance(now)
	return b.level
}

// remaining returns the whole tokens left now, floored at zero.
func (b *bucket) remaining(now time.Time) int64 {
	b.advance(now)
	if b.level <= 0 {
		return 0
	}
	return int64(b.level)
}

// resetAt is when the bucket will be full again.
func (b *bucket) resetAt(now time.Time) time.Time {
	if b.unlimited() {
		return now
	}
	b.advance(now)
	missing := b.capacity - b.level
	if missing <= 0 {
		return now
	}
	return now.Add(time.Duration(missing / b.rate * float64(time.Second)))
}
