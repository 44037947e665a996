package plan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
)

// queueOnly is w seeing every batch end as it happens: the queue model
// alone, without the batch path's poll lag (TestPollLagPerBatch).
func queueOnly(w plan.World) plan.World {
	w.Poll = plan.SeenAtOnce
	return w
}

// TestBatchObservations: the batch model reproduces what the system before
// sluice saw (source-system.md §7.3, §8 items 1-2) on the three-org preset.
func TestBatchObservations(t *testing.T) {
	w := queueOnly(preset(t, "three-org"))

	// One 500-request batch ends in about 5 minutes:
	// 60 s + 0.3 s · 500 admission, then 500 ÷ 5/s processing.
	one, err := w.SimulateBatch(500, 500, 1, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if one.End != 310*time.Second || one.Binding != plan.BindAdmission {
		t.Errorf("one 500-request batch ends at %v (%s), want 5m10s (%s)", one.End, one.Binding, plan.BindAdmission)
	}

	// One 8,000-request batch starves: it does not even start for 8 hours.
	big, err := w.SimulateBatch(8000, 8000, 1, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if want := (60 + 2400 + 8*3600 + 1600) * time.Second; big.End != want || big.End <= 8*time.Hour || big.Binding != plan.BindStarvation {
		t.Errorf("one 8,000-request batch ends at %v (%s), want %v (> 8 h, %s)", big.End, big.Binding, want, plan.BindStarvation)
	}

	// #658 sequentially: 141,600 items as 500-request batches one at a
	// time on one key take 283 × ~5 minutes (284 batches, the last of 100).
	seq, err := w.SimulateBatch(141_600, 500, 1, "batch")
	if err != nil {
		t.Fatal(err)
	}
	per := seq.End / 283
	if seq.Orgs[0].Batches != 284 || per < 290*time.Second || per > 320*time.Second {
		t.Errorf("141,600 sequential: %d batches in %v (%v per batch), want 284 in about 283 × 5 min", seq.Orgs[0].Batches, seq.End, per)
	}
	if want := (283*310 + 60 + 30 + 20) * time.Second; seq.End != want {
		t.Errorf("141,600 sequential end = %v want %v", seq.End, want)
	}

	// The planner's own layout for the same job never starves and keeps
	// every org's queue busy: about N ÷ (3 × 5/s) plus one admission.
	d, err := plan.Decide(w, plan.JudgeJob(141_600, sonnet), plan.Options{Priority: plan.PreferCost})
	if err != nil {
		t.Fatal(err)
	}
	if d.Route != plan.RouteBatch || d.Batch.Chunk != 500 || d.Batch.Binding != plan.BindProcessing {
		t.Fatalf("141,600 at cost priority: %s, batch %+v", d.Route, d.Batch)
	}
	steady := time.Duration(141_600 / 15.0 * float64(time.Second))
	if d.Batch.End < steady || d.Batch.End > steady+5*time.Minute {
		t.Errorf("141,600 on three orgs ends at %v, want just over %v", d.Batch.End, steady)
	}
}

// TestBatchQueueOrder: the queue serves the earliest started batch first
// and idles only while nothing has started.
func TestBatchQueueOrder(t *testing.T) {
	w := queueOnly(preset(t, "three-org"))
	for _, tt := range []struct {
		n, chunk, window int
		want             time.Duration
	}{
		// Two batches at once: both start at 210 s, 100 s of work each.
		{1000, 500, 2, 410 * time.Second},
		// Sequential: the second is created when the first ends.
		{1000, 500, 1, 620 * time.Second},
		// 500 + 100 at once: the small one starts at 90 s and is done at
		// 110 s, before the big one starts at 210 s.
		{600, 500, 2, 310 * time.Second},
		// Expiry never matters here; a batch of 1 takes 60.3 s + 0.2 s.
		{1, 1, 1, 60500 * time.Millisecond},
	} {
		r, err := w.SimulateBatch(tt.n, tt.chunk, tt.window, "high_prio")
		if err != nil {
			t.Fatal(err)
		}
		if r.End != tt.want || r.Expired != 0 {
			t.Errorf("SimulateBatch(%d, %d, %d) ends at %v (%d expired), want %v", tt.n, tt.chunk, tt.window, r.End, r.Expired, tt.want)
		}
	}
	if _, err := w.SimulateBatch(10, 200_000, 1); err == nil {
		t.Error("a chunk above 100,000 requests was accepted")
	}
	if _, err := w.SimulateBatch(10, 5, 1, "nobody"); err == nil {
		t.Error("an unknown organization was accepted")
	}
}

func TestBatchExpiry(t *testing.T) {
	w := queueOnly(preset(t, "three-org"))
	w.Batch.StarveFor = 30 * time.Hour // starved past the 24 h expiry
	r, err := w.SimulateBatch(6000, 6000, 1, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if r.Expired != 1 || r.End != 24*time.Hour {
		t.Errorf("starved batch: %d expired, end %v; want 1 expired at 24h", r.Expired, r.End)
	}
	d, err := plan.Decide(w, plan.JudgeJob(6000, sonnet), plan.Options{Priority: plan.PreferCost, Chunk: 6000})
	if err != nil {
		t.Fatal(err)
	}
	if d.Route != plan.RouteSync || !strings.Contains(d.Why, "would expire") {
		t.Errorf("a batch route that expires was chosen: %s; why: %s", d.Route, d.Why)
	}
}

// TestChunkAndWindowRules: whatever the world and N, the planner's chunk
// is at most 100,000 requests and a tenth of the starvation size and the
// queue cap, and its window keeps the requests in flight per org under
// half of each.
func TestChunkAndWindowRules(t *testing.T) {
	worlds := map[string]plan.World{}
	worlds["three-org"] = preset(t, "three-org")
	worlds["tier1"] = preset(t, "tier1")
	free := preset(t, "scale")
	free.Batch.StarveAbove, free.Orgs[0].BatchQueueCap = 0, 0
	worlds["no starvation, no queue cap"] = free
	small := preset(t, "three-org")
	small.Batch.StarveAbove = 300
	small.Orgs[1].BatchQueueCap = 2000
	worlds["starves above 300, one queue of 2,000"] = small
	tiny := preset(t, "scale")
	tiny.Orgs[0].BatchQueueCap = 50
	worlds["queue cap 50"] = tiny
	slow := preset(t, "three-org")
	slow.Batch.AdmissionBase = 2 * time.Hour
	worlds["two-hour admission"] = slow

	for name, w := range worlds {
		for _, n := range []int{100, 101, 999, 5_001, 100_000, 2_000_000} {
			t.Run(fmt.Sprintf("%s/N=%d", name, n), func(t *testing.T) {
				d, err := plan.Decide(w, plan.JudgeJob(n, haiku), plan.Options{Priority: plan.PreferCost})
				if err != nil {
					t.Fatal(err)
				}
				b := d.Batch
				if b == nil {
					t.Fatalf("cost priority did not batch: %s", d.Route)
				}
				if b.Chunk < 1 || b.Chunk > plan.MaxBatchRequests || b.Chunk > plan.ChunkTarget {
					t.Errorf("chunk %d out of [1, %d]", b.Chunk, plan.ChunkTarget)
				}
				total := 0
				for _, o := range b.Orgs {
					total += o.Requests
					org := orgNamed(w, o.Org)
					bm := w.Batch
					if org.Batch != nil {
						bm = *org.Batch
					}
					if s := bm.StarveAbove; s > 0 && (b.Chunk > s/10 || o.Window*b.Chunk > s/2) {
						t.Errorf("%s: chunk %d × window %d against starvation size %d", o.Org, b.Chunk, o.Window, s)
					}
					if q := org.BatchQueueCap; q > 0 && (b.Chunk > q/10 || o.Window*b.Chunk > q/2) {
						t.Errorf("%s: chunk %d × window %d against queue cap %d", o.Org, b.Chunk, o.Window, q)
					}
					if o.Window < 1 || o.Window > o.Batches {
						t.Errorf("%s: window %d with %d batches", o.Org, o.Window, o.Batches)
					}
				}
				if total != n || d.BatchN != n {
					t.Errorf("batches hold %d requests, want %d", total, n)
				}
				if d.StuckAfter <= 0 || d.StuckAfter > 24*time.Hour {
					t.Errorf("stuck threshold %v", d.StuckAfter)
				}
			})
		}
	}
}

func orgNamed(w plan.World, name string) plan.Org {
	for _, o := range w.Orgs {
		if o.Name == name {
			return o
		}
	}
	return plan.Org{}
}

// TestWindowKeepsQueueBusy: on the preset, 5 batches of 500 in flight per
// org are enough that processing, not admission, bounds a large job.
func TestWindowKeepsQueueBusy(t *testing.T) {
	w := queueOnly(preset(t, "three-org"))
	d, err := plan.Decide(w, plan.JudgeJob(100_000, sonnet), plan.Options{Priority: plan.PreferCost})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Batch.WindowRequests(); got != 2500 {
		t.Errorf("WindowRequests = %d want 5 × 500", got)
	}
	for _, o := range d.Batch.Orgs {
		if o.Window != 5 {
			t.Errorf("%s window %d want 5 (1 + 5/s × 210 s ÷ 500, rounded up, + 1)", o.Org, o.Window)
		}
	}
	// Processing-bound: 100,000 ÷ 15/s after the first admission of 210 s.
	if want := 210 + 100_000/15.0; d.Batch.End.Seconds() < want || d.Batch.End.Seconds() > want+60 {
		t.Errorf("batch end %v, want about %.0f s", d.Batch.End, want)
	}
	// Stuck: 3 × the longest create-to-end of one batch.
	if d.StuckAfter < 15*time.Minute || d.StuckAfter > time.Hour {
		t.Errorf("stuck after %v, want 3 × a batch's ~10 min", d.StuckAfter)
	}
}

// TestOrgWithoutChunk: an organization that gets no batch must not break
// the model (it used to index its empty size list).
func TestOrgWithoutChunk(t *testing.T) {
	fast := plan.BatchModel{AdmissionBase: time.Minute, AdmissionPerRequest: 300 * time.Millisecond, ProcessingRate: 50, Expiry: 24 * time.Hour}
	w := plan.NewWorld("two", plan.Org{Name: "fast", Batch: &fast}, plan.Org{Name: "slow"})
	if _, err := plan.Decide(w, plan.JudgeJob(1000, "claude-sonnet-4-5"), plan.Options{Priority: plan.PreferCost}); err != nil {
		t.Fatal(err)
	}
}

func TestMinWindowRequests(t *testing.T) {
	r := plan.BatchRun{Chunk: 100, Orgs: []plan.BatchOrg{{Org: "a", Window: 5}, {Org: "b", Window: 2}, {Org: "c", Window: 0}}}
	if got := r.MinWindowRequests(); got != 200 {
		t.Fatalf("MinWindowRequests = %d want 200 (the smallest non-empty window)", got)
	}
	if got := (plan.BatchRun{Chunk: 100}).MinWindowRequests(); got != 0 {
		t.Fatalf("no orgs: %d want 0", got)
	}
}
