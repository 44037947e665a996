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
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/keys"
)

const (
	batchesPath = "/v1/messages/batches"
	// maxCreateFailures ambiguous create failures in a row end an org's
	// batch path for the run.
	maxCreateFailures = 6
	// maxNotFound 404s in a row on a batch past its create grace make it
	// lost (the old system's mid-poll budget was five).
	maxNotFound = 5
	// maxListFailures failed list calls past the create grace end a
	// reconciliation undecided.
	maxListFailures = 6
	// maxHarvestTries bounds the downloads of one results file.
	maxHarvestTries = 8
	// maxResultsNotFound bounds the 404s tolerated on a results file (the
	// API serves results a moment after a batch ends); with the doubling
	// delay from PollMin they span about 2^6 PollMin (2 min at the default).
	maxResultsNotFound = 6
	// listPages bounds how far back a reconciliation looks.
	listPages = 50
)

// lifecycle takes c from wherever the journal left it to its end: create
// (or reconcile), poll, harvest. A nil error with c given up is normal; an
// error stops the Runner.
func (r *Runner) lifecycle(c *chunk) error {
	ctx := r.pollCtx
	if c.batch == "" {
		ok, err := r.establish(ctx, c)
		if err != nil || !ok {
			return err
		}
	}
	b, err := r.watch(ctx, c)
	if err != nil || b == nil {
		return err
	}
	return r.harvest(r.ctx, c, b)
}

// establish gets c a batch id: by creating it, or, for an intent the
// journal left without an id, by finding the batch in the org's list. It
// returns false when c ended without a batch (its requests moved).
func (r *Runner) establish(ctx context.Context, c *chunk) (bool, error) {
	o := c.org
	o.createMu.Lock()
	defer o.createMu.Unlock()
	defer r.resolved(c)
	if c.recovered {
		found, err := r.reconcile(ctx, c)
		if err != nil || found {
			return found, err
		}
		r.mu.Lock()
		wanted := r.wanted(c)
		r.mu.Unlock()
		if !wanted {
			return false, r.drop(c)
		}
		return false, r.abandon(c, "its create never happened (not in the organization's list)", moveRequeue)
	}
	return r.create(ctx, c)
}

