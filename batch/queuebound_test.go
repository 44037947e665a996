package batch

import (
	"testing"
	"testing/synctest"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/sim"
)

// TestQueueBoundObserved: a create refused for a full processing queue
// records the bound the 429 named, and the org's window shrinks to it for
// the rest of the run: the first refusal is the last, and every row is
// done. (TestQueueCap429 runs the same world and counts the batches.)
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
		if !ok || b.Requests != 20 || !b.Named || b.OrgID == "" {
			t.Fatalf("queue bound %+v (%v)", b, ok)
		}
		if full := w.sim.Stats().Orgs["batch"].Batches.QueueFull; full != 1 {
			t.Errorf("%d creates refused for a full queue: the window did not shrink to the bound after the first", full)
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
