package dispatch

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/client"
)

// TestOrgWidePacing: a 429 naming the organization's limit across all
// models with its figure gives every state of the organization (a
// workspace split off it included) one shared bucket at a cushion under
// the figure, empty now: a request waits for it on every pool, and
// refills at the named rate; another organization is not touched.
func TestOrgWidePacing(t *testing.T) {
	pool, d := keyedDispatcher(t, "a=sk-ant-api03-aaaaaaaaaaaaaaaa\nb=sk-ant-api03-bbbbbbbbbbbbbbbb workspace=wrkspc_b\nc=sk-ant-api03-cccccccccccccccc\n",
		map[string]string{"c": "org-2"})
	now := time.Now()
	d.ensureLanes(api.PoolSonnet4, now)
	d.ensureLanes(api.PoolHaiku45, now)
	o := d.orgs["org-1"]
	o.split = &wsSplit{}
	d.splitWorkspaces(o, "test", now)
	var ls *laneState
	for _, l := range d.byPool[api.PoolSonnet4] {
		if l.org == o {
			ls = l
		}
	}
	ka, _ := pool.ByLabel("a")
	a := &attempt{ls: ls, key: ka, sentAt: now, out: client.Outcome{Class: client.RateLimited, Status: 429, HasRetryAfter: true, RetryAfter: time.Second,
		Named: api.ParseNamedLimit("This request would exceed your organization's rate limit of 6,000 requests per minute across all models (org: org-1).")}}
	d.orgLimited(a, now)

	w := d.orgs["org-1/wrkspc_b"]
	if o.wide == nil || w == nil || w.wide != o.wide || d.orgs["org-2"].wide != nil {
		t.Fatalf("shared bucket: org %v, workspace %v, other org %v", o.wide, w.wide, d.orgs["org-2"].wide)
	}
	dem := budget.Demand{1, 100, 100, 200}
	if g, wait := o.takeWide(now, dem); g != nil || wait <= 0 {
		t.Fatalf("an empty bucket granted: %v, wait %v", g, wait)
	}
	// 6,000 × 0.98 a minute: 98 a second.
	later := now.Add(time.Second)
	granted := 0
	for {
		g, wait := w.takeWide(later, dem)
		if wait > 0 {
			break
		}
		w.settleWide(later, g, budget.Demand{1})
		granted++
	}
	if granted < 90 || granted > 100 {
		t.Errorf("%d requests a second after the 429, want about 98", granted)
	}
	if g, wait := d.orgs["org-2"].takeWide(now, dem); g != nil || wait != 0 {
		t.Errorf("the other organization is paced: %v %v", g, wait)
	}
}
