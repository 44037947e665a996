package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// World is one world of `sluice bench worlds`: a simulator configuration
// and a job, run with sluice's defaults (never a flag a user would not
// pass: the engine must find its way in every world by itself).
type World struct {
	Name string
	// What it varies, for the table.
	About    string
	Sim      sim.Config
	Workload workload.Judge
	// Loop > 0 also runs the job as a plain loop over the official Go SDK
	// with Loop calls in flight per key (RunSDKLoop), for comparison.
	Loop int
	// WholeGoal > 0 is what the whole job's efficiency (WorldResult.Whole)
	// must reach: the start counts there.
	WholeGoal float64
}

// WorldResult is what one world measured. Rates are requests per real
// second; shares are of sluice's attempts (the simulator's counts), in the
// steady window (10 %–90 % of results durable) unless named otherwise.
type WorldResult struct {
	World     World
	Wall      time.Duration
	Steady    float64
	Binding   float64
	BindsWhat string
	// Goal is what Steady ÷ Binding must reach: 0.95 without faults, 0.90 ×
	// (1 − the fault share) with them.
	Goal float64
	// Predicted is the planner's whole-job sync wall-clock for this world
	// as its configuration describes it (plan.FromModel; colleagues and
	// faults are not in the model), with its range: what `sluice plan`
	// would say before the run.
	Predicted, PredictedLow, PredictedHigh time.Duration
	Attempts                               int64   // sluice's attempts over the whole run
	Share429                               float64 // of sluice's attempts over the whole run
	FaultPct                               float64 // 529s, 500s and resets, share of attempts in the steady window
	Lost                                   int     // requests without a succeeded result
	Duplicate                              int64   // answers beyond the first for one body (billed twice)
	// Colleague figures, where the world has a colleague: its 429 share
	// and sluice + colleague's share of that org's RPM in the steady
	// window.
	HasColleague    bool
	Colleague429    float64
	ColleagueOrgRPM float64
	// The start (start.go): Ideal is the whole job's least wall-clock at
	// the binding limits, the full buckets' burst counted (under the
	// etiquette caps) plus one latency; Whole is Ideal ÷ Wall. To90 is the
	// time from the first result to the first moment the results of the
	// last mean latency Latency came at 90 % of the binding rate (0: never).
	Ideal, To90, Latency time.Duration
	Whole                float64
}

// Efficiency is steady throughput over the binding limit.
func (r WorldResult) Efficiency() float64 { return r.Steady / r.Binding }

// Met reports whether every goal of the world was met.
func (r WorldResult) Met() bool {
	ok := r.Efficiency() >= r.Goal && r.Share429 <= 0.01 && r.Lost == 0 && r.Whole >= r.World.WholeGoal
	if r.HasColleague {
		ok = ok && r.Colleague429 <= 0.01 && r.ColleagueOrgRPM >= 0.95
	}
	return ok
}

// statsAt samples the simulator's stats when the steady window opens and
// closes.
type statsAt struct {
	mu       sync.Mutex
	sp       *SimProcess
	lo, hi   int64
	s10, s90 *sim.Stats
	t10, t90 time.Time
	wg       sync.WaitGroup
}

func (s *statsAt) observe(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	take := func(dst **sim.Stats, at *time.Time) {
		*at = time.Now()
		s.wg.Add(1)
		go func() { // never block the writer's callback on HTTP
			defer s.wg.Done()
			st, err := s.sp.Stats()
			if err == nil {
				s.mu.Lock()
				*dst = &st
				s.mu.Unlock()
			}
		}()
	}
	if s.t10.IsZero() && n >= s.lo {
		take(&s.s10, &s.t10)
	}
	if s.t90.IsZero() && n >= s.hi {
		take(&s.s90, &s.t90)
	}
}

