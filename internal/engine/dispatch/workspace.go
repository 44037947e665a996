package dispatch

import (
	"slices"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// Workspaces (docs/models.md). A key may send its workspace
// (anthropic-workspace-id, keys.Key.Apply); every answer names the
// workspace the call was charged to (the same header), which is how a
// workspace-scoped key, which sends none, shows its workspace
// (keys.Key.ChargedWorkspace: the answers' workspace, else the line's).
// An organization's limits may also be set per workspace, lower than
// its own; unset, a workspace has the organization's. So the keys of one organization share its lanes —
// the organization's limits bind them together — until the answers show
// limits scoped to a workspace: a 429 whose message names a workspace's
// limit, or two workspaces of the organization reading different -limit
// headers for one pool (the headers show "the most restrictive limit in
// effect"). Then the organization's keys of each workspace get lanes of
// their own, organization × workspace × pool, each learning its own
// limits from its own answers.

// wsSplit is what an organization's own state keeps to decide the split.
type wsSplit struct {
	// seen is the last -limit headers each workspace read, by pool.
	seen map[api.Pool]map[string][3]int64
	done bool // split, or nothing to split
}

// budgetID names the state's lanes to their budgets: the organization's
// id, or for a workspace split off it "id/workspace" (a fleet shares a
// workspace's lanes apart from its organization's). Fixed at creation.
func (o *orgState) budgetID() string {
	if o.bid == "" {
		return o.id
	}
	return o.bid
}

// orgFor returns the state key k's requests go out on: its workspace's
// once its organization's lanes were split by workspace, else its
// organization's. Loop-owned.
func (d *Dispatcher) orgFor(k *keys.Key) (*orgState, bool) {
	o, ok := d.orgs[k.Org()]
	ws := k.ChargedWorkspace()
	if !ok || o.split == nil || !o.split.done || ws == "" || ws == o.ws {
		return o, ok
	}
	if w, ok := d.orgs[k.Org()+"/"+ws]; ok {
		return w, true
	}
	// A new workspace of a split organization: lanes of its own.
	w := &orgState{id: o.id, label: o.label + "/" + ws, bid: o.id + "/" + ws, split: &wsSplit{done: true}, wide: o.wide}
	d.mu.Lock()
	w.ws = ws
	d.mu.Unlock()
	d.orgs[o.id+"/"+w.ws] = w
	for pool := range d.byPool {
		d.addLane(w, pool, d.now())
	}
	return w, true
}

// noteWorkspace reads an answer for workspace-scoped limits and splits its
// organization's lanes by workspace at the first sign of them. Loop-owned.
func (d *Dispatcher) noteWorkspace(a *attempt, now time.Time) {
	o, out := a.ls.org, &a.out
	a.key.NoteWorkspace(out.WorkspaceID)
	if o.ws != "" || o.split != nil && o.split.done || out.Status == 0 {
		return
	}
	if o.split == nil {
		o.split = &wsSplit{seen: map[api.Pool]map[string][3]int64{}}
	}
	ws := a.key.ChargedWorkspace()
	why := ""
	if out.Class == client.RateLimited && out.Named.Workspace {
		why = "a 429 named a workspace's limit"
	}
	if sig := limitSig(out.Limits); sig != [3]int64{} {
		seen := o.split.seen[a.ls.pool]
		if seen == nil {
			seen = map[string][3]int64{}
			o.split.seen[a.ls.pool] = seen
		}
		seen[ws] = sig
		for other, s := range seen {
			if other != ws && s != sig && why == "" {
				why = "two workspaces read different limits for the pool"
			}
		}
	}
	if why != "" {
		d.splitWorkspaces(o, why, now)
	}
}

// limitSig is the -limit values of an answer's headers (0: absent).
func limitSig(h api.RateLimitHeaders) [3]int64 {
	var s [3]int64
	for i, l := range []api.LimitState{h.Requests, h.InputTokens, h.OutputTokens} {
		if l.Present {
			s[i] = l.Limit
		}
	}
	return s
}

// splitWorkspaces gives the keys of each workspace of organization o
// lanes of their own. o keeps the keys that name no workspace, or, when
// every key names one, those of the first workspace (its lanes go on as
// that workspace's); each other workspace gets a new state and lanes for
// every pool in use, which start as any new lane does. Attempts in flight
// finish on the lanes they left from. Loop-owned.
func (d *Dispatcher) splitWorkspaces(o *orgState, why string, now time.Time) {
	o.split.done = true
	groups := map[string][]*keys.Key{}
	for _, k := range o.keys {
		ws := k.ChargedWorkspace()
		groups[ws] = append(groups[ws], k)
	}
	if len(groups) < 2 {
		return // one workspace: the organization's lanes are already its
	}
	names := make([]string, 0, len(groups))
	for ws := range groups {
		names = append(names, ws)
	}
	sort.Strings(names) // "" first: the keys that name no workspace stay
	keep := names[0]
	d.mu.Lock()
	o.ws = keep
	d.mu.Unlock()
	o.keys = groups[keep]
	o.rr = 0
	o.live.Store(int32(len(o.keys)))
	var split []string
	for _, ws := range names[1:] {
		w := &orgState{id: o.id, label: o.label + "/" + ws, bid: o.id + "/" + ws, keys: groups[ws], split: &wsSplit{done: true}, wide: o.wide}
		w.live.Store(int32(len(w.keys)))
		d.mu.Lock()
		w.ws = ws
		d.mu.Unlock()
		d.orgs[o.id+"/"+ws] = w
		pools := make([]api.Pool, 0, len(d.byPool))
		for p := range d.byPool {
			pools = append(pools, p)
		}
		slices.Sort(pools)
		for _, p := range pools {
			d.addLane(w, p, now)
		}
		split = append(split, ws)
	}
	d.log.Info("workspace-scoped limits: the organization's keys of each workspace get lanes of their own",
		"org", o.label, "why", why, "workspaces", split, "kept", keep)
}
