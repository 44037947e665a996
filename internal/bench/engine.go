package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench/zeroapi"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// EngineRun is one measured `sluice run` against a simulator child process.
type EngineRun struct {
	Name     string
	Binary   string // sluice-bench, to start its sim and zeroapi children
	Sim      sim.Config
	Workload workload.Judge
	// Caps per family; nil keeps the defaults.
	Caps map[api.Family]int
	// Zero runs against internal/bench/zeroapi (no latency, limits out of reach,
	// as little CPU as an upstream can spend) instead of the simulator;
	// Sim then only names the organizations (their number).
	Zero bool
	// KeepFiles keeps the work directory.
	Dir string
	Log io.Writer
}

// EngineResult is what a run measured.
type EngineResult struct {
	Name string
	N    int
	Wall time.Duration
	// Throughput over the whole run and over the steady state (from 10% to
	// 90% of results durable), in requests per real second.
	Throughput, Steady float64
	// Predicted is the binding limit computed from the simulator's
	// configuration, in requests per real second, and what binds it.
	Predicted float64
	Binding   string
	Admitted  int64
	Limited   int64 // 429s the simulator sent
	Extra     int64 // answers beyond the first for one body
	PeakRSSMB float64
	// AllocsPerRequest and AllocBytesPerRequest are this process's heap
	// allocations per request over the job (the engine runs in-process;
	// the simulator is a child); CPUPerRequest is this process's CPU time
	// per request, 0 where not measured.
	AllocsPerRequest, AllocBytesPerRequest float64
	CPUPerRequest                          time.Duration
	// UpstreamCPUPerRequest is the upstream process's CPU time per
	// request over the job, 0 where not measured.
	UpstreamCPUPerRequest time.Duration
	// Upstream names what the engine ran against.
	Upstream string
	Report   *job.Report
}

// steadyWindow measures throughput between 10 % and 90 % of a job's
// results durable: the steady state, without the warm-up ramp or the last
// answers. Its observe method is a job.Options.OnDurable.
type steadyWindow struct {
	mu       sync.Mutex
	lo, hi   int64
	t10, t90 time.Time
	n10, n90 int64
}

func newSteadyWindow(n int) *steadyWindow {
	return &steadyWindow{lo: int64(n / 10), hi: int64(n * 9 / 10)}
}

func (w *steadyWindow) observe(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.t10.IsZero() && n >= w.lo {
		w.t10, w.n10 = now, n
	}
	if w.t90.IsZero() && n >= w.hi {
		w.t90, w.n90 = now, n
	}
}

// rate is requests per second in the window, 0 before it closed.
func (w *steadyWindow) rate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.t90.After(w.t10) {
		return 0
	}
	return float64(w.n90-w.n10) / w.t90.Sub(w.t10).Seconds()
}

// Efficiency is steady-state throughput over the predicted binding limit.
func (r EngineResult) Efficiency() float64 { return r.Steady / r.Predicted }

// Pct429 is the share of the simulator's answers that were 429.
func (r EngineResult) Pct429() float64 {
	if r.Admitted+r.Limited == 0 {
		return 0
	}
	return 100 * float64(r.Limited) / float64(r.Admitted+r.Limited)
}

