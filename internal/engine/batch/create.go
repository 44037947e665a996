package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
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

// advanceQueued starts a queued chunk once its org's create turn is free:
// a resumed intent is reconciled through the org's list; a new chunk is
// checked (a live key, no Cancel, before the cutoff), sent as written where
// its org's cache is not batch-warm, primed, then created. Loop-owned.
func (r *Runner) advanceQueued(c *chunk, now time.Time) {
	o := c.org
	if o.turn != nil && o.turn != c {
		return // another chunk's create or reconciliation runs on o
	}
	if c.recovered {
		o.turn = c
		r.enter(c, reconciling)
		r.startReconcile(c, now)
		return
	}
	key, waiting := r.keyFor(c, now)
	switch {
	case waiting:
		return
	case key == nil, key.Retired():
		r.abandon(c, "organization has no live key", moveRequeue)
		return
	}
	if why := r.lateOrCancelled(now); why != "" {
		r.abandon(c, why, moveReroute)
		return
	}
	o.turn = c
	r.sendAsWritten(c, now) // before priming: a prefix sent as written needs no primer
	ps, thinking := r.primers(c, now)
	if thinking {
		r.warnOnce("prime-thinking", "batch: requests with extended thinking do not prime the prompt cache before their batches (a primer cannot carry a thinking budget); a prefix only they carry is not primed", "org", o.label)
	}
	if len(ps) > 0 {
		r.enter(c, priming)
		r.startPrime(c, key, ps)
		return
	}
	r.enter(c, creating)
	c.try.key = key
	r.startCreate(c)
}

// lateOrCancelled says why a chunk cut a moment ago must not be created
// now — a Cancel, or the cutoff passed — or "".
func (r *Runner) lateOrCancelled(now time.Time) string {
	if r.cancelWhy != "" {
		return r.cancelWhy
	}
	if co := r.cutoff(); !co.IsZero() && !now.Before(co) {
		return r.noBatch(now)
	}
	return ""
}

// createReport is a create step's outcome.
type createReport struct {
	c        *chunk
	key      *keys.Key
	intentAt time.Time // when the intent was journaled
	// cancelled: a Cancel came while the intent was written; nothing was
	// sent.
	cancelled string
	out       client.Outcome
	batch     *api.MessageBatch // out OK: the batch, its created record journaled
	at        time.Time         // when the created record was
	err       error             // the journal, or a simulated crash
}

func (rep *createReport) of() *chunk { return rep.c }

// startCreate starts c's create step: the intent journaled and synced,
// the create, and on its answer the created record, synced, before the
// report.
func (r *Runner) startCreate(c *chunk) {
	key := c.try.key
	r.start(c, r.live.pollCtx, func(ctx context.Context) report {
		rep := &createReport{c: c, key: key}
		body := buildBody(c.list, c.bytes, c.wireID)
		rep.intentAt = r.now()
		in := record{Op: opIntent, Chunk: c.id, At: rep.intentAt, Org: c.org.id, OrgLabel: c.org.label,
			N: c.n(), Bytes: int64(len(body)), Hash: chunkHash(c.ids, c.hashes), IDs: c.ids, Params: c.hashes, Wire: c.wire, Plain: c.plain}
		if rep.err = r.j.append(in, true); rep.err != nil {
			return rep
		}
		if r.crashed("before-create") {
			rep.err = errCrash
			return rep
		}
		if rep.cancelled = r.in.cancelReason(); rep.cancelled != "" {
			return rep
		}
		rep.out = r.do(ctx, key, "POST", batchesPath, body)
		if rep.out.Class != client.OK {
			return rep
		}
		var b api.MessageBatch
		if err := json.Unmarshal(rep.out.Body, &b); err != nil || b.ID == "" {
			rep.out.Class, rep.out.Err = client.Transport, fmt.Errorf("batch: create answered without a batch: %v", err)
			return rep
		}
		if r.crashed("after-create") {
			rep.err = errCrash
			return rep
		}
		rep.batch, rep.at = &b, r.now()
		rep.err = r.journalCreated(c.id, &b, false, rep.at)
		return rep
	})
}

// journalCreated writes and syncs a chunk's created record.
func (r *Runner) journalCreated(chunk string, b *api.MessageBatch, adopted bool, at time.Time) error {
	var exp *time.Time
	if !b.ExpiresAt.IsZero() {
		exp = &b.ExpiresAt
	}
	return r.j.append(record{Op: opCreated, Chunk: chunk, At: at, Batch: b.ID, ExpiresAt: exp, Adopted: adopted}, true)
}

