package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/sim"
)

// PredictTolerance is how close a measured wall-clock must come to the
// planner's central prediction to count as a hit: ±10 %.
const PredictTolerance = 0.10

// PredictCell is one job of the prediction check: N judge requests on one
// route at one time scale.
type PredictCell struct {
	Route     string // route.Sync or route.Batch
	N         int
	TimeScale float64
}

// PredictRun runs cells against a simulator child process and compares
// what the planner said for each run with what the run took.
type PredictRun struct {
	Binary string     // sluice-bench or sluice, to start the simulator child
	Sim    sim.Config // the world; TimeScale is set per cell
	Seed   uint64     // of the judge workload
	Log    io.Writer  // the runs' logs (nil: discarded)
}

// PredictResult is one cell: the decision the run's Plan hook captured
// and what the run measured.
type PredictResult struct {
	PredictCell
	// Decision is what plan.Decide answered inside the run's Plan hook;
	// Predicted is the range of the route the run took (the whole job on
	// sync, or on batch).
	Decision  plan.Decision
	Predicted plan.Range
	// Wall is job.Run from call to return (survey, key discovery, sending,
	// the last fsync) less PlanTime, the time plan.Decide took inside the
	// Plan hook: `sluice run --route sync` does not plan, and this
	// benchmark's decision (MinBatch above N) costs more than `--route
	// auto`'s. Overhead is the part of Wall before the Plan hook (survey,
	// key discovery); the model's clock starts when the hook returns.
	Wall, Overhead, PlanTime time.Duration
	// Steady is the measured rate between 10 % and 90 % of results
	// durable, in requests per real second (0 when N < 10,000: smaller
	// jobs are still ramping up).
	Steady float64
	// Sync runs, timed at the HTTP transport: LastSend is the last
	// Messages call's start, from the Plan hook's return; Tail is from it to the
	// end of the run; MeanLatency and MaxLatency are over every Messages
	// call (request start to response headers).
	LastSend, Tail          time.Duration
	MeanLatency, MaxLatency time.Duration
	// Batch runs, timed at the HTTP transport from the Plan hook's return:
	// Created is when the last create call returned, Fetched when the
	// last results download started (its batch's end was seen by then).
	Created, Fetched time.Duration
	Limited          int64 // 429s the simulator sent
	Extra            int64 // answers beyond the first for one body
	Batches          int64 // batches the simulator saw created
	Report           *job.Report
}

// Ratio is measured ÷ predicted (central value).
func (r PredictResult) Ratio() float64 { return r.Wall.Seconds() / r.Predicted.Mid.Seconds() }

// Within reports whether the measured wall-clock is within
// PredictTolerance of the central prediction.
func (r PredictResult) Within() bool { return math.Abs(r.Ratio()-1) <= PredictTolerance }

