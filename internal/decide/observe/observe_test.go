package observe

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func view(orgID, label string, rpm float64, ok, out int64, lat time.Duration) dispatch.LaneView {
	v := dispatch.LaneView{LaneStats: dispatch.LaneStats{Org: label, OrgID: orgID, Pool: api.PoolSonnet4,
		Attempts: ok + 3, OK: ok, RateLimited: 2, Overloaded: 1, OutputTokens: out}}
	v.State = lane.State{Latency: lat}
	v.State.Buckets[budget.Requests] = budget.BucketState{Known: true, Limit: rpm, Depth: rpm / 6} // 10 s deep
	v.State.Buckets[budget.OutputTokens] = budget.BucketState{Known: true, Limit: 80_000}
	return v
}

// TestRecordAndLoad: a run's lanes are recorded by organization id, read
// back the same, merged with a later probe (which keeps the learned depth
// of an unchanged limit), and aged out after MaxAge; a lane that never got
// an answer or whose org is unknown records nothing.
func TestRecordAndLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "observations.json")
	views := []dispatch.LaneView{
		view("org-a", "high_prio", 1200, 100, 15_000, 3*time.Second),
		{LaneStats: dispatch.LaneStats{Org: "idle", OrgID: "org-b", Pool: api.PoolSonnet4}},
		{LaneStats: dispatch.LaneStats{Org: "nameless", Pool: api.PoolSonnet4, Attempts: 5}},
	}
	if _, err := Record(path, t0, FromLanes(views, 256, t0)...); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Orgs) != 1 {
		t.Fatalf("orgs recorded: %v, want only org-a", keysOf(f.Orgs))
	}
	p := f.Pool("org-a", api.PoolSonnet4)
	if p == nil || p.Limits == nil || p.Limits.RPM != 1200 || p.Limits.OTPM != 80_000 || p.Limits.ITPM != 0 || math.Abs(p.Limits.DepthSeconds-10) > 1e-9 || p.Limits.Source != SourceHeaders {
		t.Fatalf("limits %+v, want RPM 1200, OTPM 80000, ITPM not shown, 10 s deep, from headers", p.Limits)
	}
	if p.Latency == nil || p.Latency.MeanSeconds != 3 || p.Latency.MeanOutput != 150 || p.Output["256"] == nil || p.Output["256"].Mean != 150 {
		t.Fatalf("latency %+v, output %+v", p.Latency, p.Output)
	}
	if p.Answers == nil || p.Answers.RateLimited != 2 || p.Answers.Overloaded != 1 {
		t.Fatalf("answers %+v", p.Answers)
	}
	probe := Sample{OrgID: "org-a", Pool: api.PoolSonnet4, Limits: &Limits{RPM: 1200, Source: SourceProbe, At: t0.Add(2 * time.Hour)}, At: t0.Add(2 * time.Hour)}
	if _, err := Record(path, t0.Add(2*time.Hour), probe); err != nil {
		t.Fatal(err)
	}
	f, _ = Load(path, t0.Add(2*time.Hour))
	if l := f.Pool("org-a", api.PoolSonnet4).Limits; l.Source != SourceProbe || math.Abs(l.DepthSeconds-10) > 1e-9 {
		t.Errorf("after a probe of the same RPM: %+v, want the probe's limits with the learned depth kept", l)
	}
	if f.Pool("org-a", api.PoolSonnet4).Latency == nil {
		t.Error("a probe dropped the observed latency")
	}
	f, _ = Load(path, t0.Add(MaxAge+time.Hour))
	if p := f.Pool("org-a", api.PoolSonnet4); p == nil || p.Limits == nil || p.Latency != nil {
		t.Errorf("past MaxAge of the run: %+v, want the run's latency aged out and the later probe kept", p)
	}
	f, _ = Load(path, t0.Add(MaxAge+3*time.Hour))
	if len(f.Orgs) != 0 {
		t.Errorf("past MaxAge of everything: %v left", keysOf(f.Orgs))
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "sk-ant") {
		t.Error("the observations file holds a key")
	}
}

// TestCorruptFileIsReplaced: an unparsable file is reported, not trusted,
// and the next Record replaces it.
func TestCorruptFileIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "observations.json")
	os.WriteFile(path, []byte("{not json"), 0o600)
	if f, err := Load(path, t0); err == nil || len(f.Orgs) != 0 {
		t.Fatalf("a corrupt file: %v, %d orgs; want an error and nothing", err, len(f.Orgs))
	}
	readErr, err := Record(path, t0, FromLanes([]dispatch.LaneView{view("org-a", "a", 600, 10, 1000, time.Second)}, 0, t0)...)
	if readErr == nil || err != nil {
		t.Fatalf("Record over a corrupt file: read %v, write %v", readErr, err)
	}
	if f, err := Load(path, t0); err != nil || f.Pool("org-a", api.PoolSonnet4) == nil {
		t.Fatalf("after Record: %v", err)
	}
}