// create persists c's intent, then creates its batch.
func (r *Runner) create(ctx context.Context, c *chunk) (bool, error) {
	o := c.org
	key, err := r.orgKey(ctx, o)
	if err != nil {
		return false, err
	}
	if key == nil || key.Retired() {
		return false, r.abandon(c, "organization has no live key", moveRequeue)
	}
	if why := r.cancelReason(); why != "" {
		return false, r.abandon(c, why, moveReroute) // cut before a Cancel
	}
	now := r.now()
	if co := r.cutoff(); !co.IsZero() && !now.Before(co) {
		// Cut just before the cutoff: re-route rather than create.
		r.mu.Lock()
		why := r.noBatch(now)
		r.mu.Unlock()
		return false, r.abandon(c, why, moveReroute)
	}
	r.mu.Lock()
	r.sendAsWritten(c, now) // before priming: a prefix sent as written needs no primer
	r.mu.Unlock()
	r.prime(ctx, c, key)
	if ctx.Err() != nil {
		return false, context.Cause(ctx) // interrupted while priming: nothing was created
	}
	now = r.now()
	if co := r.cutoff(); !co.IsZero() && !now.Before(co) {
		// Priming took the chunk past the cutoff: re-route, as above.
		r.mu.Lock()
		why := r.noBatch(now)
		r.mu.Unlock()
		return false, r.abandon(c, why, moveReroute)
	}
	if why := r.cancelReason(); why != "" {
		return false, r.abandon(c, why, moveReroute)
	}
	body := buildBody(c.list, c.bytes, c.wireID)
	c.intentAt = now
	in := record{Op: opIntent, Chunk: c.id, At: c.intentAt, Org: o.id, OrgLabel: o.label,
		N: c.n(), Bytes: int64(len(body)), Hash: chunkHash(c.ids, c.hashes), IDs: c.ids, Params: c.hashes, Wire: c.wire, Plain: c.plain}
	if err := r.j.append(in, true); err != nil {
		return false, err
	}
	c.journaled = true
	if r.crash("before-create") {
		return false, errCrash
	}
	if why := r.cancelReason(); why != "" {
		return false, r.abandon(c, why, moveReroute) // a Cancel while the intent was written
	}
	out := r.do(ctx, key, "POST", batchesPath, body)
	var b api.MessageBatch
	if out.Class == client.OK {
		if err := json.Unmarshal(out.Body, &b); err != nil || b.ID == "" {
			out.Class, out.Err = client.Transport, fmt.Errorf("batch: create answered without a batch: %v", err)
		}
	}
	switch out.Class {
	case client.OK:
		if r.crash("after-create") {
			return false, errCrash
		}
		r.mu.Lock()
		o.failures = 0
		r.mu.Unlock()
		return true, r.recordCreated(c, &b, false)
	case client.Canceled:
		// The create may have happened: the intent stays open and a resume
		// reconciles it.
		return false, context.Cause(ctx)
	case client.RateLimited:
		// The queue cap or the batch RPM: not created.
		wait := r.cfg.PollMax
		if out.HasRetryAfter {
			wait = max(out.RetryAfter, r.cfg.PollMin)
		}
		r.mu.Lock()
		o.paused = r.now().Add(wait)
		r.mu.Unlock()
		r.log.Info("batch: create refused with 429; the org pauses", "org", o.label, "wait", wait, "err", out.Err)
		return false, r.abandon(c, "create: HTTP 429", moveRequeue)
	case client.KeyDead:
		r.keyDead(o, key, &out)
		return false, r.abandon(c, fmt.Sprintf("create: HTTP %d", out.Status), moveRequeue)
	case client.Invalid:
		switch out.Status {
		case http.StatusNotFound:
			// No batches endpoint here (a gateway): the org cannot batch.
			r.mu.Lock()
			r.orgDead(o, "create: HTTP 404")
			r.mu.Unlock()
			return false, r.abandon(c, "create: HTTP 404", moveRequeue)
		case http.StatusRequestEntityTooLarge:
			return false, r.tooLarge(c)
		}
		// 400 and any other 4xx: the sync path classifies each request.
		r.mu.Lock()
		r.warnOnce(fmt.Sprintf("create-%d", out.Status), "batch: a create was refused; its requests are re-routed to sync (logged once)",
			"org", o.label, "status", out.Status, "err", out.Err)
		r.mu.Unlock()
		return false, r.abandon(c, fmt.Sprintf("create refused: HTTP %d: %v", out.Status, out.Err), moveReroute)
	}
	// 5xx, 529, a dropped connection: the batch may exist, created
	// before now.
	c.createdBy = r.now()
	r.log.Warn("batch: create failed without a clear answer; looking for the batch before creating it again",
		"org", o.label, "chunk", c.id, "err", out.Err)
	found, err := r.reconcile(ctx, c)
	if err != nil || found {
		if found {
			r.mu.Lock()
			o.failures = 0
			r.mu.Unlock()
		}
		return found, err
	}
	r.mu.Lock()
	o.failures++
	if o.failures >= maxCreateFailures {
		r.orgDead(o, fmt.Sprintf("%d creates in a row failed", o.failures))
	} else {
		o.paused = r.now().Add(backoff(r.cfg.PollMin, r.cfg.PollMax, o.failures))
	}
	r.mu.Unlock()
	return false, r.abandon(c, fmt.Sprintf("create failed and no batch appeared: %v", out.Err), moveRequeue)
}

// tooLarge handles a create refused with 413: the chunk's requests go back
// to the queue and chunks are cut at most half its body from now on, so
// the chunk is split in two (and further on another 413); a single request
// refused is re-routed.
func (r *Runner) tooLarge(c *chunk) error {
	if c.n() == 1 {
		return r.abandon(c, "create: HTTP 413 for one request: larger than the API accepts", moveReroute)
	}
	r.mu.Lock()
	r.byteCap = min(r.byteCap, c.bytes/2)
	limit := r.byteCap
	r.mu.Unlock()
	r.log.Warn("batch: a create was refused as too large (HTTP 413); chunks are cut smaller",
		"org", c.org.label, "chunk", c.id, "requests", c.n(), "bytes", c.bytes, "max_bytes", limit)
	return r.abandon(c, "create: HTTP 413", moveRequeue)
}

