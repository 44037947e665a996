package keys

import (
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Health is the one rule for when a refused key is dead. A 401 or 403 is evidence,
// not proof: the API's authentication can fail for everyone for a few
// seconds, and an overnight job must not end with "no live key" after one.
// So a refusal makes the key (or, for a 403, the key for that model pool)
// suspect: it is held back from new work and re-probed by one real request
// after ProbeAfter, then at doubling intervals up to MaxProbeGap. It is dead
// only once refusals have lasted DeadAfter and number at least DeadStrikes, each from an attempt sent after the suspicion began (attempts in
// flight at the first refusal saw the same blip and are not new evidence).
// Any answer that got past authentication clears the suspicion.
type Health struct {
	ProbeAfter  time.Duration // the first re-probe, after the first refusal
	MaxProbeGap time.Duration // re-probe gaps double up to this
	DeadAfter   time.Duration // refusals must last this long to kill
	DeadStrikes int           // and number at least this many
}

// DefaultHealth is the rule a key follows unless [Pool.SetHealth] says
// otherwise: an auth outage shorter than a minute kills nothing.
var DefaultHealth = Health{ProbeAfter: time.Second, MaxProbeGap: 15 * time.Second, DeadAfter: time.Minute, DeadStrikes: 3}

// withDefaults fills zero fields from DefaultHealth (DeadAfter may be
// zero: then refusals kill once they number DeadStrikes).
func (h Health) withDefaults() Health {
	if h.ProbeAfter <= 0 {
		h.ProbeAfter = DefaultHealth.ProbeAfter
	}
	if h.MaxProbeGap < h.ProbeAfter {
		h.MaxProbeGap = max(h.ProbeAfter, min(DefaultHealth.MaxProbeGap, 16*h.ProbeAfter))
	}
	if h.DeadAfter < 0 {
		h.DeadAfter = 0
	}
	if h.DeadStrikes < 1 {
		h.DeadStrikes = DefaultHealth.DeadStrikes
	}
	return h
}

// SetHealth sets the refusal rule of every key of the pool. Call it before
// the keys are used.
func (p *Pool) SetHealth(h Health) {
	h = h.withDefaults()
	for _, k := range p.Keys() {
		k.k.mu.Lock()
		k.k.policy = h
		k.k.mu.Unlock()
	}
}

// Health returns the key's refusal rule.
func (k Key) Health() Health {
	if k.k == nil {
		return DefaultHealth
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.policy
}

// AllPools is the pool argument of Refused, Answered and Usable that means
// the key as a whole (a 401), not one model pool.
const AllPools api.Pool = ""

// Verdict is what a refusal did to a key.
type Verdict int

const (
	// Suspected: the first refusal of an episode; the key (or the key for
	// the pool) is held back until its re-probe. Log it once.
	Suspected Verdict = iota + 1
	// StillSuspect: a refusal inside an episode that did not end it.
	StillSuspect
	// Killed: this refusal made the key dead (for the pool, for a pool
	// refusal). Log it once.
	Killed
	// AlreadyDead: the key (or the key for the pool) was dead before.
	AlreadyDead
)

// suspicion is one episode of refusals of a key or of a key × pool.
type suspicion struct {
	since   time.Time // the first refusal
	strikes int       // refusals of attempts sent at or after since
	gap     time.Duration
	probeAt time.Time // no new attempt before this
}

// health is a key's refusal state beyond the whole-key dead flag. Guarded
// by key.mu.
type health struct {
	suspect   *suspicion              // the key as a whole (401)
	pools     map[api.Pool]*suspicion // one model pool (403)
	deadPools map[api.Pool]string     // dead for a pool: its reason
}

// Refused records a refusal (401 for AllPools, 403 for the request's pool)
// of an attempt sent at sentAt and answered at now, and applies the rule
// above. reason is kept, redacted, for the report if the key dies.
func (k Key) Refused(now, sentAt time.Time, pool api.Pool, reason string) Verdict {
	k.mustBeReal("Refused")
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	h := &k.k.health
	if k.k.dead {
		return AlreadyDead
	}
	if pool != AllPools {
		if _, dead := h.deadPools[pool]; dead {
			return AlreadyDead
		}
	}
	slot := &h.suspect
	if pool != AllPools {
		if h.pools == nil {
			h.pools = map[api.Pool]*suspicion{}
		}
		s := h.pools[pool]
		slot = &s
		defer func() {
			if *slot == nil {
				delete(h.pools, pool)
			} else {
				h.pools[pool] = *slot
			}
		}()
	}
	s := *slot
	pol := k.k.policy
	if s == nil {
		s = &suspicion{since: now, gap: pol.ProbeAfter, probeAt: now.Add(pol.ProbeAfter)}
		*slot = s
	} else if sentAt.Before(s.since) {
		return StillSuspect
	}
	s.strikes++
	if s.strikes >= pol.DeadStrikes && now.Sub(s.since) >= pol.DeadAfter {
		*slot = nil
		why := strings.ReplaceAll(reason, k.k.secret(), k.k.redacted)
		if pool == AllPools {
			k.k.dead, k.k.reason = true, why
		} else {
			if h.deadPools == nil {
				h.deadPools = map[api.Pool]string{}
			}
			h.deadPools[pool] = why
		}
		return Killed
	}
	if s.strikes == 1 {
		return Suspected
	}
	s.gap = min(2*s.gap, pol.MaxProbeGap)
	s.probeAt = now.Add(s.gap)
	return StillSuspect
}

// Answered records that an attempt for pool sent at sentAt got past
// authentication (any answer but 401/403, 5xx and 529, which the API can
// give before it looks at the key), ending the key's suspicion and the
// pool's — but only if the attempt was sent after the suspicion began: an
// older one may have been let in before the key was revoked. It reports
// whether a suspicion ended, so the caller can log the recovery.
func (k Key) Answered(sentAt time.Time, pool api.Pool) (recovered bool) {
	if k.k == nil {
		return false
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	h := &k.k.health
	if h.suspect == nil && len(h.pools) == 0 {
		return false // the common case: nothing to clear
	}
	if s := h.suspect; s != nil && !sentAt.Before(s.since) {
		h.suspect, recovered = nil, true
	}
	if s, ok := h.pools[pool]; ok && !sentAt.Before(s.since) {
		delete(h.pools, pool)
		recovered = true
	}
	return recovered
}

// Usable reports whether the key may take a new attempt for pool at now.
// When it may not but will (it is suspect), next is when its re-probe is
// due; a key dead for the pool returns false and a zero next. Launched
// must follow when the attempt is sent, so only one re-probe goes per gap.
func (k Key) Usable(now time.Time, pool api.Pool) (ok bool, next time.Time) {
	if k.k == nil {
		return false, time.Time{}
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.dead || k.k.retired {
		return false, time.Time{}
	}
	h := &k.k.health
	if _, dead := h.deadPools[pool]; dead && pool != AllPools {
		return false, time.Time{}
	}
	for _, s := range [2]*suspicion{h.suspect, h.pools[pool]} {
		if s != nil && now.Before(s.probeAt) && (next.IsZero() || s.probeAt.After(next)) {
			next = s.probeAt
		}
	}
	return next.IsZero(), next
}

// Launched records that an attempt for pool was sent at now: a suspect key
// sends no other until its next gap has passed.
func (k Key) Launched(now time.Time, pool api.Pool) {
	k.mustBeReal("Launched")
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	h := &k.k.health
	for _, s := range [2]*suspicion{h.suspect, h.pools[pool]} {
		if s != nil && !now.Before(s.probeAt) {
			s.probeAt = now.Add(s.gap)
		}
	}
}

// DeadFor reports whether the key can no longer serve pool: dead as a
// whole, or refused for that pool until the rule killed it there.
func (k Key) DeadFor(pool api.Pool) (dead bool, reason string) {
	if k.k == nil {
		return false, ""
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.dead {
		return true, k.k.reason
	}
	reason, dead = k.k.health.deadPools[pool]
	return dead && pool != AllPools, reason
}

// Suspect reports whether the key (as a whole, or for pool) is suspect.
func (k Key) Suspect(pool api.Pool) bool {
	if k.k == nil {
		return false
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.health.suspect != nil || k.k.health.pools[pool] != nil
}

// MarkDeadFor marks the key unable to serve pool for the rest of the run (a
// key refused a model at start, on a failed re-probe), with a reason for
// the report. It returns true only for the call that changed the state.
func (k Key) MarkDeadFor(pool api.Pool, reason string) (first bool) {
	k.mustBeReal("MarkDeadFor")
	if pool == AllPools {
		return k.MarkDead(reason)
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	h := &k.k.health
	if _, dead := h.deadPools[pool]; dead || k.k.dead {
		return false
	}
	if h.deadPools == nil {
		h.deadPools = map[api.Pool]string{}
	}
	h.deadPools[pool] = strings.ReplaceAll(reason, k.k.secret(), k.k.redacted)
	delete(h.pools, pool)
	return true
}