// TestApply: the world gets each org's observed limits, the shallowest
// learned depth, the pool's latency fitted to the observed mean and the
// observed answer length at the job's max_tokens; an org never seen has
// no limits (the caps bound it) and is reported unknown; every figure is
// in the provenance.
func TestApply(t *testing.T) {
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	f.Add(FromLanes([]dispatch.LaneView{view("org-a", "high_prio", 1200, 100, 15_000, 3*time.Second)}, 256, t0)...)
	w := plan.NewWorld("x")
	prov, unknown := Apply(&w, f, []OrgRef{{"org-a", "high_prio"}, {"org-z", "new"}}, "claude-sonnet-4-5", 256, t0.Add(90*time.Minute))
	if len(w.Orgs) != 2 || w.Orgs[0].Limits[api.PoolSonnet4].RPM != 1200 || len(w.Orgs[1].Limits) != 0 {
		t.Fatalf("orgs %+v", w.Orgs)
	}
	if len(unknown) != 1 || unknown[0].ID != "org-z" {
		t.Errorf("unknown %v, want org-z", unknown)
	}
	if w.BucketWindow != 10*time.Second {
		t.Errorf("bucket window %v, want the learned 10 s", w.BucketWindow)
	}
	if w.Output.Mean(256) != 150 {
		t.Errorf("output mean %v at 256, want 150", w.Output.Mean(256))
	}
	lat := w.Latency[api.PoolSonnet4]
	if got := (lat.TTFT.Seconds() + 150/lat.TokensPerSec) * math.Exp(lat.Sigma*lat.Sigma/2); math.Abs(got-3) > 1e-6 {
		t.Errorf("fitted latency model's mean at 150 tokens %.4f s, want the observed 3 s", got)
	}
	text := prov.String()
	for _, want := range []string{"high_prio sonnet-4: limits RPM 1200", "(headers, 1h30m0s ago)", "new sonnet-4: limits unknown", "observed on high_prio, 100 clean answers", "max_tokens 256: mean 150"} {
		if !strings.Contains(text, want) {
			t.Errorf("provenance lacks %q:\n%s", want, text)
		}
	}
	// At another max_tokens the observed length does not apply.
	w2 := plan.NewWorld("y")
	Apply(&w2, f, []OrgRef{{"org-a", "high_prio"}}, "claude-sonnet-4-5", 1024, t0)
	if w2.Output != plan.NewWorld("z").Output {
		t.Errorf("output at max_tokens 1024 taken from 256's observation: %+v", w2.Output)
	}
}

// TestFitLatencyFast: a mean too short for the default token rate keeps a
// floor TTFT and speeds the tokens up, still matching the mean.
func TestFitLatencyFast(t *testing.T) {
	base := plan.Latency{TTFT: 500 * time.Millisecond, TokensPerSec: 64, Sigma: 0.25}
	l := fitLatency(base, 0.5, 150)
	got := (l.TTFT.Seconds() + 150/l.TokensPerSec) * math.Exp(l.Sigma*l.Sigma/2)
	if l.TTFT != minTTFT || math.Abs(got-0.5) > 1e-6 {
		t.Errorf("fitted %+v: mean %.4f, want TTFT %v and mean 0.5", l, got, minTTFT)
	}
}

func keysOf(m map[string]*Org) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestBatchTurnaroundIsApplied: a run's ended batches are recorded by
// organization and the next plan's queue model for that org is scaled so
// one batch of the observed size takes the observed time; a damaged entry
// is dropped on load.
func TestBatchTurnaroundIsApplied(t *testing.T) {
	path := filepath.Join(t.TempDir(), "observations.json")
	stats := batch.Stats{Turnaround: map[string]batch.Turnaround{
		"high_prio": {OrgID: "org-a", Batches: 4, Requests: 2000, Seconds: 4 * 300},
	}}
	if _, err := RecordRun(path, t0, nil, FromBatch(stats, t0)); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if b := f.Orgs["org-a"].Batch; b == nil || b.Batches != 4 || b.MeanRequests != 500 || b.MeanSeconds != 300 {
		t.Fatalf("recorded %+v", f.Orgs["org-a"])
	}
	w := plan.NewWorld("mine")
	prov, _ := Apply(&w, f, []OrgRef{{ID: "org-a", Label: "high_prio"}, {ID: "org-b", Label: "other"}}, "claude-sonnet-4-5", 256, t0.Add(time.Hour))
	m := w.Orgs[0].Batch
	if m == nil || w.Orgs[1].Batch != nil {
		t.Fatalf("batch models %+v / %+v: want the observed org's only", w.Orgs[0].Batch, w.Orgs[1].Batch)
	}
	if got := m.AdmissionBase.Seconds() + m.AdmissionPerRequest.Seconds()*500 + 500/m.ProcessingRate; math.Abs(got-300) > 0.01 {
		t.Errorf("the fitted model takes %.2f s for one 500-request batch, observed 300 s", got)
	}
	if !strings.Contains(prov.String(), "high_prio batch queue: observed mean turnaround 5m0s for 500-request batches over 4 batch(es)") {
		t.Errorf("provenance:\n%s", prov)
	}
	// A damaged entry is dropped, not applied.
	f.Orgs["org-a"].Batch.MeanSeconds = -1
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	if f, _ = Load(path, t0); f.Orgs["org-a"] != nil && f.Orgs["org-a"].Batch != nil {
		t.Errorf("a negative turnaround survived the load: %+v", f.Orgs["org-a"].Batch)
	}
}