// backoff is min(max, min × 2^(n-1)).
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// recordCreated journals c's batch id.
func (r *Runner) recordCreated(c *chunk, b *api.MessageBatch, adopted bool) error {
	now := r.now()
	c.batch, c.created, c.expires, c.adopted = b.ID, now, b.ExpiresAt, adopted
	r.mu.Lock()
	r.claimed[b.ID] = true
	if c.seedFor != nil {
		r.stats.Seeds++ // created, whether this run saw the answer or adopted it
	}
	if adopted {
		r.stats.Adopted++
	} else {
		r.stats.Created++
	}
	r.mu.Unlock()
	var exp *time.Time
	if !b.ExpiresAt.IsZero() {
		exp = &b.ExpiresAt
	}
	if err := r.j.append(record{Op: opCreated, Chunk: c.id, At: now, Batch: b.ID, ExpiresAt: exp, Adopted: adopted}, true); err != nil {
		return err
	}
	if adopted {
		r.log.Warn("batch: adopted a batch whose create was not recorded; not creating it again",
			"org", c.org.label, "chunk", c.id, "batch", b.ID, "requests", c.n())
	} else {
		r.log.Info("batch: created", "org", c.org.label, "chunk", c.id, "batch", b.ID, "requests", c.n())
	}
	return nil
}

// reconcile looks for c's batch in its org's list: created at or after
// the intent (less the clock skew), with c's request count, and not
// claimed by another journaled chunk. It keeps looking for CreateGrace (a
// new batch may not be listed at once).
func (r *Runner) reconcile(ctx context.Context, c *chunk) (bool, error) {
	o := c.org
	// A create may have reached the API any time between the intent and
	// now (a slow or cut attempt, a crash mid-call), and become visible a
	// read-after-write delay later.
	until := r.now().Add(r.cfg.CreateGrace)
	delay := r.cfg.PollMin
	failures := 0
	for {
		r.mu.Lock()
		wanted := r.wanted(c)
		r.mu.Unlock()
		if !wanted {
			return false, nil
		}
		key, err := r.orgKey(ctx, o)
		if err != nil {
			return false, err
		}
		if key == nil {
			r.log.Warn("batch: cannot look for a batch whose create may have happened; the organization has no live key (it may be paid twice)",
				"org", o.label, "chunk", c.id)
			return false, nil
		}
		b, skewed, out, err := r.findOrphan(ctx, key, c)
		if b != nil {
			return true, r.recordCreated(c, b, true)
		}
		now := r.now()
		if err == nil && !now.Before(until) {
			if skewed != nil {
				// Nothing after the intent in the whole grace: the one
				// inside the clock-skew window is ours.
				return true, r.recordCreated(c, skewed, true)
			}
			return false, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
			if out.Class == client.KeyDead {
				r.keyDead(o, key, &out)
				continue
			}
			failures++
			if failures >= maxListFailures && !now.Before(until) {
				r.log.Warn("batch: could not list the organization's batches; giving the chunk up (it may be paid twice)",
					"org", o.label, "chunk", c.id, "err", err)
				return false, nil
			}
			if out.Class == client.RateLimited && out.HasRetryAfter {
				delay = max(delay, out.RetryAfter)
			}
		}
		wait := delay
		if now.Before(until) {
			wait = min(wait, until.Sub(now)+time.Millisecond)
		}
		if err := sleep(ctx, wait); err != nil {
			return false, err
		}
		delay = min(delay*3/2, r.cfg.PollMax)
	}
}

// findOrphan pages through the org's batches, newest first, back to the
// intent time less the skew (and, after this run's own failed create, no
// later than its return plus the skew), and returns the oldest unclaimed batch with
// c's request count created at or after the intent (with one create at a
// time per org, the first batch created after the intent is the intent's),
// and apart the oldest such batch created in the clock-skew window before
// the intent: more likely a colleague's than ours, it is adopted only when
// nothing after the intent shows up within CreateGrace.
func (r *Runner) findOrphan(ctx context.Context, key *keys.Key, c *chunk) (best, skewed *api.MessageBatch, _ client.Outcome, _ error) {
	lo := c.intentAt.Add(-r.cfg.ClockSkew)
	after := ""
	for range listPages {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after_id", after)
		}
		out := r.do(ctx, key, "GET", batchesPath+"?"+q.Encode(), nil)
		if out.Class != client.OK {
			return nil, nil, out, fmt.Errorf("batch: listing batches: HTTP %d: %v", out.Status, out.Err)
		}
		var p api.Page[api.MessageBatch]
		if err := json.Unmarshal(out.Body, &p); err != nil {
			return nil, nil, out, fmt.Errorf("batch: listing batches: %w", err)
		}
		older := false
		r.mu.Lock()
		for i := range p.Data {
			b := &p.Data[i]
			if b.CreatedAt.Before(lo) {
				older = true
				break
			}
			if r.claimed[b.ID] || total(b.RequestCounts) != c.n() {
				continue
			}
			if !c.createdBy.IsZero() && b.CreatedAt.After(c.createdBy.Add(r.cfg.ClockSkew)) {
				continue // created after our create returned: not ours
			}
			// Newest first: the last match of each kind is the oldest.
			if b.CreatedAt.Before(c.intentAt) {
				skewed = b
			} else {
				best = b
			}
		}
		r.mu.Unlock()
		if older || !p.HasMore || p.LastID == nil {
			break
		}
		after = *p.LastID
	}
	return best, skewed, client.Outcome{}, nil
}

