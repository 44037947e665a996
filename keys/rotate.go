package keys

// Rotation: a long run or a proxy re-reads its key sources (SIGHUP, or the
// keys file changed) and gets a new Pool. Diff says which keys are new and
// which are gone, by value, without either value leaving the package; a
// key that stays keeps its handle (its org, its health). A gone key is
// marked Removed and, once Replaced — its organization has another usable
// key — Retired: it takes no new attempt from then on, its attempts in
// flight finish, and it is not dead (nothing is wrong with it). Until then
// it keeps working: a mistyped replacement must not leave an organization
// without a key (the rule is Replaced's; dispatch.Rotator applies it).

// Diff compares next (a fresh Load) with p: added are next's keys whose
// value and workspace p does not hold, removed are p's keys whose value
// and workspace next does not hold. Keys in both are p's handles and are
// not returned.
func (p *Pool) Diff(next *Pool) (added, removed []*Key) {
	have := make(map[string]bool, len(p.Keys()))
	for _, k := range p.Keys() {
		have[identity(k.k.secret(), k.k.workspace)] = true
	}
	want := make(map[string]bool, len(next.Keys()))
	for _, k := range next.Keys() {
		id := identity(k.k.secret(), k.k.workspace)
		want[id] = true
		if !have[id] {
			added = append(added, k)
		}
	}
	for _, k := range p.Keys() {
		if !want[identity(k.k.secret(), k.k.workspace)] {
			removed = append(removed, k)
		}
	}
	return added, removed
}

// Rotated returns the pool that holds p's keys less removed, plus added
// (Diff's results), for the next Diff and for redaction. Redact on the
// result still redacts the removed keys' values too: text about their
// last attempts may still be logged.
func (p *Pool) Rotated(added, removed []*Key) *Pool {
	gone := map[*Key]bool{}
	for _, k := range removed {
		gone[k] = true
	}
	var cands []*Key
	for _, k := range p.Keys() {
		if !gone[k] {
			cands = append(cands, k)
		}
	}
	q := &Pool{byLabel: map[string]*Key{}}
	for _, k := range append(cands, added...) {
		q.keys = append(q.keys, k)
		if _, taken := q.byLabel[k.Label()]; !taken {
			q.byLabel[k.Label()] = k // a label reused by a new value: the old key's, until it leaves
		}
	}
	var old func(string) string
	if p != nil { // a nil Pool holds no keys (Pool's contract)
		old = p.redact
	}
	fresh := redactorOf(added)
	q.redact = func(s string) string {
		if fresh != nil {
			s = fresh(s)
		}
		if old != nil {
			s = old(s)
		}
		return s
	}
	return q
}

// Retire takes the key out of the run (removed from its sources): it takes
// no new attempt, and is neither dead nor suspect. It returns true only for
// the call that retired it, so the caller logs it once.
func (k Key) Retire() (first bool) {
	k.mustBeReal("Retire")
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.retired {
		return false
	}
	k.k.retired = true
	return true
}

// MarkRemoved records that the key is gone from its sources. It keeps
// working until it is Retired (see Replaced).
func (k Key) MarkRemoved() {
	k.mustBeReal("MarkRemoved")
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	k.k.removed = true
}

// Removed reports whether MarkRemoved was called.
func (k Key) Removed() bool {
	if k.k == nil {
		return false
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.removed
}

// Replaced reports whether a key removed from its sources may retire:
// it is dead (nothing to keep), or another key of its organization among
// others is usable — neither dead, retired nor itself removed. A key whose
// organization is not known yet is never replaced by another. This is the
// rotation's one rule: an organization never loses its last working key
// to a rotation, so a mistyped replacement leaves the old key working
// until a good one arrives.
func (k Key) Replaced(others []*Key) bool {
	if dead, _ := k.Dead(); dead {
		return true
	}
	org := k.Org()
	if org == "" {
		return false
	}
	for _, o := range others {
		if o.k == k.k || o.Org() != org || o.Retired() || o.Removed() {
			continue
		}
		if dead, _ := o.Dead(); !dead {
			return true
		}
	}
	return false
}

// Retired reports whether Retire was called.
func (k Key) Retired() bool {
	if k.k == nil {
		return false
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.retired
}

// Rotation is what re-reading the key sources changed: keys to add (not yet
// discovered) and keys to take out (to retire).
type Rotation struct {
	Added, Removed []*Key
}
