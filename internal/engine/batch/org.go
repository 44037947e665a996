package batch

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// orgState is one organization's batch path. Loop-owned.
type orgState struct {
	id, label string
	keys      []*keys.Key
	window    int // most requests in unended batches
	// accepted is the most requests o had in its queue right after a
	// create was accepted (queuebound.go).
	accepted int
	inflight int // requests in unended batches (and unresolved intents)
	creating int // chunks whose create is unresolved: at most one is new
	// turn is the chunk whose create or reconciliation runs: one at a
	// time per org, so a listed batch is matched to one intent.
	turn     *chunk
	paused   time.Time
	dead     bool
	failures int // consecutive ambiguous create failures
	// primed is, per shared prefix (call.Request.CachePrefix), when the
	// org's prompt cache is to be primed again (prime.go).
	primed map[uint64]time.Time
	// seeds is, per shared prefix, whether a batch has warmed it here
	// (seed.go).
	seeds map[uint64]*seed
}

// key returns the org's first live key that is neither suspect nor
// retired, else its first suspect one (which its next call re-probes),
// else a retired one (removed from the key sources: it still polls and
// harvests the batches in flight, it creates none — see creatable), or nil
// when it has none.
func (o *orgState) key() *keys.Key {
	var suspect, retired *keys.Key
	for _, k := range o.keys {
		if dead, _ := k.Dead(); dead {
			continue
		}
		switch {
		case k.Retired():
			if retired == nil {
				retired = k
			}
		case !k.Suspect(keys.AllPools):
			return k
		case suspect == nil:
			suspect = k
		}
	}
	if suspect != nil {
		return suspect
	}
	return retired
}

// creatable reports whether o has a live key that is not retired: new
// batches go only there.
func (o *orgState) creatable() bool {
	for _, k := range o.keys {
		if dead, _ := k.Dead(); !dead && !k.Retired() {
			return true
		}
	}
	return false
}

// keyFor returns the key for c's next call at now. It is nil when there
// is none now: waiting when c's org's only live keys are suspect (refused
// lately) — c then waits for the first one's re-probe (c.wake), so a
// refused key is re-probed at the pace keys.Key.Refused sets, not
// hammered — else the org has no live key (it is then dead). A retired key
// is returned as is: it finishes what it started.
func (r *Runner) keyFor(c *chunk, now time.Time) (key *keys.Key, waiting bool) {
	o := c.org
	for {
		k := o.key()
		if k == nil {
			r.orgDead(o, "no live key")
			return nil, false
		}
		if k.Retired() {
			return k, false
		}
		ok, next := k.Usable(now, keys.AllPools)
		if ok {
			k.Launched(now, keys.AllPools)
			return k, false
		}
		if !next.IsZero() {
			c.wake = next
			return nil, true
		}
		// Died meanwhile: o.key skips it now.
	}
}

// refused applies a refusal of key on o's batch calls by the one rule
// (keys.ApplyRefusal): a 401 or 403 goes to the key's health rule —
// suspect first, dead only when refusals last; the batch endpoints are not
// per model, so a 403 here is the key's as a whole — a workspace's usage
// limit kills the key, and the organization's billing, spend cap or credit
// kills every key of it. The org's next key takes over, or the org's batch
// path ends.
func (r *Runner) refused(o *orgState, key *keys.Key, out *client.Outcome, sent time.Time) {
	ref := out.Refusal(keys.AllPools, sent, r.now())
	v, killed := keys.ApplyRefusal(key, o.keys, ref)
	if v == keys.Suspected {
		r.log.Warn("batch: key refused; it is held back and re-probed, and is dead only if refusals last",
			"key", key, "status", out.Status, "dead_after", key.Health().DeadAfter.String())
	}
	for _, k := range killed {
		_, why := k.Dead()
		r.log.Warn("batch: key is dead for this run", "key", k, "reason", why)
	}
	if o.key() == nil {
		r.orgDead(o, "every key is dead")
	}
	r.in.poke()
}

// retryAfter is the wait a rate-limited control call asks for, capped by
// the rule dispatch follows (api.CapRetryAfter at Config.MaxRetryAfter),
// the first cut logged once per org.
func (r *Runner) retryAfter(o *orgState, out *client.Outcome) time.Duration {
	d, capped := api.CapRetryAfter(out.RetryAfter, r.cfg.MaxRetryAfter)
	if capped {
		r.warnOnce("retry-after-"+o.id, "batch: the API asked for a retry-after longer than the cap; waiting only up to the cap (--max-retry-after)",
			"org", o.label, "retry_after", out.RetryAfter.String(), "cap", d.String())
	}
	return d
}

// orgDead ends an org's batch path for this run.
func (r *Runner) orgDead(o *orgState, why string) {
	if o.dead {
		return
	}
	o.dead = true
	r.log.Warn("batch: organization can no longer take batches; its requests move", "org", o.label, "reason", why)
}

// noLiveOrg reports whether every org's batch path is dead.
func (r *Runner) noLiveOrg() bool {
	for _, o := range r.orgs {
		if !o.dead && o.key() != nil {
			return false
		}
	}
	return true
}

// addKeys lets keys join (a rotation, AddKeys): a key of an org the runner
// batches on joins it; a key of an org it does not know serves the sync
// path only until the next run (logged).
func (r *Runner) addKeys(ks []*keys.Key) {
	for _, k := range ks {
		var to *orgState
		for _, o := range r.orgs {
			if o.id == k.Org() {
				to = o
			}
		}
		switch {
		case to == nil:
			r.log.Info("batch: a new key's organization is not on the batch path of this run; it serves sync requests", "key", k)
		case !slices.Contains(to.keys, k):
			to.keys = append(to.keys, k)
			if to.dead {
				to.dead = false // a live key again: new chunks may go there
				r.log.Info("batch: organization takes batches again (a new key)", "org", to.label, "key", k)
			}
		}
	}
}

// do is the client's Do for a batch call, and tells key's health rule when
// the call got past authentication (any answer but 401/403, 5xx, 529): a
// suspicion ends, so two blips hours apart are two episodes, not one.
// Steps call it.
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

// warnOnce logs a warning the first time its key is seen.
func (r *Runner) warnOnce(key, msg string, args ...any) {
	if r.warned[key] {
		return
	}
	r.warned[key] = true
	r.log.Warn(msg, args...)
}