// TestBucketsKnownNeedsADepthAndAFreshProbe: the world says its buckets
// are known (so the central prediction counts their burst) only when a
// lane learned the depth and a fresh probe read the level; a depth with no
// probe, a probe with no learned depth, or a stale probe leave it assumed.
func TestBucketsKnownNeedsADepthAndAFreshProbe(t *testing.T) {
	orgs := []OrgRef{{"org-a", "high_prio"}}
	probed := func(depth float64, at time.Time) *File {
		f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
		f.Add(FromLanes([]dispatch.LaneView{view("org-a", "high_prio", 1200, 100, 15_000, 3*time.Second)}, 256, t0)...)
		l := f.Pool("org-a", api.PoolSonnet4).Limits
		l.DepthSeconds, l.Source, l.RemainingSeconds, l.At = depth, SourceProbe, depth, at
		return f
	}
	for _, tt := range []struct {
		name string
		f    *File
		want bool
	}{
		{"learned depth, fresh probe", probed(10, t0), true},
		{"no learned depth, fresh probe", probed(0, t0), false},
		{"learned depth, stale probe", probed(10, t0.Add(-FreshProbe-time.Second)), false},
	} {
		w := plan.NewWorld("x")
		w.BucketsKnown = !tt.want // Apply must set it either way
		Apply(&w, tt.f, orgs, "claude-sonnet-4-5", 256, t0)
		if w.BucketsKnown != tt.want {
			t.Errorf("%s: BucketsKnown = %v, want %v", tt.name, w.BucketsKnown, tt.want)
		}
	}
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	f.Add(FromLanes([]dispatch.LaneView{view("org-a", "high_prio", 1200, 100, 15_000, 3*time.Second)}, 256, t0)...)
	w := plan.NewWorld("x")
	if Apply(&w, f, orgs, "claude-sonnet-4-5", 256, t0); w.BucketsKnown {
		t.Error("a run's headers with no probe: BucketsKnown, want assumed (the level is not read)")
	}
}

// TestBucketsKnownIsPerOrg: one org's learned depth and another org's
// fresh probe are not a known bucket — every org with limits needs both.
func TestBucketsKnownIsPerOrg(t *testing.T) {
	f := &File{Version: fileVersion, Orgs: map[string]*Org{}}
	f.Add(FromLanes([]dispatch.LaneView{
		view("org-a", "high_prio", 1200, 100, 15_000, 3*time.Second),
		view("org-b", "low_prio", 600, 100, 15_000, 3*time.Second),
	}, 256, t0)...)
	b := f.Pool("org-b", api.PoolSonnet4).Limits // probed just now, depth never learned
	b.Source, b.DepthSeconds, b.RemainingSeconds, b.At = SourceProbe, 0, 5, t0
	w := plan.NewWorld("x")
	Apply(&w, f, []OrgRef{{"org-a", "high_prio"}, {"org-b", "low_prio"}}, "claude-sonnet-4-5", 256, t0)
	if w.BucketsKnown {
		t.Error("BucketsKnown from org-a's depth and org-b's probe, want assumed")
	}
	a := f.Pool("org-a", api.PoolSonnet4).Limits
	a.Source, a.RemainingSeconds, a.At = SourceProbe, 10, t0
	if Apply(&w, f, []OrgRef{{"org-a", "high_prio"}, {"org-b", "low_prio"}}, "claude-sonnet-4-5", 256, t0); w.BucketsKnown {
		t.Error("both probed, org-b's depth never learned: BucketsKnown, want assumed")
	}
	b.DepthSeconds = 10
	if Apply(&w, f, []OrgRef{{"org-a", "high_prio"}, {"org-b", "low_prio"}}, "claude-sonnet-4-5", 256, t0); !w.BucketsKnown {
		t.Error("both orgs probed with learned depths: BucketsKnown false")
	}
}
