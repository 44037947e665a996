package plan_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/sim"
)

const (
	sonnet = "claude-sonnet-4-5-20250929"
	haiku  = "claude-haiku-4-5-20251001"
	opus   = "claude-opus-4-8"
)

func preset(t *testing.T, name string) plan.World {
	t.Helper()
	m, err := sim.PresetModel(name)
	if err != nil {
		t.Fatal(err)
	}
	w := plan.FromModel(m, nil)
	w.Name = name
	return w
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// The judge shape's mean latency on Sonnet: (0.5 s + 144 ÷ 64) · e^(0.25²/2).
var judgeLatency = (0.5 + 144.0/64) * math.Exp(0.25*0.25/2)

func TestDefaultCapsMatchDispatch(t *testing.T) {
	for f, c := range dispatch.DefaultCaps {
		if plan.DefaultCaps[f] != c {
			t.Errorf("plan.DefaultCaps[%s] = %d, dispatch has %d", f, plan.DefaultCaps[f], c)
		}
	}
	if len(plan.DefaultCaps) != len(dispatch.DefaultCaps) {
		t.Errorf("plan.DefaultCaps has %d families, dispatch %d", len(plan.DefaultCaps), len(dispatch.DefaultCaps))
	}
}

// TestSyncRateMatchesBench: the planner's steady-state arithmetic agrees
// with bench.BindingLimit, which the efficiency benchmark was measured
// against, on every preset, model and two time scales.
func TestSyncRateMatchesBench(t *testing.T) {
	for _, name := range sim.PresetNames() {
		for _, model := range []string{sonnet, haiku, opus, "claude-sonnet-5"} {
			for _, k := range []float64{1, 10} {
				cfg, err := sim.Preset(name)
				if err != nil {
					t.Fatal(err)
				}
				cfg.TimeScale = k
				w := plan.FromModel(cfg.Model(), nil)
				got, gotWhy, err := w.SyncRate(plan.JudgeJob(1, model))
				if err != nil {
					t.Fatal(err)
				}
				caps := map[api.Family]int{}
				for f, c := range dispatch.DefaultCaps {
					caps[f] = c
				}
				want, wantWhy := bench.BindingLimit(cfg, caps, api.PoolOf(model), plan.JudgeMaxTokens, plan.JudgeMeanInput, 144)
				if !near(got, want, 1e-9*want) || gotWhy != wantWhy {
					t.Errorf("%s %s K=%g: SyncRate = %.6f (%s), bench.BindingLimit = %.6f (%s)", name, model, k, got, gotWhy, want, wantWhy)
				}
			}
		}
	}
}

func TestSyncRateJudgeThreeOrg(t *testing.T) {
	w := preset(t, "three-org")
	got, why, err := w.SyncRate(plan.JudgeJob(1, sonnet))
	if err != nil {
		t.Fatal(err)
	}
	want := 3 * 100 / judgeLatency // ≈ 105.7 req/s
	if !near(got, want, 1e-9) || why != plan.BindCap || !near(got, 105.7, 0.05) {
		t.Errorf("SyncRate = %.4f (%s) want %.4f (%s)", got, why, want, plan.BindCap)
	}
	// Haiku: the batch org's 4,000 RPM (66.7/s) is below its cap ÷ latency.
	lanes, err := w.Lanes(plan.JudgeJob(1, haiku))
	if err != nil {
		t.Fatal(err)
	}
	if l := lanes[1]; l.Org != "batch" || l.Binding != plan.BindRPM || !near(l.Rate, 4000.0/60, 1e-9) || l.Steady != 118 {
		t.Errorf("batch org Haiku lane = %+v, want RPM-bound at 66.67/s, steady 118", l)
	}
}

func TestRampTime(t *testing.T) {
	for _, tt := range []struct {
		name string
		ramp plan.Ramp
		cap  int
		want float64 // seconds
	}{
		{"sonnet default start 12", plan.Ramp{Doubling: 5 * time.Second}, 100, 5 * math.Log2(100.0/12)},
		{"haiku start 15", plan.Ramp{Doubling: 5 * time.Second}, 120, 15},
		{"opus start 5", plan.Ramp{Doubling: 5 * time.Second}, 40, 15},
		{"cap below 4 starts at the cap", plan.Ramp{Doubling: 5 * time.Second}, 3, 0},
		{"explicit start", plan.Ramp{Start: 25, Doubling: 2 * time.Second}, 100, 4},
		// The engine's own: RampDoublingLatencies latencies (1.5 s) per doubling.
		{"by latency", plan.Ramp{Start: 25}, 100, lane.RampDoublingLatencies * 1.5 * 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ramp.RampTime(tt.cap, 1500*time.Millisecond).Seconds(); !near(got, tt.want, 1e-6) {
				t.Errorf("RampTime(%d) = %v want %.6f s", tt.cap, got, tt.want)
			}
		})
	}
}

