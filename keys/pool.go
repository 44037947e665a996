package keys

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Pool is the set of keys a run drives, in load order. Its set of keys is
// fixed by Load (the keys' org and dead state change, the set does not), so
// a Pool is safe for concurrent use; a rotation makes a new Pool
// ([Pool.Diff], [Pool.Rotated]). The methods accept a nil *Pool, which
// holds no keys.
type Pool struct {
	keys     []*Key
	byLabel  map[string]*Key
	warnings []string
	// redact replaces key values; a closure, so that no field reachable by
	// reflection holds a value (see key).
	redact func(string) string
}

// newPool merges candidates in order into a Pool: a value already seen
// with the same workspace is dropped with a warning (the first label
// wins); one value with two workspaces is two keys (a personal or
// service-account key spans workspaces, and each line picks one). A label
// already taken gets the first free suffix -2, -3, … with a warning.
func newPool(cands []candidate, warnings []string) *Pool {
	p := &Pool{byLabel: make(map[string]*Key, len(cands))}
	byValue := make(map[string]*Key, len(cands))
	for _, c := range cands {
		if k, ok := byValue[identity(c.value, c.workspace)]; ok {
			same := "the same value"
			if c.workspace != "" {
				same += " and workspace"
			}
			warnings = append(warnings, fmt.Sprintf("key %s (%s) has %s as %s (%s): using it once, as %s",
				c.label, c.source, same, k.Label(), k.Source(), k.Label()))
			continue
		}
		label := c.label
		if _, taken := p.byLabel[label]; taken {
			for n := 2; ; n++ {
				label = fmt.Sprintf("%s-%d", c.label, n)
				if _, taken := p.byLabel[label]; !taken {
					break
				}
			}
			warnings = append(warnings, fmt.Sprintf("label %s (%s) is already taken: using %s", c.label, c.source, label))
		}
		k := newKey(label, c.source, c.value)
		k.k.workspace = c.workspace
		p.keys = append(p.keys, k)
		p.byLabel[label] = k
		byValue[identity(c.value, c.workspace)] = k
	}
	p.warnings = warnings

	p.redact = redactorOf(p.keys)
	return p
}

// identity is what makes two keys one: the value and the workspace it
// sends.
func identity(value, workspace string) string { return value + "\x00" + workspace }

// redactorOf replaces every value of ks (plain and query-escaped) with its
// redacted form; nil for no keys.
func redactorOf(ks []*Key) func(string) string {
	if len(ks) == 0 {
		return nil
	}
	// Longest value first, so a value that contains another is replaced whole.
	sorted := append([]*Key(nil), ks...)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i].k.secret()) > len(sorted[j].k.secret()) })
	var pairs []string
	for _, k := range sorted {
		secret := k.k.secret()
		pairs = append(pairs, secret, k.k.redacted)
		if esc := url.QueryEscape(secret); esc != secret {
			pairs = append(pairs, esc, k.k.redacted)
		}
	}
	r := strings.NewReplacer(pairs...)
	return r.Replace
}

// Keys returns every key in load order: ANTHROPIC_API_KEY,
// ANTHROPIC_BATCH_KEY, ANTHROPIC_API_KEY_LOW_PRIO, ANTHROPIC_API_KEYS, then
// the keys file. The slice is a copy; the keys are shared.
func (p *Pool) Keys() []*Key {
	if p == nil {
		return nil
	}
	return append([]*Key(nil), p.keys...)
}

// Live returns the keys neither dead nor retired, in load order.
func (p *Pool) Live() []*Key {
	if p == nil {
		return nil
	}
	var live []*Key
	for _, k := range p.keys {
		if dead, _ := k.Dead(); !dead && !k.Retired() {
			live = append(live, k)
		}
	}
	return live
}

// ByLabel returns the key labelled label.
func (p *Pool) ByLabel(label string) (*Key, bool) {
	if p == nil {
		return nil, false
	}
	k, ok := p.byLabel[label]
	return k, ok
}

// Warnings returns what Load found worth telling the user, in the order it
// found them: duplicate values, renamed labels, a variable set both in the
// environment and in .env, skipped blank entries, files readable by group
// or others. Warnings never contain a key value. The slice is a copy.
func (p *Pool) Warnings() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.warnings...)
}

// Redact returns s with every occurrence of a pool key's value (as is, or
// URL query-escaped) replaced by the key's redacted form. Use it on any text
// from a lower layer before it is shown, logged or stored: URL errors, proxy
// errors, echoed requests.
func (p *Pool) Redact(s string) string {
	if p == nil || p.redact == nil {
		return s
	}
	return p.redact(s)
}

// GroupByOrg returns the keys whose organization is known (see
// [Key.SetOrg]), by organization id, each list in load order. Dead keys are
// included.
func (p *Pool) GroupByOrg() map[string][]*Key {
	groups := make(map[string][]*Key)
	if p == nil {
		return groups
	}
	for _, k := range p.keys {
		if org := k.Org(); org != "" {
			groups[org] = append(groups[org], k)
		}
	}
	return groups
}

// SameOrgWarnings returns one warning per organization that more than one
// key belongs to, sorted by organization id: such keys share one rate-limit
// budget, so driving them together gains nothing over driving one.
func (p *Pool) SameOrgWarnings() []string {
	groups := p.GroupByOrg()
	orgs := make([]string, 0, len(groups))
	for org, ks := range groups {
		if len(ks) > 1 {
			orgs = append(orgs, org)
		}
	}
	sort.Strings(orgs)
	var out []string
	for _, org := range orgs {
		ks := groups[org]
		labels := make([]string, len(ks))
		for i, k := range ks {
			labels[i] = k.Label()
		}
		out = append(out, fmt.Sprintf("keys %s belong to the same organization (%s): they share one rate-limit budget, no additive gain",
			joinAnd(labels), org))
	}
	return out
}

// String lists the pool's keys in redacted form:
// "keys.Pool[high_prio(…a1b2) batch(…c3d4)]".
func (p *Pool) String() string {
	var b strings.Builder
	b.WriteString("keys.Pool[")
	for i, k := range p.Keys() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k.String())
	}
	b.WriteByte(']')
	return b.String()
}

// joinAnd returns "a", "a and b", "a, b and c".
func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
