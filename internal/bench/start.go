package bench

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// The start of a job (issue 40): the worlds where the first seconds are
// most of the job, and the figures that measure them.

// startWorlds are the worlds of the start: full buckets a new user meets,
// short jobs, long answers, and acceleration limits of rules other than
// accel-cold's (the docs publish none: no one model may tune the engine).
func startWorlds(base func(string, string, func(*sim.Config, *workload.Judge)) World) []World {
	full := func(scale float64, window time.Duration, n int) func(*sim.Config, *workload.Judge) {
		return func(c *sim.Config, wl *workload.Judge) {
			c.TimeScale, c.BucketWindow, c.BucketsStartEmpty = scale, sim.Duration(window), false
			wl.N = n
		}
	}
	goal := func(w World, g float64) World { w.WholeGoal = g; return w }
	accel := func(a sim.Acceleration) func(*sim.Config, *workload.Judge) {
		return func(c *sim.Config, _ *workload.Judge) { a.Enabled = true; c.Acceleration = a }
	}
	return []World{
		goal(base("start-rt-60s", "real time, full-minute buckets starting full, 9,000 requests", full(1, time.Minute, 9000)), 0.93),
		base("start-rt-60s-1k", "real time, full-minute buckets starting full, 1,000 requests", full(1, time.Minute, 1000)),
		base("start-rt-60s-3k", "real time, full-minute buckets starting full, 3,000 requests", full(1, time.Minute, 3000)),
		goal(base("start-6s", "6 s buckets starting full, 29,500 requests", full(10, 6*time.Second, 29500)), 0.95),
		base("start-6s-10k", "6 s buckets starting full, 10,000 requests", full(10, 6*time.Second, 10000)),
		base("start-long", "long answers (mean 1,200 tokens, max_tokens 4,096): bound by the etiquette caps, 10,000 requests", func(c *sim.Config, wl *workload.Judge) {
			full(10, time.Minute, 10000)(c, wl)
			c.Output = sim.OutputModel{Min: 400, Max: 2000}
			wl.MaxTokens = 4096
		}),
		goal(base("accel-long", "acceleration limit: window 30 s, factor 2 over 4 windows, floor 300 RPM", accel(sim.Acceleration{Window: sim.Duration(30 * time.Second), Factor: 2, LongWindows: 4, FloorRPM: 300})), 0.90),
		goal(base("accel-short", "acceleration limit: window 3 s, factor 1.5 over 10 windows, floor 900 RPM", accel(sim.Acceleration{Window: sim.Duration(3 * time.Second), Factor: 1.5, LongWindows: 10, FloorRPM: 900})), 0.90),
		// The start's step into full buckets meets an acceleration limit.
		goal(base("accel-full-short", "accel-short's limit on 6 s buckets starting full, 18,000 requests", func(c *sim.Config, wl *workload.Judge) {
			full(10, 6*time.Second, 18000)(c, wl)
			accel(sim.Acceleration{Window: sim.Duration(3 * time.Second), Factor: 1.5, LongWindows: 10, FloorRPM: 900})(c, wl)
		}), 0.90),
		// A colleague who arrives after the cold start spent the full
		// buckets: the reserve must be there for it.
		base("colleague-late-6s", "6 s buckets starting full, a colleague on high_prio at 10 % from 100 s, 18,000 requests", func(c *sim.Config, wl *workload.Judge) {
			full(10, 6*time.Second, 18000)(c, wl)
			c.Colleagues = []sim.Colleague{{Org: "high_prio", Model: "claude-sonnet-4-5", Share: 0.1, InputTokens: 300, OutputTokens: 150, Start: sim.Duration(100 * time.Second)}}
		}),
	}
}

// durableLog records when each count of durable results was reached.
type durableLog struct {
	mu sync.Mutex
	t  []time.Time
	n  []int64
}

func (d *durableLog) observe(n int64) {
	d.mu.Lock()
	d.t, d.n = append(d.t, time.Now()), append(d.n, n)
	d.mu.Unlock()
}

// to90 is the time from the first result to the first moment the results
// of the last window (a mean latency) came at rate or faster; 0 if never.
func (d *durableLog) to90(rate float64, window time.Duration) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.t) == 0 || window <= 0 {
		return 0
	}
	need := rate * window.Seconds()
	j := 0 // the last sample at or before t − window
	for i, t := range d.t {
		for j+1 < i && !d.t[j+1].After(t.Add(-window)) {
			j++
		}
		var before int64
		if !d.t[j].After(t.Add(-window)) {
			before = d.n[j]
		}
		if float64(d.n[i]-before) >= need {
			return t.Sub(d.t[0])
		}
	}
	return 0
}

// To90String is To90 in seconds and in mean latencies.
func (r WorldResult) To90String() string {
	if r.To90 <= 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s (%.1f lat.)", r.To90.Seconds(), r.To90.Seconds()/r.Latency.Seconds())
}

// worldLatency is the simulator's mean latency (real time) of a request of
// pool p under maxTokens, as orgBindings reckons it.
func worldLatency(cfg sim.Config, p api.Pool, maxTokens int) time.Duration {
	lat := cfg.Latency["default"]
	if l, ok := cfg.Latency[string(p)]; ok {
		lat = l
	}
	expOut := meanCapped(float64(cfg.Output.Min), float64(cfg.Output.Max), float64(maxTokens))
	s := (lat.TTFT.D().Seconds() + expOut/lat.TokensPerSec) * math.Exp(lat.Sigma*lat.Sigma/2) / cfg.TimeScale
	return time.Duration(s * float64(time.Second))
}

// idealWall is the least wall-clock of a job of n at the binding limits
// binds: one latency for the first answers, then each org at its etiquette
// cap (c in flight) while what its full buckets hold lasts, at its binding
// rate after.
func idealWall(cfg sim.Config, binds []orgBinding, c, n int, lat time.Duration) time.Duration {
	type org struct{ capRate, rate, drain float64 }
	var orgs []org
	for _, b := range binds {
		o := org{capRate: float64(c) / lat.Seconds(), rate: b.rate}
		if !cfg.BucketsStartEmpty && b.what != "etiquette cap" && o.capRate > b.rate {
			depth := b.rate * cfg.BucketWindow.D().Seconds() // the simulator's window is of the scaled limit
			o.drain = depth / (o.capRate - b.rate)
		}
		orgs = append(orgs, o)
	}
	done := func(t float64) float64 {
		s := 0.0
		for _, o := range orgs {
			if t < o.drain {
				s += o.capRate * t
			} else {
				s += o.capRate*o.drain + o.rate*(t-o.drain)
			}
		}
		return s
	}
	hi := 1.0
	for done(hi) < float64(n) && hi < 1e9 {
		hi *= 2
	}
	t := sort.Search(1<<20, func(i int) bool { return done(hi*float64(i)/(1<<20)) >= float64(n) })
	return lat + time.Duration(hi*float64(t)/(1<<20)*float64(time.Second))
}
