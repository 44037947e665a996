package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// Polling: each unended batch is retrieved at PollMin, the wait growing
// ×1.5 to PollMax and stretched by a retry-after; a poll falls on each of
// the batch's escape points (stuck, deadline, the end of a cancel wait)
// rather than up to PollMax after it. A batch in progress StuckAfter after
// its intent, or not ended by its deadline, is cancelled (the escape) —
// unless it was adopted: that one is given up without a cancel.

// advancePoll polls c's batch: a cancel first when one is due (a Cancel,
// or a cancel sent but not accepted), or only the cancel the last poll
// decided on. Loop-owned.
func (r *Runner) advancePoll(c *chunk, now time.Time) {
	if c.try.escape != "" {
		// The last poll found it stuck or past its deadline.
		why, key := c.try.escape, c.try.key
		c.try.escape, c.try.key = "", nil
		r.startPoll(c, key, why, false, false)
		return
	}
	if !r.wanted(c) {
		r.drop(c)
		return
	}
	if r.crashed("mid-poll") {
		r.fail(errCrash)
		return
	}
	key, waiting := r.keyFor(c, now)
	if waiting {
		return
	}
	if key == nil {
		r.giveUp(c, "organization has no live key", true)
		return
	}
	switch {
	case r.cancelDue(c):
		r.startPoll(c, key, r.cancelWhy, false, true)
	case !c.cancelAt.IsZero() && !c.canceled:
		r.startPoll(c, key, "", true, true)
	default:
		r.startPoll(c, key, "", false, true)
	}
}

// cancelDue reports whether a Cancel asks for c's batch to be cancelled
// and it has not been: never an adopted one, which may be a colleague's.
func (r *Runner) cancelDue(c *chunk) bool {
	return r.cancelWhy != "" && c.cancelAt.IsZero() && !c.adopted
}

// pollReport is a poll step's outcome.
type pollReport struct {
	c   *chunk
	key *keys.Key
	// The cancel, if the step sent one: when it was journaled (escape)
	// and whether it was accepted.
	cancelAt time.Time
	canceled bool
	polled   bool // the batch was retrieved: out and b
	out      client.Outcome
	b        api.MessageBatch
	err      error // the journal, a simulated crash, or ctx
}

func (rep *pollReport) of() *chunk { return rep.c }

// startPoll starts c's poll step: escape (why set: the cancel journaled
// and synced, then sent) or resend (a cancel sent before), then, if get,
// the retrieve.
func (r *Runner) startPoll(c *chunk, key *keys.Key, why string, resend, get bool) {
	created := c.created
	r.start(c, r.live.pollCtx, func(ctx context.Context) report {
		rep := &pollReport{c: c, key: key}
		if why != "" {
			rep.cancelAt = r.now()
			if rep.err = r.j.append(record{Op: opCancel, Chunk: c.id, At: rep.cancelAt, Batch: c.batch, Why: why}, true); rep.err != nil {
				return rep
			}
			r.log.Warn("batch: cancelling a batch; its ended rows will be harvested and the rest re-routed",
				"org", c.org.label, "batch", c.batch, "reason", why)
			if r.crashed("after-cancel-intent") {
				rep.err = errCrash
				return rep
			}
		}
		if why != "" || resend {
			if rep.canceled, rep.err = r.sendCancel(ctx, c.id, c.batch, created, key); rep.err != nil {
				return rep
			}
		}
		if get {
			rep.polled = true
			rep.out = r.do(ctx, key, "GET", batchesPath+"/"+url.PathEscape(c.batch), nil)
			if rep.out.Class == client.OK {
				if err := json.Unmarshal(rep.out.Body, &rep.b); err != nil || rep.b.ID == "" {
					rep.out.Class = client.Transport
				}
			}
		}
		return rep
	})
}

// sendCancel asks the API to cancel a batch, and reports whether it is
// cancelled: a cancel that fails because the batch is already canceling
// or ended is a success (the canceled record is then written, unsynced);
// any other failure is tried again on the next poll. The error is the
// journal's or ctx's. Steps call it.
func (r *Runner) sendCancel(ctx context.Context, chunk, batch string, created time.Time, key *keys.Key) (bool, error) {
	path := batchesPath + "/" + url.PathEscape(batch)
	out := r.do(ctx, key, "POST", path+"/cancel", nil)
	if out.Class == client.Canceled {
		return false, context.Cause(ctx)
	}
	ok := false
	var b api.MessageBatch
	if out.Class == client.OK && json.Unmarshal(out.Body, &b) == nil {
		ok = true
	} else if g := r.do(ctx, key, "GET", path, nil); g.Class == client.OK && json.Unmarshal(g.Body, &b) == nil {
		ok = b.ProcessingStatus == api.BatchCanceling || b.ProcessingStatus == api.BatchEnded
	}
	if !ok {
		level := slog.LevelWarn
		if out.Status == http.StatusNotFound && r.now().Sub(created) <= r.cfg.CreateGrace {
			level = slog.LevelDebug // expected: the batch is not visible yet
		}
		r.log.Log(ctx, level, "batch: cancel failed; trying again on the next poll", "batch", batch, "err", out.Err)
		return false, nil
	}
	return true, r.j.append(record{Op: opCanceled, Chunk: chunk, At: r.now(), Batch: batch}, false)
}