// Run runs one cell in a fresh directory and simulator.
func (p PredictRun) Run(ctx context.Context, cell PredictCell) (PredictResult, error) {
	res := PredictResult{PredictCell: cell}
	dir, err := os.MkdirTemp("", "sluice-predict-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	cfg := p.Sim
	cfg.TimeScale = cell.TimeScale
	k := cfg.TimeScale
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	if err := (workload.Judge{N: cell.N, Seed: p.Seed}).WriteFile(in); err != nil {
		return res, err
	}
	sp, pool, err := StartSimPool(ctx, p.Binary, cfg, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	logw := p.Log
	if logw == nil {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	// The engine's clocks are its own latency, so nothing is configured
	// for the time scale: the planner models the same.
	world := plan.FromModel(cfg.Model(), nil)
	world.Name = "three-org"

	// The client's own transport, timed.
	conns := 100*len(cfg.Orgs) + 64
	tt := &timedTransport{next: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}}
	var mu sync.Mutex
	var planStart, hook time.Time
	steady := newSteadyWindow(cell.N)
	start := time.Now()
	opts := job.Options{
		Input: in, Output: out, Logger: log,
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: sp.Base, Transport: tt}),
			Keys: pool.Keys()},
		OnDurable: steady.observe,
		Plan: func(s jsonl.Summary, pending int) (route.Routing, error) {
			mu.Lock()
			planStart = time.Now()
			mu.Unlock()
			r, d, pr, err := predictRouting(world, cell.Route, s, pending, k)
			res.Decision, res.Predicted = d, pr
			mu.Lock()
			hook = time.Now() // sending starts once the plan is made
			mu.Unlock()
			log.Info("route chosen", "route", r.Route, "predicted", pr.Mid, "why", d.Why)
			return r, err
		},
	}
	rep, err := job.Run(ctx, opts)
	res.Wall = time.Since(start)
	res.Report = rep
	if err != nil {
		return res, err
	}
	if rep.Requests.Written != cell.N {
		return res, fmt.Errorf("bench: %d of %d results written", rep.Requests.Written, cell.N)
	}
	res.PlanTime = hook.Sub(planStart)
	res.Wall -= res.PlanTime
	res.Overhead = planStart.Sub(start)
	if cell.N >= 10000 {
		res.Steady = steady.rate()
	}
	if tt.calls > 0 {
		res.LastSend = tt.lastSend.Sub(hook)
		res.Tail = start.Add(res.Wall + res.PlanTime).Sub(tt.lastSend)
		res.MeanLatency = tt.sum / time.Duration(tt.calls)
		res.MaxLatency = tt.max
	}
	if !tt.lastCreate.IsZero() {
		res.Created = tt.lastCreate.Sub(hook)
	}
	if !tt.lastFetch.IsZero() {
		res.Fetched = tt.lastFetch.Sub(hook)
	}
	st, err := sp.Stats()
	if err != nil {
		return res, err
	}
	for _, o := range st.Orgs {
		for _, pl := range o.Pools {
			res.Limited += pl.RateLimited
		}
		res.Batches += o.Batches.Created
	}
	res.Extra = st.Bodies.ExtraAnswers
	return res, nil
}

// timedTransport times the Messages calls that pass through it, the
// batch creates and the results downloads.
type timedTransport struct {
	next http.RoundTripper

	mu                    sync.Mutex
	lastSend              time.Time
	calls                 int64
	sum, max              time.Duration
	lastCreate, lastFetch time.Time
}

func (t *timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/batches":
		resp, err := t.next.RoundTrip(r)
		t.mu.Lock()
		t.lastCreate = time.Now()
		t.mu.Unlock()
		return resp, err
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/messages/batches/") && strings.HasSuffix(r.URL.Path, "/results"):
		t.mu.Lock()
		t.lastFetch = time.Now()
		t.mu.Unlock()
		return t.next.RoundTrip(r)
	case r.Method != http.MethodPost || r.URL.Path != "/v1/messages":
		return t.next.RoundTrip(r)
	}
	begin := time.Now()
	t.mu.Lock()
	if begin.After(t.lastSend) {
		t.lastSend = begin
	}
	t.mu.Unlock()
	resp, err := t.next.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		d := time.Since(begin)
		t.mu.Lock()
		t.calls++
		t.sum += d
		t.max = max(t.max, d)
		t.mu.Unlock()
	}
	return resp, err
}