// Run runs the world in a fresh simulator child process of binary.
func (w World) Run(ctx context.Context, binary string, log io.Writer) (WorldResult, error) {
	res := WorldResult{World: w}
	dir, err := os.MkdirTemp("", "sluice-worlds-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	wl := w.Workload
	if wl.Model == "" {
		wl.Model = "claude-sonnet-4-5-20250929"
	}
	if wl.MaxTokens == 0 {
		wl.MaxTokens = 256
	}
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := wl.WriteFile(in); err != nil {
		return res, err
	}
	if res.Predicted, res.PredictedLow, res.PredictedHigh, err = predictSync(w.Sim, in); err != nil {
		return res, err
	}
	sp, pool, err := StartSimPool(ctx, binary, w.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	if log == nil {
		log = io.Discard
	}
	steady := newSteadyWindow(wl.N)
	samples := &statsAt{sp: sp, lo: steady.lo, hi: steady.hi}
	var durable durableLog
	start := time.Now()
	// The client and dispatcher as `sluice run` builds them (one slot per
	// cap of every org), nothing tuned for the world.
	caps := 0
	for _, c := range dispatch.DefaultCaps {
		caps = max(caps, c)
	}
	rep, err := job.Run(ctx, job.Options{
		Input: in, Output: out, Logger: slog.New(slog.NewTextHandler(log, nil)),
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: sp.Base, MaxConns: caps*len(w.Sim.Orgs) + 64}),
			Keys: pool.Keys()},
		OnDurable: func(n int64) { steady.observe(n); samples.observe(n); durable.observe(n) },
	})
	res.Wall = time.Since(start)
	samples.wg.Wait()
	if err != nil {
		return res, err
	}
	res.Steady = steady.rate()
	end, err := sp.Stats()
	if err != nil {
		return res, err
	}
	res.Duplicate = end.Bodies.ExtraAnswers
	var limited int64
	for _, o := range end.Orgs {
		for _, p := range o.Pools {
			res.Attempts += p.Admitted + p.RateLimited + p.Overloaded + p.ServerErrors
			limited += p.RateLimited
		}
	}
	if res.Attempts > 0 {
		res.Share429 = float64(limited) / float64(res.Attempts)
	}
	if res.Lost, err = lostRequests(out, wl.N); err != nil {
		return res, err
	}
	meanIn, meanOut := 0.0, 0.0
	if t := rep.Cost.Total; t.Requests > 0 {
		meanIn = float64(t.Tokens.Input+t.Tokens.CacheWrite5m+t.Tokens.CacheWrite1h) / float64(t.Requests)
		meanOut = float64(t.Tokens.Output) / float64(t.Requests)
	}
	res.Binding, res.BindsWhat = BindingLimit(withoutColleagues(w.Sim), dispatch.DefaultCaps, api.PoolOf(wl.Model), wl.MaxTokens, meanIn, meanOut)
	if samples.s10 != nil && samples.s90 != nil {
		dt := samples.t90.Sub(samples.t10)
		res.steadyShares(w, samples.s10, samples.s90, dt)
		// A bucket that started the window fuller than it ended it lent
		// the window its contents: that is burst, not pacing.
		binds := orgBindings(withoutColleagues(w.Sim), dispatch.DefaultCaps, api.PoolOf(wl.Model), wl.MaxTokens, meanIn, meanOut)
		res.Steady -= bankSpent(binds, samples.s10, samples.s90, api.PoolOf(wl.Model), meanIn, meanOut) / dt.Seconds()
	}
	res.Latency = worldLatency(w.Sim, api.PoolOf(wl.Model), wl.MaxTokens)
	binds := orgBindings(withoutColleagues(w.Sim), dispatch.DefaultCaps, api.PoolOf(wl.Model), wl.MaxTokens, meanIn, meanOut)
	res.Ideal = idealWall(withoutColleagues(w.Sim), binds, dispatch.DefaultCaps[api.FamilyOfPool(api.PoolOf(wl.Model))], wl.N, res.Latency)
	if res.Wall > 0 {
		res.Whole = res.Ideal.Seconds() / res.Wall.Seconds()
	}
	res.To90 = durable.to90(0.9*res.Binding, res.Latency)
	res.Goal = 0.95
	if res.FaultPct > 0.001 {
		res.Goal = 0.90 * (1 - res.FaultPct)
	}
	return res, nil
}

