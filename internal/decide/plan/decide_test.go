package plan_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/sim"
)

func decide(t *testing.T, w plan.World, j plan.Job, o plan.Options) plan.Decision {
	t.Helper()
	d, err := plan.Decide(w, j, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCosts(t *testing.T) {
	w := preset(t, "three-org")
	d := decide(t, w, plan.JudgeJob(10_000, sonnet), plan.Options{Priority: plan.PreferLatency})
	sync := cost.Estimate(sonnet, 10_000*260, 10_000*144, false)
	if !near(d.SyncCost, sync, 1e-9) || !near(d.BatchCost, sync*api.BatchDiscount, 1e-9) || !near(sync, 29.4, 1e-9) {
		t.Errorf("costs sync %v batch %v, want %v and half", d.SyncCost, d.BatchCost, sync)
	}
	s := decide(t, w, plan.JudgeJob(1_000_000, sonnet), plan.Options{Priority: plan.PreferLatency})
	if s.Route != plan.RouteSplit {
		t.Fatalf("1M latency: %s, want split", s.Route)
	}
	want := cost.Estimate(sonnet, int64(s.SyncN)*260, int64(s.SyncN)*144, false) + cost.Estimate(sonnet, int64(s.BatchN)*260, int64(s.BatchN)*144, true)
	if !near(s.Cost, want, 1e-6) {
		t.Errorf("split cost %v want %v", s.Cost, want)
	}
}

func TestPriorities(t *testing.T) {
	w := preset(t, "three-org")
	for _, tt := range []struct {
		name  string
		n     int
		model string
		o     plan.Options
		want  plan.Route
	}{
		{"cost, tiny job stays on sync", 99, sonnet, plan.Options{Priority: plan.PreferCost}, plan.RouteSync},
		{"cost, 100 requests batch", 100, sonnet, plan.Options{Priority: plan.PreferCost}, plan.RouteBatch},
		{"cost, 1M batch", 1_000_000, opus, plan.Options{Priority: plan.PreferCost}, plan.RouteBatch},
		{"latency, 1,000 sync", 1000, sonnet, plan.Options{Priority: plan.PreferLatency}, plan.RouteSync},
		{"latency, 1M split", 1_000_000, sonnet, plan.Options{Priority: plan.PreferLatency}, plan.RouteSplit},
		{"balanced, 1,000 sync", 1000, sonnet, plan.Options{Priority: plan.PreferBalanced}, plan.RouteSync},
		{"balanced $50/h, 1M Sonnet batch", 1_000_000, sonnet, plan.Options{Priority: plan.PreferBalanced}, plan.RouteBatch},
		{"balanced $500/h, 1M Sonnet split", 1_000_000, sonnet, plan.Options{Priority: plan.PreferBalanced, ValueOfTime: 500}, plan.RouteSplit},
		{"balanced is the default", 1_000_000, sonnet, plan.Options{}, plan.RouteBatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(t, w, plan.JudgeJob(tt.n, tt.model), tt.o)
			if d.Route != tt.want {
				t.Errorf("route %s want %s; why: %s", d.Route, tt.want, d.Why)
			}
			if d.SyncN+d.BatchN != tt.n || (d.Route == plan.RouteSync) != (d.BatchN == 0) || (d.Route == plan.RouteBatch) != (d.SyncN == 0) {
				t.Errorf("shares sync %d + batch %d for route %s", d.SyncN, d.BatchN, d.Route)
			}
		})
	}
}

// TestPriorityObjectives: whatever it picks, each priority's choice is no
// worse on its own objective than the whole job on either route.
func TestPriorityObjectives(t *testing.T) {
	w := preset(t, "three-org")
	for _, model := range []string{sonnet, haiku, opus} {
		for _, n := range []int{10, 300, 3_000, 30_000, 300_000, 3_000_000} {
			lat := decide(t, w, plan.JudgeJob(n, model), plan.Options{Priority: plan.PreferLatency})
			if lat.Wall.Mid > lat.SyncWall.Mid || (lat.BatchWall.Mid > 0 && lat.Wall.Mid > lat.BatchWall.Mid) {
				t.Errorf("%s N=%d latency: %s in %v; sync %v, batch %v", model, n, lat.Route, lat.Wall.Mid, lat.SyncWall.Mid, lat.BatchWall.Mid)
			}
			if lat.Route == plan.RouteSplit && lat.Wall.Mid.Seconds() > 0.95*lat.SyncWall.Mid.Seconds() {
				t.Errorf("%s N=%d latency: a split that saves under 5 %%", model, n)
			}
			c := decide(t, w, plan.JudgeJob(n, model), plan.Options{Priority: plan.PreferCost})
			if c.Cost > c.SyncCost || (n >= plan.DefaultMinBatch && c.Cost != c.BatchCost) {
				t.Errorf("%s N=%d cost: %s for %v; sync %v, batch %v", model, n, c.Route, c.Cost, c.SyncCost, c.BatchCost)
			}
			b := decide(t, w, plan.JudgeJob(n, model), plan.Options{Priority: plan.PreferBalanced})
			f := func(cost float64, wall time.Duration) float64 { return cost + plan.DefaultValueOfTime*wall.Hours() }
			if f(b.Cost, b.Wall.Mid) > f(b.SyncCost, b.SyncWall.Mid) || (b.BatchWall.Mid > 0 && f(b.Cost, b.Wall.Mid) > f(b.BatchCost, b.BatchWall.Mid)) {
				t.Errorf("%s N=%d balanced: %s scores %v; sync %v, batch %v", model, n, b.Route,
					f(b.Cost, b.Wall.Mid), f(b.SyncCost, b.SyncWall.Mid), f(b.BatchCost, b.BatchWall.Mid))
			}
		}
	}
}

// TestSplitEndsTogether: a latency split balances its halves.
func TestSplitEndsTogether(t *testing.T) {
	w := preset(t, "three-org")
	d := decide(t, w, plan.JudgeJob(1_000_000, opus), plan.Options{Priority: plan.PreferLatency})
	if d.Route != plan.RouteSplit {
		t.Fatalf("route %s want split", d.Route)
	}
	batchEnd := d.Batch.End + w.BatchOverhead
	if diff := math.Abs((d.Wall.Mid - batchEnd).Seconds()); diff > 0.02*d.Wall.Mid.Seconds() {
		t.Errorf("batch half ends at %v, the job at %v", batchEnd, d.Wall.Mid)
	}
	if !strings.Contains(d.Binding, "sync: etiquette cap") || !strings.Contains(d.Binding, "batch: batch processing rate") {
		t.Errorf("binding %q", d.Binding)
	}
}

func TestDeadline(t *testing.T) {
	w := preset(t, "three-org")
	t.Run("shorter than the batch wall-clock forces sync", func(t *testing.T) {
		for _, p := range []plan.Priority{plan.PreferCost, plan.PreferBalanced, plan.PreferLatency} {
			d := decide(t, w, plan.JudgeJob(1000, sonnet), plan.Options{Priority: p, Deadline: 2 * time.Minute})
			if d.Route != plan.RouteSync || d.BatchWall.Mid <= 2*time.Minute || d.Wall.Mid > 2*time.Minute {
				t.Errorf("%s: %s in %v (batch %v); want sync within 2 min", p, d.Route, d.Wall.Mid, d.BatchWall.Mid)
			}
			if p == plan.PreferCost && !strings.Contains(d.Why, "rules the batch route out") {
				t.Errorf("why does not name the deadline: %s", d.Why)
			}
		}
	})
	t.Run("long enough keeps batch", func(t *testing.T) {
		d := decide(t, w, plan.JudgeJob(1000, sonnet), plan.Options{Priority: plan.PreferCost, Deadline: 6 * time.Hour})
		if d.Route != plan.RouteBatch {
			t.Errorf("route %s want batch", d.Route)
		}
	})
	t.Run("cost sends to batch only what meets it", func(t *testing.T) {
		d := decide(t, w, plan.JudgeJob(141_600, sonnet), plan.Options{Priority: plan.PreferCost, Deadline: time.Hour})
		if d.Route != plan.RouteSplit || d.Wall.Mid > time.Hour || d.Cost >= d.SyncCost {
			t.Errorf("%s in %v for %v (sync %v)", d.Route, d.Wall.Mid, d.Cost, d.SyncCost)
		}
		more := decide(t, w, plan.JudgeJob(141_600, sonnet), plan.Options{Priority: plan.PreferCost, Deadline: 2 * time.Hour})
		if more.BatchN <= d.BatchN {
			t.Errorf("a longer deadline sends %d to batch, the shorter %d", more.BatchN, d.BatchN)
		}
	})
	t.Run("impossible: the fastest, with a warning", func(t *testing.T) {
		d := decide(t, w, plan.JudgeJob(1_000_000, sonnet), plan.Options{Priority: plan.PreferCost, Deadline: time.Minute})
		if d.Wall.Mid > d.SyncWall.Mid || len(d.Warnings) == 0 || !strings.Contains(d.Warnings[0], "no route meets the deadline") {
			t.Errorf("%s in %v, warnings %q", d.Route, d.Wall.Mid, d.Warnings)
		}
	})
}

// TestCrossover: the crossover is where the choice changes, and it moves
// the right way when batch gets faster, sync gets faster or time gets
// dearer.
func TestCrossover(t *testing.T) {
	w := preset(t, "three-org")
	job := plan.JudgeJob(1, sonnet)
	usesBatch := func(w plan.World, n int, o plan.Options) bool {
		j := job
		j.N = n
		return decide(t, w, j, o).BatchN > 0
	}
	for _, p := range []plan.Priority{plan.PreferLatency, plan.PreferBalanced, plan.PreferCost} {
		o := plan.Options{Priority: p}
		c, err := plan.Crossover(w, job, o)
		if err != nil {
			t.Fatal(err)
		}
		if c == 0 || !usesBatch(w, c, o) || (c > plan.DefaultMinBatch && usesBatch(w, c*98/100, o)) {
			t.Errorf("%s: crossover %d is not where the choice changes", p, c)
		}
		if d := decide(t, w, plan.JudgeJob(5, sonnet), o); d.Crossover != c {
			t.Errorf("%s: Decision.Crossover %d, Crossover %d", p, d.Crossover, c)
		}
	}
	if c, _ := plan.Crossover(w, job, plan.Options{Priority: plan.PreferCost}); c != plan.DefaultMinBatch {
		t.Errorf("cost crossover %d want the batch minimum %d", c, plan.DefaultMinBatch)
	}

	// never (0) counts as infinitely large.
	order := func(c int) int {
		if c == 0 {
			return math.MaxInt
		}
		return c
	}
	cross := func(w plan.World, o plan.Options) int {
		t.Helper()
		c, err := plan.Crossover(w, job, o)
		if err != nil {
			t.Fatal(err)
		}
		return order(c)
	}
	t.Run("dearer time, later all-batch", func(t *testing.T) {
		// A dearer hour can make a split (faster and cheaper than sync)
		// worth it sooner, so it is the all-batch route that must come
		// later: the first N of a doubling grid that goes all to batch.
		firstBatch := func(v float64) int {
			for n := 100; n <= 10_000_000; n *= 2 {
				j := job
				j.N = n
				if decide(t, w, j, plan.Options{Priority: plan.PreferBalanced, ValueOfTime: v}).Route == plan.RouteBatch {
					return n
				}
			}
			return math.MaxInt
		}
		prev := 0
		for _, v := range []float64{5, 20, 50, 90, 200, 1000} {
			c := firstBatch(v)
			if c < prev {
				t.Errorf("value of time $%g/h: all-batch from %d, below %d at a cheaper hour", v, c, prev)
			}
			prev = c
		}
		if prev != math.MaxInt {
			t.Errorf("at $1000/h, far above the break-even value, a large job still went all to batch")
		}
	})
	t.Run("faster batch queue, earlier batch", func(t *testing.T) {
		for _, p := range []plan.Priority{plan.PreferLatency, plan.PreferBalanced} {
			prev := math.MaxInt
			for _, rate := range []float64{2, 5, 10, 20} {
				fw := w
				fw.Batch.ProcessingRate = rate
				c := cross(fw, plan.Options{Priority: p})
				if c > prev {
					t.Errorf("%s, %g req/s per org: crossover %d, above %d at a slower queue", p, rate, c, prev)
				}
				prev = c
			}
		}
	})
	t.Run("higher caps, later batch", func(t *testing.T) {
		for _, p := range []plan.Priority{plan.PreferLatency, plan.PreferBalanced} {
			prev := 0
			for _, c := range []int{25, 50, 100, 200} {
				cw := w
				cw.Caps = map[api.Family]int{api.FamilySonnet: c}
				x := cross(cw, plan.Options{Priority: p})
				if x < prev {
					t.Errorf("%s, cap %d: crossover %d, below %d at a lower cap", p, c, x, prev)
				}
				prev = x
			}
		}
	})
}

func TestDecideErrors(t *testing.T) {
	w := preset(t, "three-org")
	for _, tt := range []struct {
		name string
		j    plan.Job
		o    plan.Options
	}{
		{"no requests", plan.Job{Model: sonnet, MeanInput: 10, MaxTokens: 10}, plan.Options{}},
		{"no model", plan.Job{N: 1, MeanInput: 10, MaxTokens: 10}, plan.Options{}},
		{"no output shape", plan.Job{N: 1, Model: sonnet, MeanInput: 10}, plan.Options{}},
		{"output above max_tokens", plan.Job{N: 1, Model: sonnet, MeanOutput: 300, MaxTokens: 256}, plan.Options{}},
		{"bad priority", plan.JudgeJob(1, sonnet), plan.Options{Priority: "fast"}},
		{"chunk above the API's", plan.JudgeJob(1, sonnet), plan.Options{Chunk: 100_001}},
	} {
		if _, err := plan.Decide(w, tt.j, tt.o); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	bad := w
	bad.Orgs = nil
	if _, err := plan.Decide(bad, plan.JudgeJob(1, sonnet), plan.Options{}); err == nil {
		t.Error("a world without organizations was accepted")
	}
}

// TestUnknownModelIsUnpriced: a model the table has no price for is
// planned (its route chosen on the highest prices), and the plan says its
// cost is unknown — never a figure (issue 39: it used to print the highest
// prices' figure beside a warning).
func TestUnknownModelIsUnpriced(t *testing.T) {
	w := preset(t, "three-org")
	d := decide(t, w, plan.JudgeJob(10, "claude-sonnet-9"), plan.Options{})
	if d.Unpriced != "claude-sonnet-9" {
		t.Errorf("unpriced %q", d.Unpriced)
	}
	text := func(d plan.Decision) string {
		var b strings.Builder
		if err := d.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if s := text(d); !strings.Contains(s, "unknown: no price for claude-sonnet-9 (--models FILE") ||
		strings.Count(s, "$") != strings.Count(s, "per hour of wall-clock") { // the value of time is the only dollar figure

		t.Errorf("the plan shows a figure for an unpriced model:\n%s", s)
	}
	if k := decide(t, w, plan.JudgeJob(10, "claude-sonnet-4-5"), plan.Options{}); k.Unpriced != "" || !strings.Contains(text(k), "$") {
		t.Errorf("a priced model: %q\n%s", k.Unpriced, text(k))
	}
}

func TestReadWorld(t *testing.T) {
	const file = `{"name": "lab", "orgs": [
	  {"name": "a", "limits": {"sonnet-4": {"rpm": 600, "itpm": 1000000, "otpm": 100000}}, "batch_queue_cap": 100000},
	  {"name": "b", "default_limits": {"rpm": 6000, "itpm": 0, "otpm": 0}, "batch": {"processing_rate": 10}}],
	 "caps": {"sonnet": 50}, "reserve": 0.2, "ramp": {"doubling": "2s"},
	 "batch": {"admission_base": "30s", "starve_above": 0}, "batch_overhead": 10, "poll_min": "5s", "poll_max": "30s"}`
	w, err := plan.ReadWorld(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "lab" || len(w.Orgs) != 2 || w.Caps[api.FamilySonnet] != 50 || w.Caps[api.FamilyHaiku] != 120 ||
		w.Reserve != 0.2 || w.Ramp.Doubling != 2*time.Second || w.BatchOverhead != 10*time.Second ||
		w.Poll != (plan.Poll{Min: 5 * time.Second, Max: 30 * time.Second}) {
		t.Errorf("world %+v", w)
	}
	if w.Batch.AdmissionBase != 30*time.Second || w.Batch.AdmissionPerRequest != 300*time.Millisecond || w.Batch.StarveAbove != 0 {
		t.Errorf("batch model %+v: the file's fields over the defaults", w.Batch)
	}
	if b := w.Orgs[1].Batch; b == nil || b.ProcessingRate != 10 || b.AdmissionBase != 30*time.Second {
		t.Errorf("org b's batch %+v", b)
	}
	lanes, err := w.Lanes(plan.JudgeJob(1, sonnet))
	if err != nil {
		t.Fatal(err)
	}
	if lanes[0].Binding != plan.BindRPM || lanes[0].Rate != 10 || lanes[1].Binding != plan.BindCap {
		t.Errorf("lanes %+v", lanes)
	}
	if w.BucketsKnown {
		t.Error("a file without bucket_window and bucket_drained: BucketsKnown, want assumed")
	}
	for file, want := range map[string]bool{
		`{"orgs": [{"name": "a"}], "bucket_window": "10s"}`:                        false,
		`{"orgs": [{"name": "a"}], "bucket_drained": 0}`:                           false,
		`{"orgs": [{"name": "a"}], "bucket_window": "10s", "bucket_drained": 0.5}`: true,
	} {
		if w, err := plan.ReadWorld(strings.NewReader(file)); err != nil || w.BucketsKnown != want {
			t.Errorf("ReadWorld(%s): BucketsKnown %v (%v), want %v", file, w.BucketsKnown, err, want)
		}
	}
	for _, bad := range []string{
		`{"orgs": [{"name": "a"}], "colour": 1}`,
		`{"orgs": []}`,
		`{"orgs": [{"name": "a"}, {"name": "a"}]}`,
		`{"orgs": [{"name": "a"}], "reserve": 1}`,
		`{"orgs": [{"name": "a", "limits": {"sonnet-4": {"rpm": -1}}}]}`,
		`{"orgs": [{"name": "a"}], "batch": {"processing_rate": 0}}`,
		`{"orgs": [{"name": "a"}], "poll_min": "-1s"}`,
		`{"orgs": [{"name": "a"}], "poll_min": "10s", "poll_max": "5s"}`,
	} {
		if _, err := plan.ReadWorld(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadWorld(%s) accepted", bad)
		}
	}
}

func ExampleDecide() {
	m, _ := sim.PresetModel("three-org")
	w := plan.FromModel(m, nil)
	for _, p := range []plan.Priority{plan.PreferLatency, plan.PreferCost} {
		d, _ := plan.Decide(w, plan.JudgeJob(20_000, "claude-sonnet-4-5"), plan.Options{Priority: p})
		fmt.Printf("%s: %s on %d orgs, %v, $%.2f (%s)\n", p, d.Route, len(d.Orgs), d.Wall.Mid.Round(time.Second), d.Cost, d.Binding)
	}
	// Output:
	// latency: sync on 3 orgs, 3m15s, $58.80 (etiquette cap)
	// cost: batch on 3 orgs, 27m34s, $29.40 (batch processing rate)
}