// predictRouting is the run's Plan hook: the job the planner gets from
// the input's survey, as `sluice run` builds it, and the decision for the
// forced route. It returns the routing, the decision and the predicted
// range of the route taken. k is the simulator's time scale: the batch
// path's poll intervals run on the simulator's clock, like the lanes.
func predictRouting(w plan.World, forced string, s jsonl.Summary, pending int, k float64) (route.Routing, plan.Decision, plan.Range, error) {
	j := route.JobOf(s, pending)
	switch forced {
	case route.Sync:
		// No batch candidate (MinBatch above N): the decision is the whole
		// job on sync, its lanes, rate and last send included (the latency
		// priority would split a large job).
		d, err := plan.Decide(w, j, plan.Options{Priority: plan.PreferLatency, MinBatch: pending + 1})
		if err != nil {
			return route.Routing{}, d, plan.Range{}, err
		}
		return route.Routing{Route: route.Sync, Why: "forced sync", Predicted: d.SyncWall.Mid}, d, d.SyncWall, nil
	case route.Batch:
		// The cost priority sends everything to batch (MinBatch 1), so the
		// decision's chunk, window and stuck threshold are the batch
		// route's own.
		d, err := plan.Decide(w, j, plan.Options{Priority: plan.PreferCost, MinBatch: 1})
		if err != nil {
			return route.Routing{}, d, plan.Range{}, err
		}
		br, stuck := d.Batch, d.StuckAfter
		if d.Route != plan.RouteBatch {
			run, err := w.SimulateBatch(pending, 0, 0)
			if err != nil {
				return route.Routing{}, d, plan.Range{}, err
			}
			br, stuck = &run, 0
		}
		// As `sluice run` configures the batch path (cmd/sluice/route.go),
		// on the simulator's clock: the stuck floor and the poll intervals
		// ÷ K.
		bc := batch.Config{
			ChunkSize: br.Chunk, WindowByOrg: br.WindowByOrg(), WindowPerOrg: br.MinWindowRequests(), Turnaround: br.MaxTurnaround,
			StuckAfter: max(stuck, time.Duration(float64(batch.MinStuckAfter)/k)),
			PollMin:    time.Duration(float64(batch.DefaultPollMin) / k), PollMax: time.Duration(float64(batch.DefaultPollMax) / k),
		}
		return route.Routing{Route: route.Batch, Why: "forced batch", Predicted: d.BatchWall.Mid, Batch: bc}, d, d.BatchWall, nil
	}
	return route.Routing{}, plan.Decision{}, plan.Range{}, fmt.Errorf("bench: route must be sync or batch, got %q", forced)
}

// PredictSection is the heading WritePredictTable writes and
// ReplaceSection replaces.
const PredictSection = "## Prediction vs measurement"

