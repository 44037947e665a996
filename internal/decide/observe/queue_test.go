package observe

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/batch"
)

// TestBatchQueueBound: a run's full queue is recorded per organization and
// the next plan keeps that organization's batches in flight within it; an
// organization never seen full is planned at the lowest documented tier's
// bound. The provenance names both.
func TestBatchQueueBound(t *testing.T) {
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	st := batch.Stats{QueueBound: map[string]batch.QueueBound{"high_prio": {OrgID: "org-a", Requests: 1500, Named: true}}}
	f.AddBatch(FromBatch(st, t0)...)
	if q := f.Orgs["org-a"].BatchQueue; q == nil || q.Requests != 1500 || !q.Named {
		t.Fatalf("recorded %+v", q)
	}
	// An inferred, larger bound does not replace a named one.
	f.AddBatch(FromBatch(batch.Stats{QueueBound: map[string]batch.QueueBound{"high_prio": {OrgID: "org-a", Requests: 9000}}}, t0.Add(time.Hour))...)
	if q := f.Orgs["org-a"].BatchQueue; q.Requests != 1500 {
		t.Fatalf("an inferred bound replaced the named one: %+v", q)
	}

	w := plan.NewWorld("x")
	prov, _ := Apply(&w, f, []OrgRef{{"org-a", "high_prio"}, {"org-z", "new"}}, "claude-sonnet-4-5", 256, t0.Add(2*time.Hour))
	if w.Orgs[0].BatchQueueCap != 1500 || w.Orgs[1].BatchQueueCap != plan.DocumentedBatchQueue {
		t.Fatalf("queue caps %d, %d", w.Orgs[0].BatchQueueCap, w.Orgs[1].BatchQueueCap)
	}
	for _, want := range []string{"high_prio batch queue bound: 1500 requests (the figure a create's 429 named", "new batch queue bound: 100000 requests (the lowest documented tier's; never observed full)"} {
		if !strings.Contains(prov.String(), want) {
			t.Errorf("provenance lacks %q:\n%s", want, prov)
		}
	}
	// The plan keeps each org's batches in flight within its bound.
	d, err := plan.Decide(w, plan.JudgeJob(50_000, "claude-sonnet-4-5"), plan.Options{Priority: plan.PreferCost})
	if err != nil {
		t.Fatal(err)
	}
	if d.Batch == nil {
		t.Fatalf("cost priority chose %s", d.Route)
	}
	for _, o := range d.Batch.Orgs {
		bound := 1500
		if o.Org == "new" {
			bound = plan.DocumentedBatchQueue
		}
		if o.Window*d.Batch.Chunk > bound {
			t.Errorf("%s: %d batches of %d in flight, over its queue bound %d", o.Org, o.Window, d.Batch.Chunk, bound)
		}
	}
}

// TestInferredQueueBoundAcrossRuns: inferred bounds from runs seeing
// 90,000, 150, 95,000 and 99,000 leave the newest (99,000), not the
// smallest forever; a run whose queue took more raises it; the planner
// stops trusting an inferred bound InferredQueueTTL after it was seen,
// and then plans at the documented figure or the most the queue took.
func TestInferredQueueBoundAcrossRuns(t *testing.T) {
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	at := t0
	run := func(q batch.QueueBound) *BatchQueue {
		q.OrgID = "org-a"
		at = at.Add(time.Hour)
		f.AddBatch(FromBatch(batch.Stats{QueueBound: map[string]batch.QueueBound{"a": q}}, at)...)
		return f.Orgs["org-a"].BatchQueue
	}
	for _, n := range []int64{90_000, 150, 95_000, 99_000} {
		run(batch.QueueBound{Requests: n, Accepted: min(n, 150)})
	}
	if q := f.Orgs["org-a"].BatchQueue; q.Requests != 99_000 || q.Accepted != 150 {
		t.Fatalf("after 90k, 150, 95k, 99k: %+v, want the newest, 99,000", q)
	}
	if q := run(batch.QueueBound{Accepted: 120_000}); q.Requests != 120_000 || q.Accepted != 120_000 {
		t.Fatalf("a run whose queue took 120,000 without a refusal: %+v, want the bound raised", q)
	}
	if q := run(batch.QueueBound{Requests: 500}); q.Requests != 120_000 {
		t.Fatalf("a refusal at 500 after the queue took 120,000: %+v, never below what it took", q)
	}
	w := plan.NewWorld("x")
	prov, _ := Apply(&w, f, []OrgRef{{"org-a", "a"}}, "claude-sonnet-4-5", 256, at.Add(time.Hour))
	if w.Orgs[0].BatchQueueCap != 120_000 || !strings.Contains(prov.String(), "inferred from the requests in flight") {
		t.Fatalf("fresh: cap %d\n%s", w.Orgs[0].BatchQueueCap, prov)
	}
	run(batch.QueueBound{Requests: 300})
	f.Orgs["org-a"].BatchQueue.Accepted = 0 // an old file's record: no accepted count
	f.Orgs["org-a"].BatchQueue.Requests = 300
	prov, _ = Apply(&w, f, []OrgRef{{"org-a", "a"}}, "claude-sonnet-4-5", 256, at.Add(InferredQueueTTL+time.Minute))
	if w.Orgs[0].BatchQueueCap != plan.DocumentedBatchQueue || !strings.Contains(prov.String(), "is older than") {
		t.Fatalf("expired: cap %d\n%s", w.Orgs[0].BatchQueueCap, prov)
	}
	// A named figure counts the queue's unprocessed requests: a larger
	// window accepted later (processed rows of unended batches included)
	// leaves it.
	if q := run(batch.QueueBound{Requests: 1000, Named: true, Accepted: 1400}); q.Requests != 1000 || !q.Named {
		t.Fatalf("named: %+v", q)
	}
	if q := run(batch.QueueBound{Accepted: 5000}); q.Requests != 1000 || !q.Named || q.Accepted != 5000 {
		t.Fatalf("a named bound after a larger accepted window: %+v", q)
	}
}