func TestOutputMean(t *testing.T) {
	m := plan.OutputModel{Min: 32, Max: 256}
	for _, tt := range []struct {
		k    int
		want float64
	}{
		{256, 144}, {0, 144}, {1000, 144}, {10, 10}, {32, 32},
		// 32..63 keep themselves, 64..256 are capped at 64.
		{64, (32*(32+63)/2.0 + 193*64) / 225},
	} {
		if got := m.Mean(tt.k); !near(got, tt.want, 1e-9) {
			t.Errorf("Mean(%d) = %v want %v", tt.k, got, tt.want)
		}
	}
}

// TestSyncWallHandComputed checks cells of the decision table against the
// formulas worked by hand: first wave at t = 0, then ∫ start·2^(t/d) ÷ L
// during the ramp, then the steady rate (the last send T), plus the tail
// from T to the last answer (ExpectedTail, checked by TestTailMonteCarlo).
func TestSyncWallHandComputed(t *testing.T) {
	w := preset(t, "three-org")
	w.Ramp.Start = 12 // the ramp's arithmetic from a given start (the start from full buckets: TestStartFromFullBuckets)
	L := judgeLatency
	// The header probes: the first of k answers, the latency's 1/(k+1)
	// quantile (median 0.5 + 144/64 s, σ 0.25).
	probe := func(k int) float64 {
		return (0.5 + 144.0/64) * math.Exp(0.25*math.Sqrt2*math.Erfinv(2/float64(k+1)-1))
	}
	s, d := 12.0, lane.RampDoublingLatencies*judgeLatency // the engine's ramp
	k := s * d / (L * math.Ln2)                           // requests per unit of (2^(t/d) − 1), per lane
	tc := d * math.Log2(100/s)
	for _, tt := range []struct {
		n    int
		want float64
		orgs int
		bind string
	}{
		// Every lane first sends one header probe; the rest starts at the
		// first probe's answer: all times below are + probe(orgs).
		// 10 requests fit in a lane's first wave of 12: one wave, two orgs
		// (two probes answer sooner than one, by more than the 5 % the
		// fewest-organizations rule allows).
		{10, probe(2), 2, plan.BindLatency},
		// 100: 36 at once on three lanes, 64 more during the ramp.
		{100, probe(3) + d*math.Log2(1+64/(3*k)), 3, plan.BindRamp},
		// 10,000: the ramp sends 3·(12 + k·(100/12 − 1)), the rest at 3·100/L.
		{10_000, probe(3) + tc + (10_000-3*(s+k*(100/s-1)))/(300/L), 3, plan.BindCap},
	} {
		dd, err := plan.Decide(w, plan.JudgeJob(tt.n, sonnet), plan.Options{Priority: plan.PreferLatency})
		if err != nil {
			t.Fatal(err)
		}
		first := int(s) * tt.orgs
		// The tail is that of the sends after the probe: from its answer on.
		tail, err := plan.ExpectedTail(w, plan.JudgeJob(tt.n, sonnet), tt.n, first, time.Duration((tt.want-probe(tt.orgs))*float64(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		tt.want += tail.Seconds()
		if dd.Route != plan.RouteSync || !near(dd.Wall.Mid.Seconds(), tt.want, 2e-3) || len(dd.Orgs) != tt.orgs || dd.Binding != tt.bind {
			t.Errorf("N=%d: %s on %v, wall %v (%s); want sync on %d orgs, %.3f s (%s)", tt.n, dd.Route, dd.Orgs, dd.Wall.Mid, dd.Binding, tt.orgs, tt.want, tt.bind)
		}
		if dd.Wall.Low > dd.Wall.Mid || dd.Wall.Mid > dd.Wall.High {
			t.Errorf("N=%d: range %+v not ordered", tt.n, dd.Wall)
		}
	}
}

// TestSyncBurstOnlyInLowEnd: an OTPM-bound lane is paced at the refill
// rate in the central prediction; the low end spends the full bucket's
// (1 − reserve) · window · refill first.
func TestSyncBurstOnlyInLowEnd(t *testing.T) {
	w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
		api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * 10}, // 10 requests/s of output
	}})
	lanes, err := w.Lanes(plan.JudgeJob(1, sonnet))
	if err != nil {
		t.Fatal(err)
	}
	l := lanes[0]
	// A full bucket above the reserve (the engine spends the reserve for
	// one latency only: internal/engine/lane/start.go); its first wave is above the
	// refill, so the burst is what is left.
	if l.Binding != plan.BindOTPM || !near(l.Rate, 10, 1e-9) || !near(l.Burst, (1-plan.DefaultReserve)*60*10-float64(l.Start), 0.5) || l.Steady != 28 {
		t.Fatalf("lane = %+v, want OTPM-bound at 10/s, burst 510 less the first wave, steady 28", l)
	}
	d, err := plan.Decide(w, plan.JudgeJob(10_000, sonnet), plan.Options{Priority: plan.PreferLatency, MinBatch: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	L := judgeLatency
	dbl := lane.RampDoublingLatencies * L
	probe := (0.5 + 144.0/64)                 // one lane: the first of one probe is its median
	s0 := float64(l.Start)                    // the first wave: already above the refill here
	t0 := math.Max(0, dbl*math.Log2(10*L/s0)) // the ramp reaches the refill rate
	sent0 := s0 + s0*dbl/(L*math.Ln2)*(math.Exp2(t0/dbl)-1)
	send := probe + t0 + (10_000-sent0)/10 // after the header probe's round trip
	tail, err := plan.ExpectedTail(w, plan.JudgeJob(10_000, sonnet), 10_000, l.Start, time.Duration((send-probe)*float64(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	want := send + tail.Seconds()
	if !near(d.Wall.Mid.Seconds(), want, 2e-3) || d.Binding != plan.BindOTPM {
		t.Errorf("wall %v (%s) want %.3f s (OTPM)", d.Wall.Mid, d.Binding, want)
	}
	// Low also ends on a median answer where Mid ends on the tail.
	saved := (d.Wall.Mid - d.Wall.Low).Seconds() - (tail.Seconds() - (0.5 + 144.0/64))
	if saved < 40 || saved > 51.1 {
		t.Errorf("the burst saves %.1f s at the low end, want a little under 510 ÷ 10 = 51 s", saved)
	}
}

// TestTailMonteCarlo checks the tail formula against a simulation of the
// same latency distribution: one wave of 10, and a steady stream.
func TestTailMonteCarlo(t *testing.T) {
	w := preset(t, "three-org")
	j := plan.JudgeJob(1, sonnet)
	rng := rand.New(rand.NewPCG(1, 2))
	latency := func() float64 {
		k := 32 + rng.IntN(225) // the simulator: uniform 32..256, capped at 256
		return (0.5 + float64(k)/64) * math.Exp(0.25*rng.NormFloat64())
	}
	for _, tt := range []struct {
		name     string
		n, first int
		T        float64
	}{
		{"one wave of 10", 10, 10, 0},
		{"300 at once then 3,000 over 30 s", 3300, 300, 30},
	} {
		const runs = 4000
		sum := 0.0
		for range runs {
			end := 0.0
			for i := range tt.n {
				sent := 0.0
				if i >= tt.first {
					sent = tt.T * float64(i-tt.first+1) / float64(tt.n-tt.first)
				}
				end = math.Max(end, sent+latency())
			}
			sum += end - tt.T
		}
		want := sum / runs
		got, err := plan.ExpectedTail(w, j, tt.n, tt.first, time.Duration(tt.T*float64(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if !near(got.Seconds(), want, 0.02*want) { // 2 %: the formula is discretized
			t.Errorf("%s: ExpectedTail %.3f s, Monte Carlo %.3f s", tt.name, got.Seconds(), want)
		}
	}
}

func TestFewestOrgs(t *testing.T) {
	w := preset(t, "three-org")
	// One org for one request, fewer than all while first waves hold the
	// job (two: two header probes answer sooner than one), all three for
	// large jobs, and never fewer for more requests.
	prev := 0
	for _, tt := range []struct {
		n, orgs int
	}{{1, 1}, {12, 2}, {13, 0}, {24, 0}, {36, 0}, {1000, 3}} {
		d, err := plan.Decide(w, plan.JudgeJob(tt.n, sonnet), plan.Options{Priority: plan.PreferLatency})
		if err != nil {
			t.Fatal(err)
		}
		got := len(d.Orgs)
		if (tt.orgs != 0 && got != tt.orgs) || got < prev || len(d.Lanes) != got {
			t.Errorf("N=%d uses %v, want %d org(s), at least %d", tt.n, d.Orgs, tt.orgs, prev)
		}
		prev = got
	}
}

// TestFromModelTimeScale: a world at time scale K predicts the same job in
// 1/K of the time, for the sync route's steady state and for batches.
func TestFromModelTimeScale(t *testing.T) {
	cfg := sim.Default()
	w1 := plan.FromModel(cfg.Model(), nil)
	cfg.TimeScale = 10
	w10 := plan.FromModel(cfg.Model(), nil)
	r1, _, _ := w1.SyncRate(plan.JudgeJob(1, sonnet))
	r10, _, _ := w10.SyncRate(plan.JudgeJob(1, sonnet))
	if !near(r10, 10*r1, 1e-9*r10) {
		t.Errorf("sync rate at K=10 = %v, want 10 × %v", r10, r1)
	}
	b1, _ := w1.SimulateBatch(500, 500, 1, "batch")
	b10, _ := w10.SimulateBatch(500, 500, 1, "batch")
	// It ends 310 s after its create (210 s admission, 100 s processing)
	// and is seen at the poll after that: polls at 2, 5, 9.5, … 149.8,
	// 209.8, 269.8, then 329.8 s.
	if !near(b1.End.Seconds(), 329.77, 0.01) || !near(b10.End.Seconds(), 32.977, 0.001) {
		t.Errorf("one 500-request batch: %v at K=1, %v at K=10; want 5m29.8s and 32.98s", b1.End, b10.End)
	}
}

// TestPollLagPerBatch: a batch is seen ended at the first poll of its
// schedule at or after its end, and its window slot is reused only then.
func TestPollLagPerBatch(t *testing.T) {
	w := plan.FromModel(sim.Default().Model(), nil)
	w.Poll = plan.Poll{Min: 10 * time.Second, Max: 10 * time.Second}
	one, _ := w.SimulateBatch(500, 500, 1, "batch")
	if one.End != 310*time.Second { // 310 is on the 10 s grid
		t.Fatalf("one batch: %v, want 5m10s", one.End)
	}
	w.Poll = plan.Poll{Min: 100 * time.Second, Max: 100 * time.Second}
	one, _ = w.SimulateBatch(500, 500, 1, "batch")
	two, _ := w.SimulateBatch(1000, 500, 1, "batch")
	// Two batches through a window of one: the second is created when the
	// first is seen (400 s), and seen itself at 400 + 400.
	if one.End != 400*time.Second || two.End != 800*time.Second {
		t.Fatalf("poll every 100 s: one batch %v (want 6m40s), two in a window of one %v (want 13m20s)", one.End, two.End)
	}
}

// TestEfficiencyScalesTheSyncRoute: a world whose engine gets half the
// modelled sending rate (a re-plan's measured rate) predicts the sync
// route's steady rate halved and its send phase about twice as long — and a
// big enough slowdown sends the job to batch.
func TestEfficiencyScalesTheSyncRoute(t *testing.T) {
	w := preset(t, "three-org")
	j := plan.Job{N: 20_000, Model: sonnet, MeanInput: 1200, MaxTokens: 256}
	full, err := plan.Decide(w, j, plan.Options{Priority: plan.PreferLatency})
	if err != nil {
		t.Fatal(err)
	}
	w.Efficiency = 0.5
	half, err := plan.Decide(w, j, plan.Options{Priority: plan.PreferLatency})
	if err != nil {
		t.Fatal(err)
	}
	if full.Route != plan.RouteSync {
		t.Fatalf("the full-rate world routes %s; this test needs sync", full.Route)
	}
	if !near(half.SyncRate, full.SyncRate/2, 1e-9*full.SyncRate) {
		t.Errorf("SyncRate at efficiency 0.5 = %.2f, want half of %.2f", half.SyncRate, full.SyncRate)
	}
	if r := half.SyncWall.Mid.Seconds() / full.SyncWall.Mid.Seconds(); r < 1.7 || r > 2.1 {
		t.Errorf("sync wall at efficiency 0.5 is %.2f× the full one, want about 2×", r)
	}
	w.Efficiency = 0.02
	slow, err := plan.Decide(w, j, plan.Options{Priority: plan.PreferLatency})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Route == plan.RouteSync {
		t.Errorf("at 2 %% of the modelled rate the planner still routes sync (sync %v, batch %v)", slow.SyncWall.Mid, slow.BatchWall.Mid)
	}
	w.Efficiency = -1
	if err := w.Validate(); err == nil {
		t.Error("a negative efficiency validates")
	}
}

// TestBucketsBelowTheReserveHoldTheStart: the engine takes only from a
// bucket above its reserve, so buckets that start empty first refill to
// it — reserve × window, 0.15 × 60 s = 9 s — and the refill runs while the
// header probe is out: the sends start at the later of the probe's answer
// and the refill. A bucket that starts at the reserve (drained 0.85) holds
// nothing. A job of a few requests still ends after its answers (Mid ≥
// Low): the tail is counted from the hold on, not from zero.
func TestBucketsBelowTheReserveHoldTheStart(t *testing.T) {
	decide := func(n int, drained float64) plan.Decision {
		w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
			api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * 10},
		}})
		w.BucketWindow, w.BucketDrained = time.Minute, drained
		d, err := plan.Decide(w, plan.JudgeJob(n, sonnet), plan.Options{Priority: plan.PreferLatency, MinBatch: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	probe := 0.5 + 144.0/64 // one lane: its probe answers at the median
	hold := plan.DefaultReserve * 60
	atReserve, empty := decide(10_000, 1-plan.DefaultReserve), decide(10_000, 1)
	if got := (empty.Wall.Mid - atReserve.Wall.Mid).Seconds(); !near(got, hold-probe, 0.05) {
		t.Errorf("empty buckets took %.3f s more than buckets at the reserve, want %.3f (the hold less the probe it overlaps)", got, hold-probe)
	}
	for _, n := range []int{1, 3, 50} {
		if d := decide(n, 1); d.Wall.Mid < d.Wall.Low || d.Wall.Mid.Seconds() < hold+probe {
			t.Errorf("%d requests from empty buckets: wall %v (low %v), want at least the %.1f s hold and one answer", n, d.Wall.Mid, d.Wall.Low, hold)
		}
	}
}

// TestKnownBucketsCountTheBurstInTheCentralValue: with full minute-deep
// buckets the low end spends the burst either way; the central value does
// only when the world says the buckets' depth and level are known (a
// simulator's configuration, a learned depth read by a fresh probe), and
// then comes down to within a tail of the low end. An assumed bucket
// leaves the central value as it was.
func TestKnownBucketsCountTheBurstInTheCentralValue(t *testing.T) {
	decide := func(known bool) plan.Decision {
		w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
			api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * 10}, // 10 requests/s
		}})
		w.BucketsKnown = known
		d, err := plan.Decide(w, plan.JudgeJob(10_000, sonnet), plan.Options{Priority: plan.PreferLatency, MinBatch: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	assumed, known := decide(false), decide(true)
	if assumed.Wall.Low != known.Wall.Low || assumed.Wall.High != known.Wall.High {
		t.Errorf("the range's ends moved with BucketsKnown: %+v vs %+v", assumed.Wall, known.Wall)
	}
	// The burst is 510 requests at 10/s (a full bucket above the
	// reserve): a little under 51 s once the ramp's share of it is taken
	// out.
	if saved := (assumed.Wall.Mid - known.Wall.Mid).Seconds(); saved < 40 || saved > 51.1 {
		t.Errorf("known buckets saved %.1f s of the central value, want a little under 51 s", saved)
	}
	if known.Wall.Mid < known.Wall.Low {
		t.Errorf("central %v below the low end %v", known.Wall.Mid, known.Wall.Low)
	}
}

// TestTheRampLeavesABurst: buckets that start empty refill while the
// header probe is out and while the ramp sends below the refill; what they
// hold above the reserve when the ramp reaches the refill is the lane's
// burst. Checked against a step-by-step integration of the same bucket.
func TestTheRampLeavesABurst(t *testing.T) {
	w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
		api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * 10}, // 10 requests/s
	}})
	w.BucketWindow, w.BucketDrained, w.BucketsKnown = 10*time.Second, 1, true
	lanes, err := w.Lanes(plan.JudgeJob(10_000, sonnet))
	if err != nil {
		t.Fatal(err)
	}
	const rb, depth, s = 10.0, 100.0, 12.0 // refill/s, a full bucket and the first wave, in requests
	reserve := plan.DefaultReserve * depth
	L := judgeLatency
	dbl := lane.RampDoublingLatencies * L
	start := math.Max(plan.DefaultReserve*10, 0.5+144.0/64) // the hold, or the probe's answer (one lane: its median)
	level := math.Min(depth, rb*start) - s
	const dt = 1e-4
	for tt := 0.0; math.Min(100, s*math.Exp2(tt/dbl))/L < rb; tt += dt {
		level = math.Min(depth, level+(rb-math.Min(100, s*math.Exp2(tt/dbl))/L)*dt)
	}
	want := math.Max(0, level-reserve)
	if got := lanes[0].Burst; want < 5 || !near(got, want, 0.05) {
		t.Errorf("burst = %.2f requests, want %.2f (the integrated bucket above its reserve)", got, want)
	}
}

// engineLastSend integrates, step by step, what the engine does on one
// lane: from the first sends (start seconds in) it sends its first wave
// of s and then at most ceiling(t) ÷ L per second, but only from a bucket
// above its reserve, which refills at rb per second up to depth. It
// returns when the n-th request goes out, from the first sends.
func engineLastSend(n int, rb, window, drained, reserve, start, s, capacity, L, dbl float64) float64 {
	depth := window * rb
	level := math.Min(depth, (1-drained)*depth+rb*start)
	const dt = 1e-3
	sent, wave := 0.0, s
	for t := 0.0; ; t += dt {
		can := math.Max(0, level-reserve*depth)
		w := math.Min(wave, can)
		f := math.Min(math.Min(capacity, s*math.Exp2(t/dbl))/L*dt, can-w)
		wave, sent, level = wave-w, sent+w+f, level-w-f
		if sent >= float64(n) {
			return t
		}
		level = math.Min(depth, level+rb*dt)
	}
}

// TestKnownBucketsMatchTheEngine: with the buckets known, the central
// value's last send is the integrated engine's, over buckets full, half
// and empty, a second, 10 s and a minute deep, and a lane whose first wave
// is already above its refill (t0 = 0): the burst, the refill during the
// probe, the ramp's unspent refill and a first wave the bucket cannot pay
// for at once (a debt) all counted.
func TestKnownBucketsMatchTheEngine(t *testing.T) {
	L := judgeLatency
	dbl := lane.RampDoublingLatencies * L
	probe := 0.5 + 144.0/64
	for _, rb := range []float64{4, 10} {
		for _, window := range []float64{1, 2, 10, 60} {
			for _, drained := range []float64{0, 0.5, 1} {
				w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
					api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * rb},
				}})
				w.BucketWindow = time.Duration(window * float64(time.Second))
				w.BucketDrained, w.BucketsKnown = drained, true
				for _, n := range []int{5, 12, 13, 1500} { // inside, at and just past the first wave of 12, and long
					d, err := plan.Decide(w, plan.JudgeJob(n, sonnet), plan.Options{Priority: plan.PreferLatency, MinBatch: 1 << 30})
					if err != nil {
						t.Fatal(err)
					}
					start := math.Max(probe, math.Max(0, drained+plan.DefaultReserve-1)*window)
					want := engineLastSend(n, rb, window, drained, plan.DefaultReserve, start, 12, 100, L, dbl)
					if got := d.LastSend.Seconds() - start; math.Abs(got-want) > 0.25 {
						t.Errorf("%g/s, %g s deep, %.0f %% drained, %d requests: last send %.2f s after the first, the engine's %.2f s", rb, window, 100*drained, n, got, want)
					}
				}
			}
		}
	}
}