// WritePredictTable writes the results as the markdown section
// docs/prediction.md holds: a heading, how it was measured, and the table.
func WritePredictTable(w io.Writer, results []PredictResult, command string, when time.Time) {
	fmt.Fprintf(w, "%s\n\n", PredictSection)
	fmt.Fprintf(w, "Measured %s with `%s`.\n", when.UTC().Format("2006-01-02"), command)
	fmt.Fprintf(w, "Each row is one `job.Run` (the code of `sluice run`) of N judge requests\n")
	fmt.Fprintf(w, "(Sonnet 4.5, `max_tokens` 256) against a fresh `sluice sim` child process on\n")
	fmt.Fprintf(w, "the three-org preset at time scale K; the prediction is what `plan.Decide`\n")
	fmt.Fprintf(w, "answered inside that run's Plan hook (`plan.FromModel`, the lanes' probe and\n")
	fmt.Fprintf(w, "ramp timed by answers as the engine times them), for the route the run was\n")
	fmt.Fprintf(w, "forced onto. Measured is the\n")
	fmt.Fprintf(w, "run less the time the planner itself took in the hook (`--route sync` does\n")
	fmt.Fprintf(w, "not plan; the second table shows it). Times are real seconds (× K for API\n")
	fmt.Fprintf(w, "time). A hit is within ±%.0f %%.\n\n", 100*PredictTolerance)
	fmt.Fprintln(w, "| route | N | K | predicted (low–high) | measured | measured ÷ predicted | within ±10 % |")
	fmt.Fprintln(w, "|---|--:|--:|---|--:|--:|:-:|")
	for _, r := range results {
		hit := "no"
		if r.Within() {
			hit = "**yes**"
		}
		fmt.Fprintf(w, "| %s | %s | %g | %s (%s–%s) | %s | %.2f | %s |\n",
			r.Route, commas(r.N), r.TimeScale, fmtSec(r.Predicted.Mid), fmtSec(r.Predicted.Low), fmtSec(r.Predicted.High),
			fmtSec(r.Wall), r.Ratio(), hit)
	}
	fmt.Fprintln(w)
	var syncs, batches []PredictResult
	for _, r := range results {
		if r.Route == route.Sync {
			syncs = append(syncs, r)
		} else {
			batches = append(batches, r)
		}
	}
	if len(syncs) > 0 {
		fmt.Fprintln(w, "Where the sync time goes. The model's wall-clock is T + tail: T when the last")
		fmt.Fprintln(w, "request is sent (the ramp, then the steady rate), the tail the expected wait")
		fmt.Fprintln(w, "for the slowest answer still running (internal/decide/plan/tail.go). The run is timed at its")
		fmt.Fprintln(w, "HTTP transport: the last Messages call's start, counted from the moment the")
		fmt.Fprintln(w, "Plan hook returned (after the survey and the key probes, then the plan")
		fmt.Fprintln(w, "itself), and from it to the end of the run (the last answers and the last")
		fmt.Fprintln(w, "fsync).")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| N | survey + probes / plan | last send T: measured / model | last send → end: measured / model tail | latency mean / max | steady req/s: measured / model | 429s |")
		fmt.Fprintln(w, "|--:|--:|---|---|---|---|--:|")
		for _, r := range syncs {
			steady := "-"
			if r.Steady > 0 {
				steady = fmt.Sprintf("%.0f / %.0f", r.Steady, r.Decision.SyncRate)
			}
			fmt.Fprintf(w, "| %s | %s / %s | %s / %s | %s / %s | %s / %s | %s | %d |\n", commas(r.N), fmtSec(r.Overhead), fmtSec(r.PlanTime),
				fmtSec(r.LastSend), fmtSec(r.Decision.LastSend), fmtSec(r.Tail), fmtSec(r.Predicted.Mid-r.Decision.LastSend),
				fmtSec(r.MeanLatency), fmtSec(r.MaxLatency), steady, r.Limited)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The steady rate is measured between 10 % and 90 % of results durable (N ≥ 10,000);")
		fmt.Fprintln(w, "the model's is the sum over every lane of min(cap ÷ L, RPM, ITPM ÷ in, OTPM ÷ out).")
		fmt.Fprintln(w)
	}
	if len(batches) > 0 {
		fmt.Fprintln(w, "Where the batch time goes. The model's wall-clock is E + O: E when the last")
		fmt.Fprintln(w, "batch's end is seen (the queue simulated; each end seen at the batch path's")
		fmt.Fprintln(w, "next poll of that batch, and only then its window slot reused), O the batch")
		fmt.Fprintln(w, "overhead (5 s of API time for the creates and the last download). The run")
		fmt.Fprintln(w, "is timed at its HTTP transport, from the Plan")
		fmt.Fprintln(w, "hook's return: when the last create returned, and when the last results")
		fmt.Fprintln(w, "download started (its batch's end had been seen). The batch runs poll every")
		fmt.Fprintln(w, "2 s ÷ K, growing ×1.5 to 60 s ÷ K: the real run on the simulator's clock.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| N | batches (chunk × window per org) | last create returned | last end seen E (model) | last download started | download start → end: measured / model O | 429s |")
		fmt.Fprintln(w, "|--:|---|--:|--:|--:|---|--:|")
		for _, r := range batches {
			cw, end, oh := "-", "-", "-"
			if b := r.Decision.Batch; b != nil && len(b.Orgs) > 0 {
				cw = fmt.Sprintf("%d × %d", b.Chunk, b.Orgs[0].Window)
				end, oh = fmtSec(b.End), fmtSec(r.Predicted.Mid-b.End)
			}
			fmt.Fprintf(w, "| %s | %d (%s) | %s | %s | %s | %s / %s | %d |\n", commas(r.N), r.Batches, cw,
				fmtSec(r.Created), end, fmtSec(r.Fetched), fmtSec(r.Wall-r.Overhead-r.Fetched), oh, r.Limited)
		}
		fmt.Fprintln(w)
	}
}

// ReplaceSection returns doc with the section that starts at heading (up
// to the next "## " heading or the end) replaced by section, or section
// appended when doc has no such heading.
func ReplaceSection(doc, heading, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	i := 0
	if !strings.HasPrefix(doc, heading+"\n") {
		j := strings.Index(doc, "\n"+heading+"\n")
		if j < 0 {
			if doc != "" {
				doc = strings.TrimRight(doc, "\n") + "\n\n"
			}
			return doc + section
		}
		i = j + 1
	}
	return doc[:i] + section + rest(doc[i+len(heading)+1:])
}

// rest is what follows a section: from the next "## " heading on,
// preceded by a blank line, or nothing.
func rest(after string) string {
	if strings.HasPrefix(after, "## ") {
		return "\n" + after
	}
	if j := strings.Index(after, "\n## "); j >= 0 {
		return "\n" + after[j+1:]
	}
	return ""
}

func fmtSec(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 100:
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f s", s)
}

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
