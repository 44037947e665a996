package sim

import (
	"fmt"
	"sync"
	"time"
)

// An organization-wide limit: the rate-limits page (2026-10, via a
// secondary copy) lists limits on an organization's usage across all
// models, which can bind before any model pool's. A Messages call must fit
// both its pool's buckets and these; a call these refuse is a 429 whose
// message names the organization's limit across all models (the wording is
// not published: docs/models.md), with the pool's headers (which show
// room) and a retry-after.

// orgLimit is an organization's buckets across all pools. Its fields are
// guarded by mu.
type orgLimit struct {
	mu              sync.Mutex
	rpm, itpm, otpm int64 // per minute, × the time scale; 0 = unlimited
	req, in, out    bucket
	// Limited counts refusals by limiter (LimitedBy's names).
	limited map[string]int64
	// clock and fine format the resets of a workspace limit's headers
	// (workspace.go).
	clock serverClock
	fine  bool
}

// newOrgLimit returns the org-wide buckets of lim (nil: none).
func newOrgLimit(lim *Limits, cfg *Config, now time.Time) *orgLimit {
	if lim == nil {
		return nil
	}
	k := cfg.TimeScale
	l := &orgLimit{rpm: scaleLimit(lim.RPM, k), itpm: scaleLimit(lim.ITPM, k), otpm: scaleLimit(lim.OTPM, k), limited: map[string]int64{}}
	window := cfg.BucketWindow.D().Seconds() / 60
	mk := func(perMin int64) bucket {
		b := newBucket(float64(perMin)*window, float64(perMin)/60, now)
		if cfg.BucketsStartEmpty {
			b.level = 0
		}
		return b
	}
	l.req, l.in, l.out = mk(l.rpm), mk(l.itpm), mk(l.otpm)
	return l
}

// take charges one request of in and out tokens if it fits, else returns
// the limiter that refuses it and when it would fit.
func (l *orgLimit) take(now time.Time, in, out int64) (ok bool, why string, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range []struct {
		why string
		b   *bucket
		n   float64
	}{{limitedRequests, &l.req, 1}, {limitedInput, &l.in, float64(in)}, {limitedOutput, &l.out, float64(out)}} {
		if !c.b.fits(c.n, now) {
			if w := c.b.wait(c.n, now); why == "" || w > wait {
				why, wait = c.why, w
			}
		}
	}
	if why != "" {
		l.limited[why]++
		return false, why, wait
	}
	l.req.take(1, now)
	l.in.take(float64(in), now)
	l.out.take(float64(out), now)
	return true, "", 0
}

// give returns what take charged (the pool refused the request after).
func (l *orgLimit) give(now time.Time, in, out int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.req.give(1, now)
	l.in.give(float64(in), now)
	l.out.give(float64(out), now)
}

// figure is the per-minute limit that refused a call by why, and its unit
// in the API's words.
func (l *orgLimit) figure(why string) (int64, string) {
	switch why {
	case limitedInput:
		return l.itpm, "input tokens"
	case limitedOutput:
		return l.otpm, "output tokens"
	}
	return l.rpm, "requests"
}

// message is the 429's text for a refusal by why.
func (l *orgLimit) message(why, orgID string) string {
	n, unit := l.figure(why)
	return fmt.Sprintf("This request would exceed your organization's rate limit of %s %s per minute across all models (org: %s). For details, refer to: https://docs.claude.com/en/api/rate-limits.", commas(n), unit, orgID)
}

// admitOrgWide charges a Messages call to its org's limit across all
// pools before its pool's lane admits it. A refusal is answered here (a
// 429 with the lane's headers) and ok is false; release gives the charge
// back when the lane refuses the call after.
func (c *call) admitOrgWide(ln *lane, in, out int64) (ok bool, release func()) {
	w := c.org.wide
	if w == nil {
		return true, func() {}
	}
	ok, why, wait := w.take(c.now, in, out)
	if !ok {
		ln.count(func(st *LaneStats) {
			st.RateLimited++
			st.LimitedBy["org_"+why]++
		})
		ln.setHeaders(c.rw.Header(), c.now)
		c.rateLimited(wait, w.message(why, c.org.cfg.ID))
		return false, nil
	}
	return true, func() { w.give(c.now, in, out) }
}

// orgWideStats is the refusals of an org's limit across all pools by
// limiter (nil without one).
func (o *org) orgWideStats() map[string]int64 {
	w := o.wide
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.limited))
	for k, v := range w.limited {
		out[k] = v
	}
	return out
}
