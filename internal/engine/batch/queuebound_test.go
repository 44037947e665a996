package batch

import (
	"testing"
	"testing/synctest"

	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/sim"
)

// TestQueueBoundObserved: a create refused for a full processing queue
// records the bound the 429 named, and the org's window shrinks to it for
// the rest of the run: the first refusal is the last, and every row is
// done: a refused create waits and is retried.
func TestQueueBoundObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) {
			for i := range c.Orgs {
				c.Orgs[i].BatchQueueCap = 20
			}
		}, "batch")
		reqs := requests(60)
		cfg := w.config()
		cfg.WindowPerOrg = 60
		col, r, err := w.run(t, cfg, reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		b, ok := r.Stats().QueueBound["batch"]
		if !ok || b.Requests != 20 || !b.Named || b.OrgID == "" || b.Accepted < 1 {
			t.Fatalf("queue bound %+v (%v)", b, ok)
		}
		bs := w.sim.Stats().Orgs["batch"].Batches
		if bs.QueueFull != 1 {
			t.Errorf("%d creates refused for a full queue: the window did not shrink to the bound after the first", bs.QueueFull)
		}
		if bs.Created != 6 {
			t.Errorf("%d batches created, want 6", bs.Created)
		}
	})
}

// TestQueueFullReadings: a 429 naming the queue is a full queue, with or
// without a figure; one naming a rate is not.
func TestQueueFullReadings(t *testing.T) {
	body := func(msg string) []byte {
		return []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"` + msg + `"}}`)
	}
	for _, tc := range []struct {
		msg   string
		full  bool
		named int64
	}{
		{"Creating this batch would exceed your organization's limit of 1,500 batch requests in the processing queue (1,200 queued).", true, 1500},
		{"The Message Batches processing queue is full.", true, 0},
		{"This request would exceed your organization's rate limit of 4,000 requests per minute.", false, 0},
	} {
		o := client.Outcome{Class: client.RateLimited, Status: 429, Body: body(tc.msg)}
		full, named := queueFull(&o)
		if full != tc.full || named != tc.named {
			t.Errorf("%q: full %v named %d", tc.msg, full, named)
		}
	}
}

// TestInferredQueueBoundRises: an inferred bound is the latest refusal's,
// never the smallest seen, and never below the most requests the queue
// took after an accepted create; a named figure is kept over a later
// inferred one.
func TestInferredQueueBoundRises(t *testing.T) {
	r := &Runner{}
	o := &orgState{id: "org-a", label: "a", window: 200_000}
	c := &chunk{ids: make([]string, 10)}
	refuse := func(inflight int, named int64) QueueBound {
		o.inflight = inflight
		r.queueRefused(o, c, named)
		return r.stats.QueueBound["a"]
	}
	accept := func(inflight int) QueueBound {
		o.inflight = inflight
		r.queueAccepted(o)
		return r.stats.QueueBound["a"]
	}
	if b := refuse(90_001, 0); b.Requests != 90_000 {
		t.Fatalf("first refusal: %+v", b)
	}
	if b := refuse(151, 0); b.Requests != 150 {
		t.Fatalf("a refusal at 151 in flight (colleagues filled the queue): %+v, want the newest, 150", b)
	}
	if b := accept(95_000); b.Requests != 95_000 || b.Accepted != 95_000 {
		t.Fatalf("after the queue took 95,000: %+v, want the bound raised to it", b)
	}
	if b := refuse(99_001, 0); b.Requests != 99_000 {
		t.Fatalf("a refusal at 99,001: %+v", b)
	}
	if b := refuse(500, 0); b.Requests != 95_000 {
		t.Fatalf("a refusal at 500 in flight: %+v, never below the 95,000 the queue took", b)
	}
	if b := refuse(500, 120_000); b.Requests != 120_000 || !b.Named {
		t.Fatalf("a named figure: %+v", b)
	}
	if b := refuse(400, 0); b.Requests != 120_000 || !b.Named {
		t.Fatalf("an inferred bound replaced the named one: %+v", b)
	}
}
