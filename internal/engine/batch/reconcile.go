package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// Reconciliation looks for c's batch in its org's list: created at or
// after the intent (less the clock skew), with c's request count, and not
// claimed by another journaled chunk. It keeps looking for CreateGrace (a
// create may have reached the API any time between the intent and now — a
// slow or cut attempt, a crash mid-call — and become visible a
// read-after-write delay later). It runs under the org's create turn.

// startReconcile begins c's reconciliation at now: the first list at once.
func (r *Runner) startReconcile(c *chunk, now time.Time) {
	c.try.until = now.Add(r.cfg.CreateGrace)
	c.try.delay = r.cfg.PollMin
}

// advanceReconcile lists c's org's batches again, unless nobody wants c's
// rows any more or the org has no key left (not found). Loop-owned.
func (r *Runner) advanceReconcile(c *chunk, now time.Time) {
	if !r.wanted(c) {
		r.reconciled(c, nil, time.Time{})
		return
	}
	key, waiting := r.keyFor(c, now)
	if waiting {
		return
	}
	if key == nil {
		r.log.Warn("batch: cannot look for a batch whose create may have happened; the organization has no live key (it may be paid twice)",
			"org", c.org.label, "chunk", c.id)
		r.reconciled(c, nil, time.Time{})
		return
	}
	lo := c.intentAt.Add(-r.cfg.ClockSkew)
	var hi time.Time
	if !c.createdBy.IsZero() {
		hi = c.createdBy.Add(r.cfg.ClockSkew)
	}
	r.start(c, r.live.pollCtx, func(ctx context.Context) report {
		rep := &listReport{c: c, key: key}
		rep.found, rep.out, rep.err = r.listCandidates(ctx, key, c.n(), lo, hi)
		return rep
	})
}

// listReport is a list step's outcome.
type listReport struct {
	c     *chunk
	key   *keys.Key
	found []*api.MessageBatch // newest first
	out   client.Outcome
	err   error
}

func (rep *listReport) of() *chunk { return rep.c }

// listCandidates pages through the org's batches, newest first, back to
// lo, and returns those holding n requests created at or after lo and, if
// hi is set (after this run's own failed create: its return plus the
// skew), no later than hi. Which are claimed is the loop's to say.
func (r *Runner) listCandidates(ctx context.Context, key *keys.Key, n int, lo, hi time.Time) ([]*api.MessageBatch, client.Outcome, error) {
	var found []*api.MessageBatch
	after := ""
	for range listPages {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after_id", after)
		}
		out := r.do(ctx, key, "GET", batchesPath+"?"+q.Encode(), nil)
		if out.Class != client.OK {
			return nil, out, fmt.Errorf("batch: listing batches: HTTP %d: %v", out.Status, out.Err)
		}
		var p api.Page[api.MessageBatch]
		if err := json.Unmarshal(out.Body, &p); err != nil {
			return nil, out, fmt.Errorf("batch: listing batches: %w", err)
		}
		older := false
		for i := range p.Data {
			b := &p.Data[i]
			if b.CreatedAt.Before(lo) {
				older = true
				break
			}
			if total(b.RequestCounts) != n || (!hi.IsZero() && b.CreatedAt.After(hi)) {
				continue // another count, or created after our create returned: not ours
			}
			found = append(found, b)
		}
		if older || !p.HasMore || p.LastID == nil {
			break
		}
		after = *p.LastID
	}
	return found, client.Outcome{}, nil
}

// listed applies a list step's report. Of the unclaimed batches found, the
// oldest created at or after the intent is ours (with one create at a time
// per org, the first batch created after the intent is the intent's); the
// oldest created in the clock-skew window before the intent — more likely
// a colleague's than ours — is adopted only when nothing after the intent
// shows up within CreateGrace.
func (r *Runner) listed(rep *listReport) {
	c, o := rep.c, rep.c.org
	if rep.err != nil && r.stopped(r.live.pollCtx, rep.err) {
		return
	}
	var best, skewed *api.MessageBatch
	for _, b := range rep.found {
		if r.claimed[b.ID] {
			continue
		}
		// Newest first: the last match of each kind is the oldest.
		if b.CreatedAt.Before(c.intentAt) {
			skewed = b
		} else {
			best = b
		}
	}
	now := r.now()
	if best != nil {
		r.reconciled(c, best, now)
		return
	}
	if rep.err == nil && !now.Before(c.try.until) {
		// Nothing after the intent in the whole grace: the one inside the
		// clock-skew window, if any, is ours.
		r.reconciled(c, skewed, now)
		return
	}
	if rep.err != nil {
		if rep.out.Class == client.KeyDead {
			r.refused(o, rep.key, &rep.out, now.Add(-rep.out.Latency))
			return // at once, with the org's next key
		}
		c.try.failures++
		if c.try.failures >= maxListFailures && !now.Before(c.try.until) {
			r.log.Warn("batch: could not list the organization's batches; giving the chunk up (it may be paid twice)",
				"org", o.label, "chunk", c.id, "err", rep.err)
			r.reconciled(c, nil, time.Time{})
			return
		}
		if rep.out.Class == client.RateLimited && rep.out.HasRetryAfter {
			c.try.delay = max(c.try.delay, r.retryAfter(o, &rep.out))
		}
	}
	wait := c.try.delay
	if now.Before(c.try.until) {
		wait = min(wait, c.try.until.Sub(now)+time.Millisecond)
	}
	c.wake = now.Add(wait)
	c.try.delay = min(c.try.delay*3/2, r.cfg.PollMax)
}

// reconciled ends c's reconciliation: b (adopted: journaled created, then
// polled), or nothing found. A resumed intent found nowhere never reached
// the API: its requests are cut anew (or c is dropped if nobody wants
// them). After this run's own failed create, the org's failures count
// and it pauses (or its batch path ends) before its requests go back to
// the queue.
func (r *Runner) reconciled(c *chunk, b *api.MessageBatch, now time.Time) {
	o := c.org
	if b != nil {
		if err := r.journalCreated(c.id, b, true, now); err != nil {
			r.fail(err)
			return
		}
		if !c.recovered {
			o.failures = 0
		}
		r.created(c, b, true, now)
		return
	}
	if c.recovered {
		if !r.wanted(c) {
			r.drop(c)
			return
		}
		r.abandon(c, "its create never happened (not in the organization's list)", moveRequeue)
		return
	}
	o.failures++
	if o.failures >= maxCreateFailures {
		r.orgDead(o, fmt.Sprintf("%d creates in a row failed", o.failures))
	} else {
		o.paused = r.now().Add(backoff(r.cfg.PollMin, r.cfg.PollMax, o.failures))
	}
	r.abandon(c, fmt.Sprintf("create failed and no batch appeared: %v", c.try.createErr), moveRequeue)
}
