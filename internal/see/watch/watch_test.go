package watch

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/event"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/see/history"
)

// fakeRun is a job's live sources with lanes whose counters the test moves.
type fakeRun struct {
	lanes    []dispatch.LaneView
	durable  int64
	usd      float64
	unpriced int64 // requests of models without a price
}

func newFakeRun(n int) *fakeRun {
	f := &fakeRun{}
	for i := range n {
		v := dispatch.LaneView{}
		v.Org, v.Pool = string(rune('a'+i)), api.Pool("sonnet-4")
		v.State = lane.State{Limit: 20, Cap: 100, InFlight: 10}
		v.State.Buckets[budget.Requests] = budget.BucketState{Known: true, Limit: 600, Depth: 600, Level: 300}
		v.State.Buckets[budget.InputTokens] = budget.BucketState{Known: true, Limit: 60000, Depth: 60000, Level: 1000}
		f.lanes = append(f.lanes, v)
	}
	return f
}

// step moves every lane by a second of work: 5 answers, 500 input
// tokens, a second waited on input tokens, 100 tokens others spent.
func (f *fakeRun) step() {
	for i := range f.lanes {
		v := &f.lanes[i]
		v.Attempts += 6
		v.OK += 5
		v.RateLimited++
		v.InputTokens += 500
		v.OutputTokens += 50
		v.State.Stats.Waited[lane.WaitInputTokens] += time.Second
		b := &v.State.Buckets[budget.InputTokens]
		b.Lowered += 100
	}
	f.durable += int64(5 * len(f.lanes))
	f.usd += 0.01
}

func (f *fakeRun) live(total int) job.Live {
	return job.Live{
		Snapshot: func() (dispatch.Stats, []dispatch.LaneView) {
			return dispatch.Stats{}, append([]dispatch.LaneView(nil), f.lanes...)
		},
		Batch: func() (batch.Stats, bool) { return batch.Stats{}, false },
		Cost: func() cost.Snapshot {
			return cost.Snapshot{Total: cost.Totals{USD: f.usd, SyncUSD: f.usd, UnknownModelRequests: f.unpriced}}
		},
		Durable: func() int64 { return f.durable },
		Total:   total, Todo: total, MaxCost: 5,
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// The status is derived from the samples: rates over the last minute, the
// binding limit, the others' share, the ETA, the route.
func TestStatusFromSamples(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	path := filepath.Join(t.TempDir(), "out.jsonl.history")
	w := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	w.Record(event.Event{Kind: event.Route, Route: "sync", Predicted: 100 * time.Second, Why: "because"})
	f := newFakeRun(2)
	w.Start(f.live(1000))
	defer w.Finish(nil, nil, "done")
	for range 90 {
		c.t = c.t.Add(time.Second)
		f.step()
		w.Sample()
	}
	s := w.Status()
	if s.Phase != PhaseRunning || s.Done != 900 || s.Total != 1000 || len(s.Lanes) != 2 {
		t.Fatalf("status %+v", s)
	}
	if s.RatePerMin != 600 { // 10 a second
		t.Errorf("rate %v/min, want 600", s.RatePerMin)
	}
	if s.ETASec != 10 {
		t.Errorf("ETA %v s, want 10", s.ETASec)
	}
	l := s.Lanes[0]
	if l.Binding != "input_tokens" || l.OKPerMin != 300 || l.RateLimited != 90 {
		t.Errorf("lane %+v: want bound by input_tokens, 300 ok/min, 90 429s", l)
	}
	var in BucketStatus
	for _, b := range l.Buckets {
		if b.Dim == "input_tokens" {
			in = b
		}
	}
	// 500 tokens a second of 1,000 a second; others 100 a second.
	if in.UsedShare != 0.5 || in.OthersShare != 0.1 || in.DepthSec != 60 {
		t.Errorf("input bucket %+v: want used 0.5, others 0.1, depth 60 s", in)
	}
	if s.Plan == nil || s.Plan.Route != "sync" || s.Plan.Predicted != 100 {
		t.Errorf("plan %+v", s.Plan)
	}
	if s.Cost.MaxCost != 5 || s.Cost.Projected < 0.99 || s.Cost.Projected > 1.01 {
		t.Errorf("cost %+v: want $0.90 so far, about $1 projected", s.Cost)
	}
	// /metrics: the lanes under the proxy's names, the job's own figures.
	mfs, err := w.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{"sluice_lane_ok_total": 900, "sluice_lane_rate_limited_total": 180, "sluice_job_done": 900,
		"sluice_job_total": 1000, "sluice_lane_in_flight": 20} {
		if got[name] != want {
			t.Errorf("/metrics %s = %v, want %v", name, got[name], want)
		}
	}
	// The events that came before Start are in the history.
	b, _ := w.Timeline(0)
	if !strings.Contains(string(b), `"kind":"route"`) {
		t.Error("the route event is not in the timeline")
	}
}

// Finish appends the report; a later process continues the timeline.
func TestFinishAndResume(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	path := filepath.Join(t.TempDir(), "out.jsonl.history")
	f := newFakeRun(1)
	w := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	w.Start(f.live(100))
	for range 3 {
		c.t = c.t.Add(time.Second)
		f.step()
		w.Sample()
	}
	rep := &job.Report{Input: "in.jsonl", Succeeded: 15}
	if err := w.Finish(rep, nil, "interrupted"); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(time.Hour)
	f2 := newFakeRun(1)
	w2 := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	w2.Start(f2.live(100))
	c.t = c.t.Add(time.Second)
	f2.step()
	w2.Sample()
	w2.Answered(dispatch.Result{Request: &call.Request{Model: "claude-sonnet-4-5"}, Org: "a", Latency: time.Second}, "")
	if err := w2.Finish(rep, nil, "done"); err != nil {
		t.Fatal(err)
	}
	tl, err := history.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Segments) != 2 || tl.Report == nil || tl.Report.Status != "done" {
		t.Fatalf("%d segments, report %+v", len(tl.Segments), tl.Report)
	}
	var r job.Report
	if json.Unmarshal(tl.Report.Report, &r) != nil || r.Succeeded != 15 {
		t.Errorf("the report record holds %+v", r)
	}
	// 3 seconds then 1 more: 20 answers, continued across the restart.
	if got := tl.Lanes[0].C[history.ColOK][tl.Len()-1]; got != 20 {
		t.Errorf("ok %v at the end, want 20 (15 + 5)", got)
	}
}

// A run that stopped before it began leaves no history.
func TestNothingRecordedBeforeStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl.history")
	w := New(Config{Path: path, Cmd: "run"})
	if err := w.Finish(nil, nil, "failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := history.Read(path); err == nil {
		t.Error("a history was written for a run that never started")
	}
}

