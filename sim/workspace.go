package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Workspaces (rate-limits page: "you may also set user-configurable limits
// for your organization's workspaces … Organization-wide limits always
// apply"; API overview: personal and service-account keys span workspaces
// and pick one with anthropic-workspace-id, a workspace-scoped key may
// omit it and, if it sends it, it must match). A call is charged to its
// workspace: the header's, else its key's, else the default one. A
// workspace with limits of its own for a pool gates the call as well as
// the pool's organization limits, and its headers — the most restrictive
// limit in effect — are the ones the answer carries.

// WorkspaceConfig is one workspace of an org and its own limits per pool
// (lower than the org's; pools not listed have none of their own).
type WorkspaceConfig struct {
	ID     string              `json:"id"`
	Limits map[api.Pool]Limits `json:"limits,omitempty"`
}

// defaultWorkspace is the id answered for the default workspace.
func (o *org) defaultWorkspace() string { return "wrkspc_sim_" + o.cfg.Name }

// workspaceOf resolves the workspace a call of key e asks for with
// header h (anthropic-workspace-id): a 403 when the key may not use it.
func (o *org) workspaceOf(e *keyEntry, h string) (string, *requestError) {
	own := e.workspace
	switch {
	case h == "" && own == "":
		return o.defaultWorkspace(), nil
	case h == "":
		return own, nil
	case own != "" && h != own:
		return "", &requestError{403, api.ErrPermission, fmt.Sprintf("anthropic-workspace-id: this API key belongs to workspace %s", own)}
	case h == o.defaultWorkspace():
		return h, nil
	}
	for _, w := range o.cfg.Workspaces {
		if w.ID == h {
			return h, nil
		}
	}
	return "", &requestError{403, api.ErrPermission, "anthropic-workspace-id: workspace " + h + " not found in this organization"}
}

// wsLimit is the workspace's own limit of pool p, nil when it has none.
func (o *org) wsLimit(ws string, p api.Pool) *orgLimit {
	return o.wsLimits[ws+"\x00"+string(p)]
}

// newWorkspaceLimits builds the org's workspace limits.
func (o *org) newWorkspaceLimits(cfg *Config, now time.Time) {
	for _, w := range o.cfg.Workspaces {
		for p, l := range w.Limits {
			if o.wsLimits == nil {
				o.wsLimits = map[string]*orgLimit{}
			}
			lim := l
			wl := newOrgLimit(&lim, cfg, now)
			wl.clock = serverClock{skew: cfg.ClockSkew.D(), rounding: cfg.ResetRounding}
			wl.fine = cfg.TimeScale != 1 && !cfg.CoarseHeaders
			o.wsLimits[w.ID+"\x00"+string(p)] = wl
		}
	}
}

// admitWorkspace charges a Messages call to its workspace's own limit of
// its pool, if there is one; a refusal is answered here (a 429 naming the
// workspace's limit, with its headers) and ok is false; release gives the
// charge back when a later gate refuses the call.
func (c *call) admitWorkspace(ln *lane, in, out int64) (ok bool, release func()) {
	wl := c.org.wsLimit(c.workspace, ln.pool)
	if wl == nil {
		return true, func() {}
	}
	ok, why, wait := wl.take(c.now, in, out)
	if !ok {
		ln.count(func(st *LaneStats) {
			st.RateLimited++
			st.LimitedBy["workspace_"+why]++
		})
		wl.setHeaders(c.rw.Header(), c.now)
		n, unit := wl.figure(why)
		c.rateLimited(wait, fmt.Sprintf("This request would exceed your workspace's rate limit of %s %s per minute (workspace: %s, model pool: %s). For details, refer to: https://docs.claude.com/en/api/rate-limits.", commas(n), unit, c.workspace, ln.pool))
		return false, nil
	}
	return true, func() { wl.give(c.now, in, out) }
}

// workspaceHeaders replaces an answer's rate-limit headers with its
// workspace's when the workspace has its own limit of the pool: the
// headers show the most restrictive limit in effect.
func (c *call) workspaceHeaders(p api.Pool, h http.Header, now time.Time) {
	if wl := c.org.wsLimit(c.workspace, p); wl != nil {
		wl.setHeaders(h, now)
	}
}

// setHeaders writes l's anthropic-ratelimit-* family.
func (l *orgLimit) setHeaders(h http.Header, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	put := func(name api.Limiter, limit, remaining int64, reset time.Time) {
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "limit"))] = []string{strconv.FormatInt(limit, 10)}
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "remaining"))] = []string{strconv.FormatInt(remaining, 10)}
		h[http.CanonicalHeaderKey(api.LimitHeaderName(name, "reset"))] = []string{l.clock.formatReset(reset, l.fine)}
	}
	if l.rpm > 0 {
		put(api.LimiterRequests, l.rpm, l.req.remaining(now), l.req.resetAt(now))
	}
	if l.itpm > 0 {
		put(api.LimiterInputTokens, l.itpm, api.RoundThousand(l.in.remaining(now)), l.in.resetAt(now))
	}
	if l.otpm > 0 {
		put(api.LimiterOutputTokens, l.otpm, api.RoundThousand(l.out.remaining(now)), l.out.resetAt(now))
	}
}