// createDone applies a create step's report.
func (r *Runner) createDone(rep *createReport) {
	c, o, out := rep.c, rep.c.org, &rep.out
	if !rep.intentAt.IsZero() && rep.err == nil {
		c.intentAt = rep.intentAt
	}
	if r.stopped(r.live.pollCtx, rep.err) || (out.Class == client.Canceled && rep.cancelled == "") {
		// Stopped, or cut by the end of the run: the intent stays open and
		// a resume reconciles it.
		return
	}
	if rep.cancelled != "" {
		r.abandon(c, rep.cancelled, moveReroute) // a Cancel while the intent was written
		return
	}
	now := r.now()
	switch out.Class {
	case client.OK:
		o.failures = 0
		r.queueAccepted(o) // queuebound.go
		r.created(c, rep.batch, false, rep.at)
		return
	case client.RateLimited:
		// The queue cap or the batch RPM: not created.
		wait := r.cfg.PollMax
		if out.HasRetryAfter {
			wait = max(r.retryAfter(o, out), r.cfg.PollMin)
		}
		o.paused = now.Add(wait)
		if full, named := queueFull(out); full {
			r.queueRefused(o, c, named) // queuebound.go
		}
		r.log.Info("batch: create refused with 429; the org pauses", "org", o.label, "wait", wait, "err", out.Err)
		r.abandon(c, "create: HTTP 429", moveRequeue)
		return
	case client.KeyDead:
		r.refused(o, rep.key, out, now.Add(-out.Latency))
		r.abandon(c, fmt.Sprintf("create: HTTP %d", out.Status), moveRequeue)
		return
	case client.Invalid:
		switch out.Status {
		case http.StatusNotFound:
			// No batches endpoint here (a gateway): the org cannot batch.
			r.orgDead(o, "create: HTTP 404")
			r.abandon(c, "create: HTTP 404", moveRequeue)
			return
		case http.StatusRequestEntityTooLarge:
			r.tooLarge(c)
			return
		}
		// 400 and any other 4xx: the sync path classifies each request.
		r.warnOnce(fmt.Sprintf("create-%d", out.Status), "batch: a create was refused; its requests are re-routed to sync (logged once)",
			"org", o.label, "status", out.Status, "err", out.Err)
		r.abandon(c, fmt.Sprintf("create refused: HTTP %d: %v", out.Status, out.Err), moveReroute)
		return
	}
	// 5xx, 529, a dropped connection: the batch may exist, created
	// before now.
	c.createdBy = now
	r.log.Warn("batch: create failed without a clear answer; looking for the batch before creating it again",
		"org", o.label, "chunk", c.id, "err", out.Err)
	r.enter(c, reconciling)
	c.try.createErr = out.Err
	r.startReconcile(c, now)
}

// created records c's batch (created by this run, or adopted from the
// org's list) and starts polling it.
func (r *Runner) created(c *chunk, b *api.MessageBatch, adopted bool, at time.Time) {
	c.batch, c.created, c.expires, c.adopted = b.ID, at, b.ExpiresAt, adopted
	r.claimed[b.ID] = true
	if c.seedFor != nil {
		r.stats.Seeds++ // created, whether this run saw the answer or adopted it
	}
	if adopted {
		r.stats.Adopted++
		r.log.Warn("batch: adopted a batch whose create was not recorded; not creating it again",
			"org", c.org.label, "chunk", c.id, "batch", b.ID, "requests", c.n())
	} else {
		r.stats.Created++
		r.log.Info("batch: created", "org", c.org.label, "chunk", c.id, "batch", b.ID, "requests", c.n())
	}
	r.enter(c, polling)
	c.try = tries{delay: r.cfg.PollMin}
	if !c.recovered {
		// Created by this run: the first poll waits.
		r.schedulePoll(c, at)
	}
}

// tooLarge handles a create refused with 413: the chunk's requests go back
// to the queue and chunks are cut at most half its body from now on, so
// the chunk is split in two (and further on another 413); a single request
// refused is re-routed.
func (r *Runner) tooLarge(c *chunk) {
	if c.n() == 1 {
		r.abandon(c, "create: HTTP 413 for one request: larger than the API accepts", moveReroute)
		return
	}
	r.q.byteCap = min(r.q.byteCap, c.bytes/2)
	r.log.Warn("batch: a create was refused as too large (HTTP 413); chunks are cut smaller",
		"org", c.org.label, "chunk", c.id, "requests", c.n(), "bytes", c.bytes, "max_bytes", r.q.byteCap)
	r.abandon(c, "create: HTTP 413", moveRequeue)
}

// backoff is min(max, min × 2^(n-1)).
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}