// watch polls c's batch until it ends and returns it; nil when c was given
// up. It cancels a stuck batch, or any batch past its deadline — unless
// the batch was adopted: that one is given up without a cancel.
func (r *Runner) watch(ctx context.Context, c *chunk) (*api.MessageBatch, error) {
	o := c.org
	delay := r.cfg.PollMin
	notFound := 0
	path := batchesPath + "/" + url.PathEscape(c.batch)
	first := true
	for {
		if !first || c.fresh {
			// A Cancel cuts the wait short for a batch it will cancel.
			var wake <-chan struct{}
			if c.cancelAt.IsZero() && !c.adopted {
				wake = r.cancelled
			}
			if err := sleepOr(ctx, r.nextWait(c, delay), wake); err != nil {
				return nil, err
			}
			delay = min(delay*3/2, r.cfg.PollMax)
		}
		first = false
		r.mu.Lock()
		wanted := r.wanted(c)
		r.mu.Unlock()
		if !wanted {
			return nil, r.drop(c)
		}
		if r.crash("mid-poll") {
			return nil, errCrash
		}
		key, err := r.orgKey(ctx, o)
		if err != nil {
			return nil, err
		}
		if key == nil {
			return nil, r.giveUp(c, "organization has no live key", true)
		}
		if why := r.cancelReason(); why != "" && c.cancelAt.IsZero() && !c.adopted {
			if err := r.escape(ctx, c, key, why); err != nil {
				return nil, err
			}
		} else if !c.cancelAt.IsZero() && !c.canceled {
			if err := r.sendCancel(ctx, c, key); err != nil {
				return nil, err
			}
		}
		out := r.do(ctx, key, "GET", path, nil)
		now := r.now()
		var b api.MessageBatch
		if out.Class == client.OK {
			if err := json.Unmarshal(out.Body, &b); err != nil || b.ID == "" {
				out.Class = client.Transport
			}
		}
		switch out.Class {
		case client.OK:
			notFound = 0
			if !b.ExpiresAt.IsZero() {
				c.expires = b.ExpiresAt
			}
			if b.ProcessingStatus == api.BatchEnded {
				r.mu.Lock()
				r.release(c)
				r.stats.Ended++
				r.countTurnaround(c, &b)
				r.mu.Unlock()
				r.chunkEnded(c)
				r.poke()
				return &b, nil
			}
		case client.Canceled:
			return nil, context.Cause(ctx)
		case client.KeyDead:
			r.keyDead(o, key, &out)
			continue
		case client.RateLimited:
			if out.HasRetryAfter {
				delay = max(delay, out.RetryAfter)
			}
		case client.Invalid:
			if out.Status == 404 && now.Sub(c.created) <= r.cfg.CreateGrace {
				break // the read-after-write window
			}
			notFound++
			if notFound > maxNotFound {
				return nil, r.giveUp(c, fmt.Sprintf("retrieve keeps failing: HTTP %d", out.Status), false)
			}
		}
		// Escape: a batch in progress past StuckAfter, or any batch not
		// known to have ended (nor to be canceling by someone else's hand)
		// past the deadline.
		inProgress := out.Class == client.OK && b.ProcessingStatus == api.BatchInProgress
		if c.cancelAt.IsZero() && (inProgress || out.Class != client.OK) {
			why := ""
			switch {
			case inProgress && r.cfg.StuckAfter > 0 && now.Sub(c.intentAt) >= r.cfg.StuckAfter:
				why = fmt.Sprintf("stuck: not ended %v after create", r.cfg.StuckAfter)
			case !now.Before(r.deadline(c)):
				why = "deadline reached"
			}
			if why != "" && c.adopted {
				// Found through the list, so possibly a colleague's batch
				// with our request count: never cancel it. Its requests
				// are re-routed now (paid twice if it was ours after all
				// and ends with answers).
				return nil, r.giveUp(c, why+" (an adopted batch: not cancelled)", false)
			}
			if why != "" {
				if err := r.escape(ctx, c, key, why); err != nil {
					return nil, err
				}
			}
		}
		// Bounded whatever the API answers.
		if !c.cancelAt.IsZero() && !now.Before(c.cancelAt.Add(r.cfg.CancelWait)) {
			return nil, r.giveUp(c, fmt.Sprintf("not ended %v after sluice cancelled it", r.cfg.CancelWait), false)
		}
		if !now.Before(r.deadline(c).Add(r.cfg.CancelWait)) {
			return nil, r.giveUp(c, "not ended by its deadline", false)
		}
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
func (r *Runner) nextWait(c *chunk, d time.Duration) time.Duration {
	now := r.now()
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

// escape cancels c's batch: the intent is fsynced first, so rows the
// cancel leaves canceled are re-routed even after a crash.
func (r *Runner) escape(ctx context.Context, c *chunk, key *keys.Key, why string) error {
	c.cancelAt = r.now()
	if err := r.j.append(record{Op: opCancel, Chunk: c.id, At: c.cancelAt, Batch: c.batch, Why: why}, true); err != nil {
		return err
	}
	r.mu.Lock()
	r.stats.Cancelled++
	r.mu.Unlock()
	r.log.Warn("batch: cancelling a batch; its ended rows will be harvested and the rest re-routed",
		"org", c.org.label, "batch", c.batch, "reason", why)
	if r.crash("after-cancel-intent") {
		return errCrash
	}
	return r.sendCancel(ctx, c, key)
}

// sendCancel asks the API to cancel c's batch. A cancel that fails because
// the batch is already canceling or ended is a success; any other failure
// is tried again on the next poll.
func (r *Runner) sendCancel(ctx context.Context, c *chunk, key *keys.Key) error {
	path := batchesPath + "/" + url.PathEscape(c.batch)
	out := r.do(ctx, key, "POST", path+"/cancel", nil)
	if out.Class == client.Canceled {
		return context.Cause(ctx)
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
		if out.Status == http.StatusNotFound && r.now().Sub(c.created) <= r.cfg.CreateGrace {
			level = slog.LevelDebug // expected: the batch is not visible yet
		}
		r.log.Log(ctx, level, "batch: cancel failed; trying again on the next poll", "org", c.org.label, "batch", c.batch, "err", out.Err)
		return nil
	}
	c.canceled = true
	return r.j.append(record{Op: opCanceled, Chunk: c.id, At: r.now(), Batch: c.batch}, false)
}

// do is the client's Do for a batch call, and tells key's health rule when
// the call got past authentication (any answer but 401/403, 5xx, 529): a
// suspicion ends, so two blips hours apart are two episodes, not one.
func (r *Runner) do(ctx context.Context, key *keys.Key, method, path string, body []byte) client.Outcome {
	sent := r.now()
	out := r.cfg.Client.Do(ctx, key, method, path, body)
	switch out.Class {
	case client.OK, client.Invalid, client.RateLimited:
		if key.Answered(sent, keys.AllPools) {
			r.log.Info("batch: key answered again; no longer suspect", "key", key)
		}
	}
	return out
}

// orgKey returns o's key for the next call, marking o dead when it has no
// live key. When its only live keys are suspect (refused lately), it waits
// for the first one's re-probe time, so a refused key is re-probed at the
// pace keys.Key.Refused sets, not hammered. The error is ctx's.
func (r *Runner) orgKey(ctx context.Context, o *orgState) (*keys.Key, error) {
	for {
		r.mu.Lock()
		k := o.key()
		if k == nil {
			r.orgDead(o, "no live key")
		}
		r.mu.Unlock()
		if k == nil {
			return nil, nil
		}
		if k.Retired() {
			return k, nil // removed from the sources: it finishes what it started
		}
		now := r.now()
		ok, next := k.Usable(now, keys.AllPools)
		if ok {
			k.Launched(now, keys.AllPools)
			return k, nil
		}
		if next.IsZero() {
			continue // died meanwhile: o.key skips it now
		}
		if err := sleep(ctx, next.Sub(now)); err != nil {
			return nil, err
		}
	}
}

// keyDead applies a refusal of key by its scope: a 401 or 403 goes to the
// key's health rule (suspect first, dead only when refusals last, see
// keys.Key.Refused); a 402, spend cap or exhausted credit kills it at once.
// The org's next key takes over, or the org's batch path ends.
func (r *Runner) keyDead(o *orgState, key *keys.Key, out *client.Outcome) {
	reason := fmt.Sprintf("HTTP %d", out.Status)
	if out.Err != nil {
		reason = out.Err.Error()
	}
	now := r.now()
	if out.Scope() == client.ScopeOrg {
		if key.MarkDead(reason) {
			_, why := key.Dead()
			r.log.Warn("batch: key is dead for this run", "key", key, "reason", why)
		}
	} else {
		// The batch endpoints are not per model: a 403 here is the key's.
		switch key.Refused(now, now.Add(-out.Latency), keys.AllPools, reason) {
		case keys.Suspected:
			r.log.Warn("batch: key refused; it is held back and re-probed, and is dead only if refusals last",
				"key", key, "status", out.Status, "dead_after", key.Health().DeadAfter.String())
		case keys.Killed:
			_, why := key.Dead()
			r.log.Warn("batch: key is dead for this run", "key", key, "reason", why)
		}
	}
	r.mu.Lock()
	if o.key() == nil {
		r.orgDead(o, "every key is dead")
	}
	r.mu.Unlock()
	r.poke()
}

// What abandon does with the requests of a chunk that has no batch.
const (
	moveRequeue = iota // back to the pending queue, for another chunk
	moveReroute        // to the sync path
)

// abandon closes c, which has no batch (or one that will never be
// harvested), and moves its requests: back to the pending queue, or to the
// sync path.
func (r *Runner) abandon(c *chunk, why string, move int) error {
	if c.journaled {
		if err := r.j.append(record{Op: opAbandoned, Chunk: c.id, At: r.now(), Batch: c.batch, Why: why}, true); err != nil {
			return err
		}
	}
	r.mu.Lock()
	c.closed, c.finished = true, true
	c.rerouted = move == moveReroute
	r.release(c)
	var reroute []*call.Request
	if move == moveRequeue {
		r.requeue(c)
	} else {
		reroute = r.takeUnhandled(c)
		r.freeUnattached(c)
	}
	r.mu.Unlock()
	for _, q := range reroute {
		r.emitReroute(c, q, why)
	}
	r.poke()
	return nil
}

// giveUp ends this run's work on c's batch and re-routes its requests
// without an outcome. keepOpen leaves the journal entry open, so a resume
// with a working key can still harvest it; its ids not submitted yet are
// then held back (see Holds), not sent again.
func (r *Runner) giveUp(c *chunk, why string, keepOpen bool) error {
	if !keepOpen {
		if err := r.j.append(record{Op: opAbandoned, Chunk: c.id, At: r.now(), Batch: c.batch, Why: why}, true); err != nil {
			return err
		}
	}
	r.mu.Lock()
	c.finished = true
	c.closed = c.closed || !keepOpen
	c.keepOpen = keepOpen
	r.release(c)
	r.stats.GivenUp++
	reroute := r.takeUnhandled(c)
	if keepOpen {
		for i, id := range c.ids {
			if r.recovered[id] == c {
				r.heldBack[id] = c.hashes[i]
			}
		}
	}
	r.freeUnattached(c)
	r.mu.Unlock()
	r.log.Warn("batch: giving a batch up; its requests are re-routed to sync", "org", c.org.label, "batch", c.batch,
		"requests", len(reroute), "reason", why)
	for _, q := range reroute {
		r.emitReroute(c, q, "batch given up: "+why)
	}
	r.poke()
	return nil
}

// drop ends this run's work on c, which no request waits for.
func (r *Runner) drop(c *chunk) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.finished = true
	r.release(c)
	r.maybeClose(c)
	r.poke()
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return sleepOr(ctx, d, nil) }

// sleepOr waits d, or until wake is closed (nil: never), or until ctx
// ends.
func sleepOr(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// countTurnaround adds an ended batch to its org's Stats.Turnaround, by
// the API's clock; a batch sluice cancelled ended early and says nothing
// of the queue. Requires r.mu.
func (r *Runner) countTurnaround(c *chunk, b *api.MessageBatch) {
	if b.EndedAt == nil || b.CreatedAt.IsZero() || b.CancelInitiatedAt != nil || !b.EndedAt.After(b.CreatedAt) {
		return
	}
	rc := b.RequestCounts
	n := rc.Processing + rc.Succeeded + rc.Errored + rc.Canceled + rc.Expired
	if r.stats.Turnaround == nil {
		r.stats.Turnaround = map[string]Turnaround{}
	}
	t := r.stats.Turnaround[c.org.label]
	t.OrgID = c.org.id
	t.Batches++
	t.Requests += n
	t.Seconds += b.EndedAt.Sub(b.CreatedAt).Seconds()
	r.stats.Turnaround[c.org.label] = t
}