// polled applies a poll step's report: the cancel it sent, then what the
// retrieve said — ended (harvest), a refused key, a retry-after, a 404 —
// then whether the batch must be cancelled or given up, and when to poll
// next.
func (r *Runner) polled(rep *pollReport) {
	c, o, out := rep.c, rep.c.org, &rep.out
	if !rep.cancelAt.IsZero() {
		c.cancelAt = rep.cancelAt
		r.stats.Cancelled++
	}
	if rep.canceled {
		c.canceled = true
	}
	if r.stopped(r.live.pollCtx, rep.err) || (rep.polled && out.Class == client.Canceled) {
		return
	}
	now := r.now()
	if !rep.polled {
		r.afterPoll(c, now) // the escape alone
		return
	}
	switch out.Class {
	case client.OK:
		c.try.notFound = 0
		if !rep.b.ExpiresAt.IsZero() {
			c.expires = rep.b.ExpiresAt
		}
		if rep.b.ProcessingStatus == api.BatchEnded {
			r.stats.Ended++
			r.countTurnaround(c, &rep.b)
			r.chunkEnded(c)
			r.enter(c, harvesting)
			c.try = tries{delay: r.cfg.PollMin, verified: !c.adopted, ended: &rep.b}
			return
		}
	case client.KeyDead:
		r.refused(o, rep.key, out, now.Add(-out.Latency))
		r.schedulePoll(c, now)
		return
	case client.RateLimited:
		if out.HasRetryAfter {
			c.try.delay = max(c.try.delay, r.retryAfter(o, out))
		}
	case client.Invalid:
		if out.Status == 404 && now.Sub(c.created) <= r.cfg.CreateGrace {
			break // the read-after-write window
		}
		c.try.notFound++
		if c.try.notFound > maxNotFound {
			r.giveUp(c, fmt.Sprintf("retrieve keeps failing: HTTP %d", out.Status), false)
			return
		}
	}
	// The escape: a batch in progress past StuckAfter, or any batch not
	// known to have ended (nor to be canceling by someone else's hand)
	// past the deadline.
	inProgress := out.Class == client.OK && rep.b.ProcessingStatus == api.BatchInProgress
	if c.cancelAt.IsZero() && (inProgress || out.Class != client.OK) {
		why := ""
		switch {
		case inProgress && r.cfg.StuckAfter > 0 && now.Sub(c.intentAt) >= r.cfg.StuckAfter:
			why = fmt.Sprintf("stuck: not ended %v after create", r.cfg.StuckAfter)
		case !now.Before(r.deadline(c)):
			why = "deadline reached"
		}
		if why != "" && c.adopted {
			// Found through the list, so possibly a colleague's batch with
			// our request count: never cancel it. Its requests are
			// re-routed now (paid twice if it was ours after all and ends
			// with answers).
			r.giveUp(c, why+" (an adopted batch: not cancelled)", false)
			return
		}
		if why != "" {
			c.try.escape, c.try.key = why, rep.key // cancelled at once, with the same key
			c.wake = time.Time{}
			return
		}
	}
	r.afterPoll(c, now)
}

// afterPoll gives c's batch up when its wait is over whatever the API
// answers — sluice cancelled it CancelWait ago, or its deadline passed
// CancelWait ago — and otherwise schedules the next poll.
func (r *Runner) afterPoll(c *chunk, now time.Time) {
	if !c.cancelAt.IsZero() && !now.Before(c.cancelAt.Add(r.cfg.CancelWait)) {
		r.giveUp(c, fmt.Sprintf("not ended %v after sluice cancelled it", r.cfg.CancelWait), false)
		return
	}
	if !now.Before(r.deadline(c).Add(r.cfg.CancelWait)) {
		r.giveUp(c, "not ended by its deadline", false)
		return
	}
	r.schedulePoll(c, now)
}

// schedulePoll sets c's next poll: the current wait from now, shortened to
// fall on its next escape point, the wait growing ×1.5 to PollMax; at once
// when a Cancel asks for its batch to be cancelled.
func (r *Runner) schedulePoll(c *chunk, now time.Time) {
	c.wake = now.Add(r.nextWait(c, now, c.try.delay))
	c.try.delay = min(c.try.delay*3/2, r.cfg.PollMax)
	if r.cancelDue(c) {
		c.wake = time.Time{}
	}
}

// deadline is when c's batch is cancelled if it has not ended: the earlier
// of Config.Deadline and its expiry + ExpiryGrace.
func (r *Runner) deadline(c *chunk) time.Time {
	exp := c.expires
	if exp.IsZero() {
		exp = c.intentAt.Add(api.BatchLifetime)
	}
	d := exp.Add(r.cfg.ExpiryGrace)
	if !r.cfg.Deadline.IsZero() && r.cfg.Deadline.Before(d) {
		d = r.cfg.Deadline
	}
	return d
}

// nextWait is the poll wait d, shortened so that the poll after it falls
// on c's next escape point (stuck, deadline, the end of a cancel wait)
// rather than up to PollMax after it.
func (r *Runner) nextWait(c *chunk, now time.Time, d time.Duration) time.Duration {
	dl := r.deadline(c)
	points := []time.Time{dl.Add(r.cfg.CancelWait)}
	if c.cancelAt.IsZero() {
		points = append(points, dl)
		if r.cfg.StuckAfter > 0 {
			points = append(points, c.intentAt.Add(r.cfg.StuckAfter))
		}
	} else {
		points = append(points, c.cancelAt.Add(r.cfg.CancelWait))
	}
	for _, t := range points {
		if t.After(now) && t.Sub(now) < d {
			d = t.Sub(now)
		}
	}
	return d
}