// A finished run run again finds nothing to do: its history, and so its
// report, stay as the run that did the work left them.
func TestFinishedRunRunAgainKeepsItsReport(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	path := filepath.Join(t.TempDir(), "out.jsonl.history")
	f := newFakeRun(1)
	w := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	w.Start(f.live(5))
	c.t = c.t.Add(time.Second)
	f.step()
	w.Sample()
	rep := &job.Report{Input: "in.jsonl", Succeeded: 5}
	rep.Requests.Total, rep.Requests.Written = 5, 5
	if err := w.Finish(rep, nil, "done"); err != nil || !w.Reported() {
		t.Fatalf("Finish: %v, reported %v", err, w.Reported())
	}
	c.t = c.t.Add(time.Hour)
	again := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	rep2 := &job.Report{Input: "in.jsonl"}
	rep2.Requests.Total, rep2.Requests.AlreadyDone = 5, 5
	if err := again.Finish(rep2, nil, "done"); err != nil {
		t.Fatal(err)
	}
	if again.Reported() {
		t.Error("a run with nothing to do says it recorded a report")
	}
	tl, err := history.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var r job.Report
	if len(tl.Segments) != 1 || tl.Report == nil || json.Unmarshal(tl.Report.Report, &r) != nil || r.Succeeded != 5 {
		t.Errorf("%d segments, report %+v: the first run's should stand", len(tl.Segments), r)
	}
}

// A run with requests of a model without a price has an unknown cost:
// the status says how many and projects nothing from the priced part, and
// the history carries the count across a restart.
func TestUnpricedCostIsUnknown(t *testing.T) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	path := filepath.Join(t.TempDir(), "out.jsonl.history")
	f := newFakeRun(1)
	w := New(Config{Path: path, Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	w.Start(f.live(100))
	for range 3 {
		c.t = c.t.Add(time.Second)
		f.step()
		w.Sample()
	}
	if s := w.Status(); s.Cost.Unpriced != 0 || s.Cost.Projected <= 0 {
		t.Fatalf("all priced: unpriced %d, projected %v; want 0 and a projection", s.Cost.Unpriced, s.Cost.Projected)
	}
	f.unpriced = 7
	c.t = c.t.Add(time.Second)
	f.step()
	w.Sample()
	if s := w.Status(); s.Cost.Unpriced != 7 || s.Cost.Projected != 0 || s.Cost.USD != f.usd {
		t.Errorf("status cost %+v: want 7 unpriced, no projection, the priced part %v", s.Cost, f.usd)
	}
	if err := w.Finish(nil, nil, "interrupted"); err != nil {
		t.Fatal(err)
	}
	tl, err := history.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tl.Unpriced[tl.Len()-1]; got != 7 {
		t.Errorf("the history's last point holds %v unpriced, want 7", got)
	}
}

func benchWatch(b *testing.B, lanes int) (*Watch, *fakeRun, *clock) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	w := New(Config{Path: filepath.Join(b.TempDir(), "h"), Cmd: "run", Now: c.now, History: history.Options{NoSync: true}})
	f := newFakeRun(lanes)
	w.Start(f.live(1_000_000))
	b.Cleanup(func() { w.Finish(nil, nil, "done") })
	// An hour of history first, as a run's page would hold.
	for range 3600 {
		c.t = c.t.Add(time.Second)
		f.step()
		w.Sample()
	}
	return w, f, c
}

// BenchmarkSample is one tick of the sampler on six lanes with an hour of
// history: what recording costs a second.
func BenchmarkSample(b *testing.B) {
	w, f, c := benchWatch(b, 6)
	for b.Loop() {
		c.t = c.t.Add(time.Second)
		f.step()
		w.Sample()
	}
}

// BenchmarkServe is what one poll of the live page costs the process:
// /api/status and the history since its last point (every 2 s).
func BenchmarkServe(b *testing.B) {
	w, _, c := benchWatch(b, 6)
	since := history.Millis(c.t) - 2000
	for b.Loop() {
		s := w.Status()
		if _, err := json.Marshal(s); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Timeline(since); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnswered is what each answer costs: the two histograms.
func BenchmarkAnswered(b *testing.B) {
	w := New(Config{Cmd: "run"})
	res := dispatch.Result{Request: &call.Request{Model: "claude-sonnet-4-5"}, Org: "alpha", Latency: time.Second, Queued: time.Millisecond}
	for b.Loop() {
		w.Answered(res, "")
	}
}