// steadyShares fills the fault share and the colleague's figures from the
// simulator's counts at the two ends of the steady window.
func (r *WorldResult) steadyShares(w World, a, b *sim.Stats, dt time.Duration) {
	var attempts, faults int64
	for name, ob := range b.Orgs {
		oa := a.Orgs[name]
		for pool, pb := range ob.Pools {
			pa := oa.Pools[pool]
			attempts += (pb.Admitted + pb.RateLimited + pb.Overloaded + pb.ServerErrors) - (pa.Admitted + pa.RateLimited + pa.Overloaded + pa.ServerErrors)
			faults += (pb.Overloaded + pb.ServerErrors + pb.Resets) - (pa.Overloaded + pa.ServerErrors + pa.Resets)
		}
	}
	if attempts > 0 {
		r.FaultPct = float64(faults) / float64(attempts)
	}
	for _, c := range w.Sim.Colleagues {
		r.HasColleague = true
		pool, _ := api.LookupModel(c.Model)
		var rpm float64
		for _, o := range w.Sim.Orgs {
			if o.Name == c.Org {
				rpm = float64(o.Limits[pool.Pool].RPM) * w.Sim.TimeScale
			}
		}
		pa, pb := a.Orgs[c.Org].Pools[pool.Pool], b.Orgs[c.Org].Pools[pool.Pool]
		col := pb.ColleagueAdmitted - pa.ColleagueAdmitted
		colLimited := pb.ColleagueLimited - pa.ColleagueLimited
		if col+colLimited > 0 {
			r.Colleague429 = float64(colLimited) / float64(col+colLimited)
		}
		if rpm > 0 && dt > 0 {
			r.ColleagueOrgRPM = float64(pb.Admitted-pa.Admitted+col) / (rpm / 60 * dt.Seconds())
		}
	}
}

// bankSpent is how many requests' worth of the binding buckets' levels
// the window spent (their level at its start less at its end, where
// positive), over the orgs.
func bankSpent(binds []orgBinding, a, b *sim.Stats, pool api.Pool, meanIn, meanOut float64) float64 {
	total := 0.0
	for _, ob := range binds {
		la, lb := a.Orgs[ob.org].Pools[pool].Levels, b.Orgs[ob.org].Pools[pool].Levels
		if la == nil || lb == nil {
			continue
		}
		var drop float64
		switch ob.what {
		case "RPM":
			drop = la.Requests - lb.Requests
		case "ITPM":
			drop = (la.InputTokens - lb.InputTokens) / math.Max(meanIn, 1)
		case "OTPM":
			drop = (la.OutputTokens - lb.OutputTokens) / math.Max(meanOut, 1)
		}
		total += math.Max(0, drop)
	}
	return total
}

// withoutColleagues is cfg with each colleague's expected use taken off
// its org's limits: what is left for sluice.
func withoutColleagues(cfg sim.Config) sim.Config {
	out := cfg
	out.Orgs = append([]sim.OrgConfig(nil), cfg.Orgs...)
	for _, c := range cfg.Colleagues {
		m, ok := api.LookupModel(c.Model)
		if !ok {
			continue
		}
		for i, o := range out.Orgs {
			if o.Name != c.Org {
				continue
			}
			lims := map[api.Pool]sim.Limits{}
			for p, l := range o.Limits {
				lims[p] = l
			}
			l := lims[m.Pool]
			req := c.Share * float64(l.RPM)
			l.RPM -= int64(math.Round(req))
			if l.ITPM > 0 {
				l.ITPM -= int64(req * float64(c.InputTokens))
			}
			if l.OTPM > 0 {
				l.OTPM -= int64(req * float64(c.OutputTokens))
			}
			lims[m.Pool] = l
			out.Orgs[i].Limits = lims
		}
	}
	return out
}