// Run executes the run and measures it.
func (e EngineRun) Run(ctx context.Context) (EngineResult, error) {
	res := EngineResult{Name: e.Name, N: e.Workload.N}
	dir := e.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if e.Workload.MaxTokens == 0 {
		e.Workload.MaxTokens = 256
	}
	if e.Workload.Model == "" {
		e.Workload.Model = "claude-sonnet-4-5-20250929"
	}
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := e.Workload.WriteFile(in); err != nil {
		return res, err
	}
	os.Remove(out)
	var (
		sp   *SimProcess
		pool *keys.Pool
		err  error
	)
	res.Upstream = "simulator"
	if e.Zero {
		res.Upstream = "zero-latency upstream"
		sp, pool, err = startZeroPool(ctx, e.Binary, len(e.Sim.Orgs))
	} else {
		sp, pool, err = StartSimPool(ctx, e.Binary, e.Sim, dir)
	}
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	conns := 0
	for _, c := range e.capsOrDefault() {
		conns = max(conns, c)
	}
	c := client.New(client.Config{BaseURL: sp.Base, MaxConns: conns*len(e.Sim.Orgs) + 64})
	logw := e.Log
	if logw == nil {
		logw = io.Discard
	}
	steady := newSteadyWindow(e.Workload.N)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, up0 := procCPU(os.Getpid()), procCPU(sp.PID())
	start := time.Now()
	opts := job.Options{
		Input: in, Output: out, Logger: slog.New(slog.NewTextHandler(logw, nil)),
		Dispatch:  dispatch.Config{Client: c, Keys: pool.Keys(), Caps: e.Caps},
		OnDurable: steady.observe,
	}
	rep, err := job.Run(ctx, opts)
	res.Wall = time.Since(start)
	cpu, up := procCPU(os.Getpid())-cpu0, procCPU(sp.PID())-up0
	runtime.ReadMemStats(&m1)
	res.Report = rep
	if err != nil {
		return res, err
	}
	if n := rep.Requests.Written; n > 0 {
		res.AllocsPerRequest = float64(m1.Mallocs-m0.Mallocs) / float64(n)
		res.AllocBytesPerRequest = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n)
		if cpu > 0 {
			res.CPUPerRequest = cpu / time.Duration(n)
		}
		if up > 0 {
			res.UpstreamCPUPerRequest = up / time.Duration(n)
		}
	}
	res.Throughput = float64(rep.Requests.Written) / res.Wall.Seconds()
	res.Steady = steady.rate()
	if e.Zero {
		st, err := sp.ZeroStats()
		if err != nil {
			return res, err
		}
		res.Admitted, res.Extra = st.Messages, st.Extra
	} else {
		st, err := sp.Stats()
		if err != nil {
			return res, err
		}
		for _, o := range st.Orgs {
			for _, p := range o.Pools {
				res.Admitted += p.Admitted
				res.Limited += p.RateLimited
			}
		}
		res.Extra = st.Bodies.ExtraAnswers
	}
	res.PeakRSSMB = peakRSSMB()
	meanIn, meanOut := 0.0, 0.0
	if t := rep.Cost.Total; t.Requests > 0 {
		meanIn = float64(t.Tokens.Input+t.Tokens.CacheWrite5m+t.Tokens.CacheWrite1h) / float64(t.Requests)
		meanOut = float64(t.Tokens.Output) / float64(t.Requests)
	}
	res.Predicted, res.Binding = BindingLimit(e.Sim, e.capsOrDefault(), api.PoolOf(e.Workload.Model), e.Workload.MaxTokens, meanIn, meanOut)
	return res, nil
}

// startZeroPool starts a zero-latency upstream of orgs organizations and
// returns the key pool its organizations answer to, loaded as `sluice
// run` loads keys (the standard variables, never a .env).
func startZeroPool(ctx context.Context, binary string, orgs int) (*SimProcess, *keys.Pool, error) {
	sp, err := StartZeroAPI(ctx, binary, orgs)
	if err != nil {
		return nil, nil, err
	}
	var ks []string
	for i := range orgs {
		ks = append(ks, zeroapi.Key(i))
	}
	pool, err := simtest.PoolOf(simtest.EnvOf(ks))
	if err != nil {
		sp.Stop()
		return nil, nil, err
	}
	return sp, pool, nil
}

func (e EngineRun) capsOrDefault() map[api.Family]int {
	caps := map[api.Family]int{}
	for f, c := range dispatch.DefaultCaps {
		caps[f] = c
	}
	for f, c := range e.Caps {
		caps[f] = c
	}
	return caps
}

// BindingLimit is the steady-state ceiling, in requests per real second, of
// a job on pool p in world cfg: the sum over orgs of the smallest of
// cap ÷ mean latency, RPM, ITPM ÷ mean input and OTPM ÷ mean output — all
// per second and time-scaled — and the name of what binds most often.
func BindingLimit(cfg sim.Config, caps map[api.Family]int, p api.Pool, maxTokens int, meanIn, meanOut float64) (float64, string) {
	total := 0.0
	votes := map[string]float64{}
	for _, b := range orgBindings(cfg, caps, p, maxTokens, meanIn, meanOut) {
		total += b.rate
		votes[b.what] += b.rate
	}
	binding, most := "", -1.0
	for n, v := range votes {
		if v > most {
			binding, most = n, v
		}
	}
	return total, binding
}

