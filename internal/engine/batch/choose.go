package batch

import "time"

// Org choice: which organization a chunk goes to. A pure function of the
// organizations, the chunk's size and the time; the loop (queue.go) calls
// it and acts on the answer.

// canCreate reports whether o can have a chunk of n requests created at
// now: its batch path alive, a key it may create with, no create
// unresolved (one at a time: see orgState.turn), room for all n in its
// window and no pause. When only its pause stops it, until is when the
// pause ends.
func (o *orgState) canCreate(n int, now time.Time) (ok bool, until time.Time) {
	if o.dead || o.creating > 0 || o.window-o.inflight < n || o.key() == nil || !o.creatable() {
		return false, time.Time{}
	}
	if now.Before(o.paused) {
		return false, o.paused
	}
	return true, time.Time{}
}

// chooseOrg returns the org a chunk of n requests goes to at now: of the
// orgs that can create it (canCreate) and that held does not hold back (a
// seed of one of its prefixes runs or is due there: seed.go), the one with
// the fewest requests in flight — the most free window — the first in
// label order on a tie; nil when none can. wake is the earliest time one
// of them may become free (a pause's end, a seed's wait), zero if none is
// known.
func chooseOrg(orgs []*orgState, n int, now time.Time, held func(*orgState) (bool, time.Time)) (best *orgState, wake time.Time) {
	soon := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, o := range orgs {
		ok, until := o.canCreate(n, now)
		soon(until)
		if !ok {
			continue
		}
		if h, until := held(o); h {
			soon(until)
			continue
		}
		if best == nil || o.inflight < best.inflight {
			best = o
		}
	}
	return best, wake
}