// TestPeakAndBindingDuringTheBurst: a job that ends inside a known
// bucket's burst is bound by the ramp or the cap, not by the bucket's
// refill, and its lane's peak is the ceiling it reached.
func TestPeakAndBindingDuringTheBurst(t *testing.T) {
	w := plan.NewWorld("otpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
		api.PoolSonnet4: {RPM: 100_000, ITPM: 100_000_000, OTPM: 144 * 60 * 10}, // 10/s, 600 a minute-deep bucket
	}})
	w.BucketsKnown = true
	decide := func(n int) plan.Decision {
		d, err := plan.Decide(w, plan.JudgeJob(n, sonnet), plan.Options{Priority: plan.PreferLatency, MinBatch: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	L := judgeLatency
	dbl := lane.RampDoublingLatencies * L
	d100 := decide(100)
	s0 := float64(d100.Lanes[0].Start) // the first wave (TestStartFromFullBuckets)
	tc := dbl * math.Log2(100.0/s0)    // the ramp reaches the cap
	probe := 0.5 + 144.0/64
	if d100.Binding != plan.BindRamp || d100.LastSend.Seconds()-probe >= tc {
		t.Errorf("100 requests: binding %q, last send %v: want the ramp (it reaches the cap at %.1f s)", d100.Binding, d100.LastSend, tc)
	}
	// The ramp runs from the first sends, after the probe: its peak is the
	// ceiling then, not the ceiling as if it had ramped through the probe.
	if want := math.Round(s0 * math.Exp2((d100.LastSend.Seconds()-probe)/dbl)); float64(d100.Lanes[0].Peak) != want {
		t.Errorf("100 requests: peak %d, want %.0f (the ceiling at the last send, on the sends' clock)", d100.Lanes[0].Peak, want)
	}
	d := decide(700) // 472 of burst + the refill: still spending it when the last is sent
	if d.Binding == plan.BindOTPM {
		t.Errorf("700 requests inside the burst: binding %q, want the cap", d.Binding)
	}
	if p := d.Lanes[0].Peak; p != 100 {
		t.Errorf("700 requests: peak %d, want the cap (100) the ramp reached in the burst", p)
	}
}

// TestTheLastSendTakesItsLatency: however slowly the sends trickle out,
// the job ends one answer after its last send at the earliest: the tail
// is never below one request's mean latency (a slow stream spread evenly
// over a long send put almost nothing near its end).
func TestTheLastSendTakesItsLatency(t *testing.T) {
	w := preset(t, "three-org")
	j := plan.JudgeJob(13, sonnet)
	for _, tt := range []struct {
		n, first int
		T        time.Duration
	}{{13, 12, 100 * time.Second}, {2, 1, 30 * time.Second}, {20, 0, 1000 * time.Second}, {1000, 12, 100 * time.Second}} {
		tail, err := plan.ExpectedTail(w, j, tt.n, tt.first, tt.T)
		if err != nil {
			t.Fatal(err)
		}
		if tail.Seconds() < 0.97*judgeLatency {
			t.Errorf("n %d, first %d, last send at %v: tail %v, below one answer's mean latency %.2f s", tt.n, tt.first, tt.T, tail, judgeLatency)
		}
	}
}

// TestStartFromFullBuckets: the planner starts a lane as the engine does
// (internal/engine/lane/start.go): from full buckets with a first wave of what a second of
// the binding limit and a latency of its rate let go (at least one), within
// the cap, under Start for a small limit; from drained ones at the default.
func TestStartFromFullBuckets(t *testing.T) {
	for _, c := range []struct {
		rpm     float64
		drained float64
		want    int
	}{
		{1200, 0, int(20 * (1 + judgeLatency))},
		{60_000, 0, 100},
		{120, 0, int(2 * (1 + judgeLatency))}, // under Start: a second of a small limit is less
		{1200, 1, 12},
	} {
		w := plan.NewWorld("rpm", plan.Org{Name: "solo", Limits: map[api.Pool]plan.Limits{
			api.PoolSonnet4: {RPM: c.rpm, ITPM: 100_000_000, OTPM: 100_000_000},
		}})
		w.BucketDrained = c.drained
		lanes, err := w.Lanes(plan.JudgeJob(1000, sonnet))
		if err != nil {
			t.Fatal(err)
		}
		if got := lanes[0].Start; got != c.want {
			t.Errorf("%g RPM, %.0f %% drained: start %d, want %d", c.rpm, 100*c.drained, got, c.want)
		}
	}
}