// lostRequests counts the requests of a job of n without a succeeded
// result line.
func lostRequests(path string, n int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ok := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type string `json:"type"`
			} `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Result.Type == "succeeded" {
			ok[line.CustomID] = true
		}
	}
	return n - len(ok), sc.Err()
}

// Worlds is the matrix of `sluice bench worlds` (docs/control.md: every
// reading the documentation leaves open). Unless a world says otherwise:
// three orgs whose Sonnet 4.x limits are RPM-bound at 1,200 / 900 / 600
// RPM (ITPM and OTPM far above), judge-shaped requests (max_tokens 256,
// answers 32–256 tokens), time scale 10, buckets of 10 s that start
// empty, no faults. Each
// job is sized to about secs seconds of wall-clock at its binding limit.
func Worlds(secs float64) []World {
	base := func(name, about string, mod func(*sim.Config, *workload.Judge)) World {
		cfg := sim.Default()
		cfg.TimeScale = 10
		cfg.BucketWindow = sim.Duration(10 * time.Second)
		// Drained at the start (as by a colleague's or an earlier job's
		// use): a full bucket's burst would hide the steady pacing.
		cfg.BucketsStartEmpty = true
		for i, rpm := range []int64{1200, 900, 600} {
			cfg.Orgs[i].Limits = cloneLimits(cfg.Orgs[i].Limits)
			cfg.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: rpm, ITPM: 50_000_000, OTPM: 10_000_000}
		}
		wl := workload.Judge{Seed: 21}
		mod(&cfg, &wl)
		w := World{Name: name, About: about, Sim: cfg, Workload: wl}
		// Size the job by the binding limit at the workload's expected shape.
		b, _ := BindingLimit(withoutColleagues(cfg), dispatch.DefaultCaps, api.PoolSonnet4, max(wl.MaxTokens, 256), 330, 144)
		if w.Workload.N == 0 {
			w.Workload.N = max(1000, int(b*secs))
		}
		return w
	}
	depth := func(s time.Duration) func(*sim.Config, *workload.Judge) {
		return func(c *sim.Config, _ *workload.Judge) { c.BucketWindow = sim.Duration(s) }
	}
	return append([]World{
		base("depth-60s", "buckets hold the whole per-minute limit", depth(time.Minute)),
		base("depth-10s", "buckets hold 10 s of the limit", depth(10*time.Second)),
		base("depth-6s", "buckets hold 6 s (remaining ≤ 10 % of limit)", depth(6*time.Second)),
		base("depth-1s", "buckets hold 1 s of the limit", depth(time.Second)),
		base("coarse-6s", "6 s buckets; resets and retry-after in whole real seconds", func(c *sim.Config, _ *workload.Judge) {
			c.BucketWindow, c.CoarseHeaders = sim.Duration(6*time.Second), true
		}),
		base("coarse-down-1s", "1 s buckets; whole-second resets truncated (not rounded up)", func(c *sim.Config, _ *workload.Judge) {
			c.BucketWindow, c.CoarseHeaders, c.ResetRounding = sim.Duration(time.Second), true, "down"
		}),
		base("skew-nodate-1s", "1 s buckets; the server's clock 30 s ahead and no Date header", func(c *sim.Config, _ *workload.Judge) {
			c.BucketWindow, c.ClockSkew, c.OmitDate = sim.Duration(time.Second), sim.Duration(30*time.Second), true
		}),
		base("faults-light", "2 % 529 + 0.5 % 500", func(c *sim.Config, _ *workload.Judge) {
			c.Faults.P529, c.Faults.P500 = 0.02, 0.005
		}),
		base("faults-heavy", "5 % 529 + 1 % 500 + 0.5 % resets", func(c *sim.Config, _ *workload.Judge) {
			c.Faults.P529, c.Faults.P500, c.Faults.PReset = 0.05, 0.01, 0.005
		}),
		base("storm", "a 30 s (simulated) storm of 50 % 529, 100 s in", func(c *sim.Config, _ *workload.Judge) {
			c.Faults.Storms = []sim.Storm{{Start: sim.Duration(100 * time.Second), Length: sim.Duration(30 * time.Second), P529: 0.5}}
		}),
		base("accel-cold", "acceleration limit on a cold start (window 10 s, factor 4, floor 600 RPM)", func(c *sim.Config, _ *workload.Judge) {
			c.Acceleration = sim.Acceleration{Enabled: true, Window: sim.Duration(10 * time.Second), Factor: 4, FloorRPM: 600}
		}),
		base("no-input-headers", "input-token (and combined token) headers absent", func(c *sim.Config, _ *workload.Judge) {
			c.OmitHeaders = []string{"input-tokens", "tokens"}
		}),
		base("itpm-hidden", "ITPM-bound with its headers absent (429 messages name it)", func(c *sim.Config, _ *workload.Judge) {
			c.OmitHeaders = []string{"input-tokens", "tokens"}
			itpmBound(c)
		}),
		base("colleague-10", "a colleague on high_prio at 10 % of its RPM", func(c *sim.Config, _ *workload.Judge) {
			c.Colleagues = []sim.Colleague{{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.1, InputTokens: 300, OutputTokens: 150}}
		}),
		base("colleague-30", "a colleague on high_prio at 30 % of its RPM", func(c *sim.Config, _ *workload.Judge) {
			c.Colleagues = []sim.Colleague{{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.3, InputTokens: 300, OutputTokens: 150}}
		}),
		base("colleague-30-1s", "a colleague on high_prio at 30 % of its RPM, 1 s buckets", func(c *sim.Config, _ *workload.Judge) {
			c.BucketWindow = sim.Duration(time.Second)
			c.Colleagues = []sim.Colleague{{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.3, InputTokens: 300, OutputTokens: 150}}
		}),
		base("unequal", "orgs of 1,600 / 800 / 400 RPM (one 4× another)", func(c *sim.Config, _ *workload.Judge) {
			for i, rpm := range []int64{1600, 800, 400} {
				l := c.Orgs[i].Limits[api.PoolSonnet4]
				l.RPM = rpm
				c.Orgs[i].Limits[api.PoolSonnet4] = l
			}
		}),
		base("otpm-bound", "OTPM-bound (150k / 100k / 50k), max_tokens 2,048 ≫ mean output", func(c *sim.Config, wl *workload.Judge) {
			wl.MaxTokens = 2048
			for i, otpm := range []int64{150_000, 100_000, 50_000} {
				c.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: 10_000, ITPM: 50_000_000, OTPM: otpm}
			}
		}),
		base("itpm-bound", "ITPM-bound (300k / 225k / 150k), headers visible", func(c *sim.Config, _ *workload.Judge) {
			itpmBound(c)
		}),
		realTime(base("realtime-10s", "real time (time scale 1), buckets of 10 s", depth(10*time.Second)), secs),
		realTime(base("realtime-1s", "real time (time scale 1), buckets of 1 s", depth(time.Second)), secs),
		issueWorld(base),
	}, startWorlds(base)...)
}

// issueWorld is the last world of the issue that asked for this matrix:
// real time, full-minute buckets that start full, 2 % 529 + 0.5 % 500 +
// 0.2 % resets, 9,000 requests — where a plain loop over the official Go
// SDK (100 in flight per key) finished in 127 s losing 18 % of its
// requests and drawing 429s on 42 % of its calls. It is run both ways.
func issueWorld(base func(string, string, func(*sim.Config, *workload.Judge)) World) World {
	w := base("issue-faults-rt", "real time, full-minute buckets starting full, 2 % 529 + 0.5 % 500 + 0.2 % resets", func(c *sim.Config, wl *workload.Judge) {
		c.TimeScale = 1
		c.BucketWindow = sim.Duration(time.Minute)
		c.BucketsStartEmpty = false
		c.Faults.P529, c.Faults.P500, c.Faults.PReset = 0.02, 0.005, 0.002
		wl.N = 9000
	})
	w.Loop = 100
	return w
}

// itpmBound sets the Sonnet 4.x limits ITPM-bound at 300k / 225k / 150k
// (about 900 / 680 / 450 judge requests a minute).
func itpmBound(c *sim.Config) {
	for i, itpm := range []int64{300_000, 225_000, 150_000} {
		c.Orgs[i].Limits[api.PoolSonnet4] = sim.Limits{RPM: 10_000, ITPM: itpm, OTPM: 10_000_000}
	}
}

// realTime runs w at time scale 1, its job resized to the same wall-clock.
func realTime(w World, secs float64) World {
	w.Sim.TimeScale = 1
	w.Workload.N = 0
	b, _ := BindingLimit(withoutColleagues(w.Sim), dispatch.DefaultCaps, api.PoolSonnet4, 256, 330, 144)
	w.Workload.N = max(500, int(b*secs*1.5))
	return w
}

func cloneLimits(m map[api.Pool]sim.Limits) map[api.Pool]sim.Limits {
	out := make(map[api.Pool]sim.Limits, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// PrintWorlds writes the table BENCHMARKS.md quotes.
// predictSync is the planner's prediction of the job in file in on the
// sync route in the world cfg, from the job's surveyed shape as `sluice
// run` would give it.
func predictSync(cfg sim.Config, in string) (mid, low, high time.Duration, err error) {
	sum, _, err := jsonl.ScanFile(in, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	j := plan.Job{N: sum.Valid, Model: sum.MainModel(), MeanInput: sum.MeanEstInputTokens(), MaxTokens: int(sum.MeanMaxTokens() + 0.5)}
	d, err := plan.Decide(plan.FromModel(cfg.Model(), nil), j, plan.Options{Priority: plan.PreferLatency})
	if err != nil {
		return 0, 0, 0, err
	}
	return d.SyncWall.Mid, d.SyncWall.Low, d.SyncWall.High, nil
}

// PredictionError is measured ÷ predicted − 1.
func (r WorldResult) PredictionError() float64 {
	if r.Predicted <= 0 {
		return 0
	}
	return r.Wall.Seconds()/r.Predicted.Seconds() - 1
}

// PrintPredictions writes, per world, the planner's predicted sync
// wall-clock next to the measured one.
func PrintPredictions(w io.Writer, rs []WorldResult) {
	fmt.Fprintln(w, "| world | requests | predicted wall (range) | measured wall | measured ÷ predicted − 1 | within ±10 % |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|:-:|")
	for _, r := range rs {
		ok := "yes"
		if e := r.PredictionError(); e > 0.10 || e < -0.10 {
			ok = "**no**"
		}
		fmt.Fprintf(w, "| %s | %d | %.1f s (%.1f–%.1f) | %.1f s | %+.1f %% | %s |\n", r.World.Name, r.World.Workload.N,
			r.Predicted.Seconds(), r.PredictedLow.Seconds(), r.PredictedHigh.Seconds(), r.Wall.Seconds(), 100*r.PredictionError(), ok)
	}
}

func PrintWorlds(w io.Writer, rs []WorldResult) {
	fmt.Fprintln(w, "| world | what it varies | K | requests | wall | steady req/s | binding (what) | steady ÷ binding | goal | whole job ÷ ideal (goal) | to 90 % of binding | 429s | faults | lost | billed twice | colleague 429s | org filled | met |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
	for _, r := range rs {
		col, fill := "—", "—"
		if r.HasColleague {
			col, fill = fmt.Sprintf("%.2f %%", 100*r.Colleague429), fmt.Sprintf("%.3f", r.ColleagueOrgRPM)
		}
		met := "yes"
		if !r.Met() {
			met = "**no**"
		}
		whole := fmt.Sprintf("%.3f", r.Whole)
		if r.World.WholeGoal > 0 {
			whole += fmt.Sprintf(" (%.2f)", r.World.WholeGoal)
		}
		fmt.Fprintf(w, "| %s | %s | %g | %d | %.1f s | %.1f | %.1f (%s) | **%.3f** | %.3f | %s | %s | %.2f %% | %.1f %% | %d | %d | %s | %s | %s |\n",
			r.World.Name, r.World.About, r.World.Sim.TimeScale, r.World.Workload.N, r.Wall.Seconds(), r.Steady, r.Binding, r.BindsWhat,
			r.Efficiency(), r.Goal, whole, r.To90String(), 100*r.Share429, 100*r.FaultPct, r.Lost, r.Duplicate, col, fill, met)
	}
}