// orgBinding is what binds one org and its rate, requests per real second.
type orgBinding struct {
	org  string
	what string // "etiquette cap", "RPM", "ITPM", "OTPM"
	rate float64
}

// orgBindings is BindingLimit per org.
func orgBindings(cfg sim.Config, caps map[api.Family]int, p api.Pool, maxTokens int, meanIn, meanOut float64) []orgBinding {
	k := cfg.TimeScale
	lat := cfg.Latency["default"]
	if l, ok := cfg.Latency[string(p)]; ok {
		lat = l
	}
	// E[min(U[min,max], maxTokens)] for the simulator's output model.
	expOut := meanCapped(float64(cfg.Output.Min), float64(cfg.Output.Max), float64(maxTokens))
	latency := (lat.TTFT.D().Seconds() + expOut/lat.TokensPerSec) * math.Exp(lat.Sigma*lat.Sigma/2) / k
	fam := api.FamilyOfPool(p)
	var out []orgBinding
	for _, o := range cfg.Orgs {
		lim, ok := o.Limits[p]
		if !ok && o.DefaultLimits != nil {
			lim = *o.DefaultLimits
		}
		best, why := float64(caps[fam])/latency, "etiquette cap"
		for _, c := range []struct {
			name string
			v    float64
		}{
			{"RPM", float64(lim.RPM) * k / 60},
			{"ITPM", float64(lim.ITPM) * k / 60 / math.Max(meanIn, 1)},
			{"OTPM", float64(lim.OTPM) * k / 60 / math.Max(meanOut, 1)},
		} {
			if c.v > 0 && c.v < best {
				best, why = c.v, c.name
			}
		}
		out = append(out, orgBinding{org: o.Name, what: why, rate: best})
	}
	return out
}

// meanCapped is E[min(U, c)] for U uniform on the integers [a, b].
func meanCapped(a, b, c float64) float64 {
	if c >= b {
		return (a + b) / 2
	}
	if c <= a {
		return c
	}
	n := b - a + 1
	below := c - a // values a..c-1 keep themselves
	sumBelow := below * (a + c - 1) / 2
	return (sumBelow + (n-below)*c) / n
}

// Print writes one result as the lines BENCHMARKS.md quotes.
func (r EngineResult) Print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d requests in %s: %.0f req/s overall, %.0f req/s steady (10%%–90%%)\n",
		r.Name, r.N, r.Wall.Round(time.Millisecond), r.Throughput, r.Steady)
	if r.Predicted > 0 {
		fmt.Fprintf(w, "  binding limit from the world's configuration: %.0f req/s (%s); steady ÷ binding = %.3f\n", r.Predicted, r.Binding, r.Efficiency())
	}
	rss := "not measured on this system"
	if r.PeakRSSMB > 0 {
		rss = fmt.Sprintf("%.0f MB", r.PeakRSSMB)
	}
	upstream := r.Upstream // Run sets it before anything can fail
	fmt.Fprintf(w, "  %s: %d admitted, %d × 429 (%.2f%%), %d extra answers; peak RSS of this process %s\n",
		upstream, r.Admitted, r.Limited, r.Pct429(), r.Extra, rss)
	if r.AllocsPerRequest > 0 {
		cpu := ""
		if r.CPUPerRequest > 0 {
			cpu = fmt.Sprintf("; CPU %.0f µs", float64(r.CPUPerRequest)/1e3)
		}
		if r.UpstreamCPUPerRequest > 0 {
			cpu += fmt.Sprintf(" (the %s's: %.0f µs)", upstream, float64(r.UpstreamCPUPerRequest)/1e3)
		}
		fmt.Fprintf(w, "  engine per request: %.0f allocations, %.1f KiB allocated%s\n", r.AllocsPerRequest, r.AllocBytesPerRequest/1024, cpu)
	}
}
