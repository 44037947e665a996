package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/judgejob"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// The arms of the judge validation, in the order they run.
const (
	ArmBaselineA = "A"       // sequential 500-request batches, one key
	ArmBaselineB = "B"       // 8,000-request batches, 8 at once, one key
	ArmBaselineC = "C"       // sync, one key, concurrency 50, SDK retries
	ArmLatency   = "latency" // sluice judge --route auto --prefer latency
	ArmCost      = "cost"    // sluice judge --route auto --prefer cost
)

// ValidationArms lists every arm with its description.
var ValidationArms = []struct{ Name, Title string }{
	{ArmBaselineA, "baseline A — sequential 500-request batches on one key"},
	{ArmBaselineB, "baseline B — 8,000-request batches, 8 at once, one key (#658)"},
	{ArmBaselineC, "baseline C — sync on one key, concurrency 50, SDK-style retries"},
	{ArmLatency, "sluice judge --route auto --prefer latency"},
	{ArmCost, "sluice judge --route auto --prefer cost"},
}

// JudgeValidation is the validation of issue #658's workload: N judge calls
// (Sonnet 4.5, 120–400 input and 64–256 output tokens), the old ways
// against sluice, on the three-org simulator.
type JudgeValidation struct {
	Binary string // sluice-bench: the simulator child and the kill arm
	N      int
	Seed   uint64
	Arms   []string // default: every arm
	// Kill also runs the latency arm as a child process, SIGKILLs it at a
	// random point and resumes it.
	Kill bool
	// ScaleCheck, if set, runs that arm again at half its time scale: the
	// simulated wall-clock should not move.
	ScaleCheck string
	// Target is the real time an arm should take (default 75 s); its time
	// scale is chosen for it, within SyncRate.
	Target time.Duration
	// SyncRate caps the Messages calls per real second an arm may need
	// (default 1,000): above it this 2-core machine, not the simulated API,
	// would be the limit.
	SyncRate float64
	Dir      string    // work directory (default: a temporary one)
	Log      io.Writer // the runs' logs
	Progress io.Writer // one line per arm
}

// Point is one step of an arm's timeline: simulated seconds since its
// start, and requests completed by then.
type Point struct {
	Sim  float64 `json:"sim_s"`
	Done int     `json:"done"`
}

// ArmResult is what one arm measured.
type ArmResult struct {
	Arm       string  `json:"arm"`
	Title     string  `json:"title"`
	TimeScale float64 `json:"time_scale"`
	// SimSeconds is the wall-clock in the simulated API's time (real ×
	// time scale): the figure the arms are compared by.
	SimSeconds  float64 `json:"sim_seconds"`
	RealSeconds float64 `json:"real_seconds"`
	// PrepSeconds is the real time before the first send (reading the
	// items, building requests), counted unscaled; SendSeconds the real
	// time from the first send to the end, counted × TimeScale.
	PrepSeconds float64 `json:"prep_seconds"`
	SendSeconds float64 `json:"send_seconds"`
	Items       int     `json:"items"`
	// Done have a verdict (sluice) or a succeeded result (baselines);
	// Lost do not: errored, expired, or failed after the SDK's retries.
	Done int `json:"done"`
	Lost int `json:"lost"`
	// RPM is completed requests per simulated minute.
	RPM     float64 `json:"rpm"`
	Limited int64   `json:"http_429"` // 429s the simulator sent
	Retries int64   `json:"retries"`
	Batches int64   `json:"batches"`
	SyncUSD float64 `json:"sync_usd"`
	// BatchUSD is what the batch route cost (half price).
	BatchUSD float64 `json:"batch_usd"`
	Binding  string  `json:"binding_limit"`
	Route    string  `json:"route,omitempty"`
	// PredictedSeconds is the planner's wall-clock (sluice arms), in
	// simulated seconds.
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	Timeline         []Point `json:"timeline"`
}

// KillResult is the latency arm run with a SIGKILL and a resume.
type KillResult struct {
	TimeScale   float64 `json:"time_scale"`
	Items       int     `json:"items"`
	AtKill      int     `json:"results_durable_at_kill"`
	VerdictRows int     `json:"verdict_rows"`
	Unique      int     `json:"unique_ids"`
	// DuplicatesAtKill and Duplicates count results rows beyond one per
	// id in the results file as the kill left it, and after the resume.
	DuplicatesAtKill int   `json:"duplicate_rows_at_kill"`
	Duplicates       int   `json:"duplicate_rows"`
	Missing          int   `json:"missing"`
	BilledTwice      int64 `json:"billed_twice"` // bodies the simulator answered more than once
	// SimSeconds is kill + resume, end to end; Extra is that less the
	// uninterrupted latency arm's (when it ran).
	SimSeconds   float64 `json:"sim_seconds"`
	ExtraSeconds float64 `json:"extra_sim_seconds"`
	InFlightCap  int     `json:"in_flight_cap"` // requests that could be in flight at the kill
}

// JudgeValidationResult is the whole validation.
type JudgeValidationResult struct {
	N       int         `json:"n"`
	Model   string      `json:"model"`
	Started time.Time   `json:"started"`
	Arms    []ArmResult `json:"arms"`
	Kill    *KillResult `json:"kill,omitempty"`
	// ScaleCheck is the ScaleCheck arm at half its time scale.
	ScaleCheck *ArmResult `json:"scale_check,omitempty"`
	Machine    string     `json:"machine"`
	Command    string     `json:"command"`
	Duration   float64    `json:"real_seconds"`
}

func (b *JudgeValidation) defaults() {
	if b.N == 0 {
		b.N = 141600
	}
	if b.Target == 0 {
		b.Target = 75 * time.Second
	}
	if b.SyncRate == 0 {
		b.SyncRate = 1000
	}
	if len(b.Arms) == 0 {
		for _, a := range ValidationArms {
			b.Arms = append(b.Arms, a.Name)
		}
	}
	if b.Log == nil {
		b.Log = io.Discard
	}
	if b.Progress == nil {
		b.Progress = io.Discard
	}
}

// ValidationWorld is the world every arm runs in: the three-org preset (its
// batch model reproduces the old observations: 500-request batches done in
// about 5 minutes, batches above 5,000 requests starved for 8 hours), judge
// verdicts on, answers of 64–256 tokens.
func ValidationWorld(k float64) sim.Config {
	cfg := sim.Default()
	cfg.TimeScale = k
	cfg.Verdicts.Enabled = true
	cfg.Output = sim.OutputModel{Min: 64, Max: 256}
	return cfg
}

// The old ways' settings.
const (
	oldPoll        = 30 * time.Second // how often the old dispatcher polled a batch (simulated)
	oldSyncWorkers = 50
	sdkMaxRetries  = 2 // the official SDKs' default
)

// estimate is a rough simulated duration of an arm, to choose its time
// scale (not a prediction: the planner makes those).
func estimate(arm string, n int) (seconds, syncRate float64) {
	bm := sim.Default().Batch
	admit := func(size int) float64 {
		return bm.AdmissionBase.D().Seconds() + float64(size)*bm.AdmissionPerRequest.D().Seconds()
	}
	const latency = 3.0 // s: TTFT 0.5 + 160 tokens at 64/s
	switch arm {
	case ArmBaselineA:
		chunks := math.Ceil(float64(n) / 500)
		return chunks*(admit(500)+oldPoll.Seconds()/2) + float64(n)/bm.ProcessingRate, 0
	case ArmBaselineB:
		waves := math.Ceil(float64(n) / 8000 / 8)
		return waves*(admit(8000)+bm.StarveFor.D().Seconds()) + float64(n)/bm.ProcessingRate, 0
	case ArmBaselineC:
		r := oldSyncWorkers / latency
		return float64(n) / r, r
	case ArmLatency:
		r := 3 * 100 / latency
		return float64(n)/r + 30, r
	case ArmCost:
		return float64(n)/(3*bm.ProcessingRate) + admit(2000), 0
	}
	return 0, 0
}

// timeScale picks an arm's time scale: Target of real time for its
// estimated simulated duration, no more Messages calls per real second
// than SyncRate, and at least 1.
func (b *JudgeValidation) timeScale(arm string) float64 {
	est, rate := estimate(arm, b.N)
	k := est / b.Target.Seconds()
	if rate > 0 {
		k = min(k, b.SyncRate/rate)
	}
	return math.Max(1, math.Round(k))
}

// Run runs the arms one after another, each in a fresh simulator.
func (b *JudgeValidation) Run(ctx context.Context) (*JudgeValidationResult, error) {
	b.defaults()
	started := time.Now()
	if b.Dir == "" {
		dir, err := os.MkdirTemp("", "sluice-judge-validation-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		b.Dir = dir
	}
	items := filepath.Join(b.Dir, "items.jsonl")
	if err := (workload.Judge{N: b.N, Seed: b.Seed}).WriteItemsFile(items); err != nil {
		return nil, err
	}
	res := &JudgeValidationResult{N: b.N, Model: judge.DefaultModel, Started: started.UTC()}
	for _, name := range b.Arms {
		k := b.timeScale(name)
		fmt.Fprintf(b.Progress, "arm %s: time scale %g …\n", name, k)
		r, err := b.runArm(ctx, name, items, k)
		if err != nil {
			return res, fmt.Errorf("arm %s: %w", name, err)
		}
		fmt.Fprintf(b.Progress, "arm %s: %d of %d done in %s simulated (%.0f s real), %d lost\n",
			name, r.Done, r.Items, fmtSimDur(r.SimSeconds), r.RealSeconds, r.Lost)
		res.Arms = append(res.Arms, r)
	}
	if b.Kill {
		k := b.timeScale(ArmLatency)
		fmt.Fprintf(b.Progress, "kill and resume: time scale %g …\n", k)
		kr, err := b.runKill(ctx, items, k)
		if err != nil {
			return res, fmt.Errorf("kill arm: %w", err)
		}
		for _, a := range res.Arms {
			if a.Arm == ArmLatency {
				kr.ExtraSeconds = kr.SimSeconds - a.SimSeconds
			}
		}
		res.Kill = kr
		fmt.Fprintf(b.Progress, "kill and resume: %d verdict rows, %d duplicates, %d missing, %d billed twice\n", kr.VerdictRows, kr.Duplicates, kr.Missing, kr.BilledTwice)
	}
	if b.ScaleCheck != "" {
		k := math.Max(1, math.Round(b.timeScale(b.ScaleCheck)/2))
		fmt.Fprintf(b.Progress, "time-scale check: arm %s at %g …\n", b.ScaleCheck, k)
		r, err := b.runArm(ctx, b.ScaleCheck, items, k)
		if err != nil {
			return res, fmt.Errorf("time-scale check: %w", err)
		}
		res.ScaleCheck = &r
	}
	res.Duration = time.Since(started).Seconds()
	return res, nil
}

func (b *JudgeValidation) runArm(ctx context.Context, name, items string, k float64) (ArmResult, error) {
	r := ArmResult{Arm: name, TimeScale: k, Items: b.N}
	for _, a := range ValidationArms {
		if a.Name == name {
			r.Title = a.Title
		}
	}
	dir, err := os.MkdirTemp(b.Dir, "arm-"+name+"-")
	if err != nil {
		return r, err
	}
	cfg := ValidationWorld(k)
	sp, pool, err := StartSimPool(ctx, b.Binary, cfg, dir)
	if err != nil {
		return r, err
	}
	defer sp.Stop()
	// The clock: preparation (reading items, building requests) is CPU
	// work that takes the same real time against the real API, so it
	// counts unscaled; from the first send on, real time × K.
	tl := newTimeline(k)
	results := filepath.Join(dir, "results.jsonl")
	switch name {
	case ArmBaselineA, ArmBaselineB:
		chunk, window := 500, 1
		if name == ArmBaselineB {
			chunk, window = 8000, 8
		}
		bodies, err := batchBodies(items, chunk)
		if err != nil {
			return r, err
		}
		out, err := newResultsFile(results)
		if err != nil {
			return r, err
		}
		key := poolKey(pool, keys.LabelBatch) // the old system's batch key
		c := client.New(client.Config{BaseURL: sp.Base, MaxConns: 64})
		tl.begin()
		bs, err := oldBatches{c: c, key: key, window: window, poll: scale(oldPoll, k), tl: tl, out: out}.run(ctx, bodies)
		tl.stop()
		if cerr := out.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return r, err
		}
		r.BatchUSD, r.Batches = bs.usd, bs.batches
		if name == ArmBaselineA {
			r.Binding = "one batch at a time: each waits its queue turnaround (≈5 min per 500)"
		} else {
			r.Binding = "batches above 5,000 requests starve 8 h in the queue; 8 on one org share its processing rate"
		}
	case ArmBaselineC:
		reqs, err := readRequests(items)
		if err != nil {
			return r, err
		}
		out, err := newResultsFile(results)
		if err != nil {
			return r, err
		}
		c := client.New(client.Config{BaseURL: sp.Base, MaxConns: oldSyncWorkers + 8})
		tl.begin()
		ss := oldSync{c: c, key: poolKey(pool, keys.LabelHighPrio), workers: oldSyncWorkers, k: k, tl: tl, seed: b.Seed, out: out}.run(ctx, reqs)
		tl.stop()
		if err := out.close(); err != nil {
			return r, err
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.SyncUSD, r.Retries = ss.usd, ss.retries
		r.Binding = fmt.Sprintf("fixed concurrency %d on one key: %d ÷ mean latency", oldSyncWorkers, oldSyncWorkers)
	case ArmLatency, ArmCost:
		prefer := "latency"
		if name == ArmCost {
			prefer = "cost"
		}
		sr, err := SluiceArm{Base: sp.Base, Sim: cfg, Items: items, Output: filepath.Join(dir, "verdicts.jsonl"),
			Prefer: prefer, Log: b.Log, OnDurable: tl.observe, OnSend: tl.begin}.Run(ctx)
		tl.stop()
		if err != nil {
			return r, err
		}
		rep := sr.Report
		r.Done = sr.Summary.Groups[0].Classes[judge.OK]
		r.SyncUSD, r.BatchUSD = rep.Cost.Total.SyncUSD, rep.Cost.Total.BatchUSD
		r.Retries = rep.Retries.RateLimited + rep.Retries.Overloaded + rep.Retries.Failed
		r.Route, r.Binding = rep.Route, rep.BindingLimit
		// The planner saw the scaled world: its wall-clock × K is in the
		// simulated API's time (it models sending, not preparation).
		r.PredictedSeconds = sr.Predicted.Seconds() * k
	}
	if name != ArmLatency && name != ArmCost {
		// Like for like with the sluice arms: done means an ok verdict.
		if r.Done, err = okVerdicts(results); err != nil {
			return r, err
		}
	}
	r.PrepSeconds, r.SendSeconds = tl.prep.Seconds(), tl.sending().Seconds()
	r.RealSeconds = r.PrepSeconds + r.SendSeconds
	r.SimSeconds = r.PrepSeconds + r.SendSeconds*k
	r.Lost = r.Items - r.Done
	if r.SimSeconds > 0 {
		r.RPM = float64(r.Done) / (r.SimSeconds / 60)
	}
	r.Timeline = tl.points()
	st, err := sp.Stats()
	if err != nil {
		return r, err
	}
	for _, o := range st.Orgs {
		for _, p := range o.Pools {
			r.Limited += p.RateLimited
		}
		if name == ArmLatency || name == ArmCost {
			r.Batches += o.Batches.Created
		}
	}
	return r, nil
}

// okVerdicts classifies a results file with the default rubric and counts
// the ok verdicts (after the clock stops: the old systems parsed too, but
// that is not what is compared).
func okVerdicts(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rubric := judge.DefaultRubric()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var rec api.ResultRecord
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		if judge.Classify(rec, rubric, false).Class == judge.OK {
			n++
		}
	}
	return n, sc.Err()
}

// resultsFile is a baseline's results, one Batch results line per answer,
// written as they come (the old systems kept theirs too).
type resultsFile struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func newResultsFile(path string) (*resultsFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &resultsFile{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (r *resultsFile) write(line []byte) {
	r.mu.Lock()
	r.w.Write(line)
	r.w.WriteByte('\n')
	r.mu.Unlock()
}

func (r *resultsFile) close() error {
	if err := r.w.Flush(); err != nil {
		r.f.Close()
		return err
	}
	return r.f.Close()
}

func poolKey(p *keys.Pool, label string) *keys.Key {
	for _, k := range p.Keys() {
		if k.Label() == label {
			return k
		}
	}
	return p.Keys()[0]
}

func scale(d time.Duration, k float64) time.Duration { return time.Duration(float64(d) / k) }

// timeline records completions. Time before begin is preparation,
// counted as is; after it, real time × k (the simulated API's time).
type timeline struct {
	k       float64
	created time.Time
	mu      sync.Mutex
	prep    time.Duration
	start   time.Time // zero until begin
	end     time.Time
	pts     []Point
	done    atomic.Int64
}

func newTimeline(k float64) *timeline { return &timeline{k: k, created: time.Now()} }

// begin marks the first send.
func (t *timeline) begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		t.start = time.Now()
		t.prep = t.start.Sub(t.created)
	}
}

// stop marks the end.
func (t *timeline) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.end.IsZero() {
		t.end = time.Now()
	}
}

// add counts n more completions.
func (t *timeline) add(n int) { t.observe(t.done.Add(int64(n))) }

// observe records that total requests are complete.
func (t *timeline) observe(total int64) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		return
	}
	p := Point{Sim: t.prep.Seconds() + now.Sub(t.start).Seconds()*t.k, Done: int(total)}
	if n := len(t.pts); n > 1 && p.Sim-t.pts[n-2].Sim < 1 && t.pts[n-1].Sim-t.pts[n-2].Sim < 1 {
		t.pts[n-1] = p // thin bursts to about one point per simulated second
		return
	}
	t.pts = append(t.pts, p)
}

// sending is the real time from the first send to stop.
func (t *timeline) sending() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start.IsZero() {
		return 0
	}
	end := t.end
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(t.start)
}

func (t *timeline) points() []Point {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.pts)
}

// request is one item's judge request, as sluice judge builds it.
type request struct {
	id     string
	params []byte
}

// readRequests builds every item's request with the default rubric, so the
// baselines send exactly what the sluice arms send.
func readRequests(items string) ([]request, error) {
	f, err := os.Open(items)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []request
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	r := judge.DefaultRubric()
	for sc.Scan() {
		var it judge.Item
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return nil, err
		}
		p, err := judge.Build(it, r, judge.DefaultModel, judge.DefaultMaxTokens, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, request{it.ID, p})
	}
	return out, sc.Err()
}

// batchBodies reads the items and builds the create body of every batch
// of chunk requests, before the clock starts.
func batchBodies(items string, chunk int) ([][]byte, error) {
	reqs, err := readRequests(items)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for lo := 0; lo < len(reqs); lo += chunk {
		body := []byte(`{"requests":[`)
		for i, r := range reqs[lo:min(lo+chunk, len(reqs))] {
			if i > 0 {
				body = append(body, ',')
			}
			line, _ := json.Marshal(api.BatchRequest{CustomID: r.id, Params: r.params})
			body = append(body, line...)
		}
		out = append(out, append(body, "]}"...))
	}
	return out, nil
}

// oldBatches is the old system's batch path: fixed-size batches on one
// key, window of them in flight, each polled until it ends.
type oldBatches struct {
	c      *client.Client
	key    *keys.Key
	window int
	poll   time.Duration
	tl     *timeline
	out    *resultsFile
}

type batchStats struct {
	usd     float64
	batches int64
}

func (o oldBatches) run(ctx context.Context, bodies [][]byte) (batchStats, error) {
	var (
		st     batchStats
		mu     sync.Mutex
		ledger cost.Ledger
		wg     sync.WaitGroup
		first  error
	)
	sem := make(chan struct{}, o.window)
	for _, body := range bodies {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return st, ctx.Err()
		}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := o.one(ctx, body, &ledger)
			mu.Lock()
			defer mu.Unlock()
			st.batches++
			if err != nil && first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	st.usd = ledger.Total()
	return st, first
}

// one creates one batch, polls it to its end and keeps its results.
func (o oldBatches) one(ctx context.Context, body []byte, ledger *cost.Ledger) error {
	out := o.c.Do(ctx, o.key, "POST", "/v1/messages/batches", body)
	if out.Status != 200 {
		return fmt.Errorf("batch create: status %d: %s", out.Status, out.Body)
	}
	var mb api.MessageBatch
	if err := json.Unmarshal(out.Body, &mb); err != nil {
		return err
	}
	for mb.ProcessingStatus != api.BatchEnded {
		select {
		case <-time.After(o.poll):
		case <-ctx.Done():
			return ctx.Err()
		}
		out := o.c.Do(ctx, o.key, "GET", "/v1/messages/batches/"+mb.ID, nil)
		if out.Status == 404 {
			continue // read-after-write: not visible yet
		}
		if out.Status != 200 {
			return fmt.Errorf("batch retrieve: status %d: %s", out.Status, out.Body)
		}
		if err := json.Unmarshal(out.Body, &mb); err != nil {
			return err
		}
	}
	resp, err := o.c.Stream(ctx, o.key, "/v1/messages/batches/"+mb.ID+"/results", "application/binary")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("batch results: status %d", resp.StatusCode)
	}
	done := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var line struct {
			Result struct {
				Type    string `json:"type"`
				Message *struct {
					Model string    `json:"model"`
					Usage api.Usage `json:"usage"`
				} `json:"message"`
			} `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		o.out.write(sc.Bytes())
		if line.Result.Type == api.ResultSucceeded && line.Result.Message != nil {
			ledger.Add(o.key.Label(), line.Result.Message.Model, line.Result.Message.Usage, true)
			done++
		}
	}
	o.tl.add(done)
	return sc.Err()
}

// oldSync is the old sync judge path: one key, a fixed number of workers,
// each call retried the official SDKs' way (2 retries; retry-after when
// given, else 0.5 s × 2^n up to 8 s with jitter), on the simulator's clock.
type oldSync struct {
	c       *client.Client
	key     *keys.Key
	workers int
	k       float64
	tl      *timeline
	seed    uint64
	out     *resultsFile
}

type syncStats struct {
	usd     float64
	retries int64
}

func (o oldSync) run(ctx context.Context, reqs []request) syncStats {
	var (
		st      syncStats
		retries atomic.Int64
		ledger  cost.Ledger
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for w := range o.workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(o.seed, uint64(w)))
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) || ctx.Err() != nil {
					return
				}
				for attempt := 0; ; attempt++ {
					out := o.c.Do(ctx, o.key, "POST", "/v1/messages", reqs[i].params)
					if out.Status == 200 {
						ledger.Add(o.key.Label(), judge.DefaultModel, out.Usage, false)
						line, _ := json.Marshal(api.ResultRecord{CustomID: reqs[i].id,
							Result: api.SucceededResult(out.Body)})
						o.out.write(line)
						o.tl.add(1)
						break
					}
					retryable := out.Status == 0 || out.Status == 408 || out.Status == 409 || out.Status == 429 || out.Status >= 500
					if !retryable || attempt >= sdkMaxRetries {
						break // lost: the old path recorded the error
					}
					retries.Add(1)
					wait := time.Duration(math.Min(0.5*math.Pow(2, float64(attempt)), 8) * (1 - 0.25*rng.Float64()) * float64(time.Second))
					wait = scale(wait, o.k)
					if out.HasRetryAfter && out.RetryAfter <= scale(60*time.Second, o.k) {
						wait = out.RetryAfter // the simulator scales its own hints
					}
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return
					}
				}
			}
		})
	}
	wg.Wait()
	st.retries, st.usd = retries.Load(), ledger.Total()
	return st
}

// SluiceArm is one `sluice judge --route auto` run against a simulator,
// configured as the command configures it, with the engine's clocks on the
// simulator's time scale.
type SluiceArm struct {
	Base      string
	Sim       sim.Config
	Items     string
	Output    string
	Prefer    string
	Log       io.Writer
	OnDurable func(total int64)
	// OnSend, if set, is called once sending starts (the route is chosen).
	OnSend func()
}

// SluiceArmResult is the judge job's result and the planner's prediction
// (in real time at the simulator's time scale).
type SluiceArmResult struct {
	*judgejob.Result
	Predicted time.Duration
}

// Run runs the arm.
func (a SluiceArm) Run(ctx context.Context) (*SluiceArmResult, error) {
	pool, err := simtest.Pool(a.Sim)
	if err != nil {
		return nil, err
	}
	logw := a.Log
	if logw == nil {
		logw = io.Discard
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	k := a.Sim.TimeScale
	world := plan.FromModel(a.Sim.Model(), nil)
	world.Name = "three-org"
	var predicted time.Duration
	cfg := judgejob.Config{Output: a.Output, Engine: job.Options{
		Logger: log, Redact: pool.Redact, OnDurable: a.OnDurable,
		Dispatch: dispatch.Config{Client: client.New(client.Config{BaseURL: a.Base, MaxConns: 100*len(a.Sim.Orgs) + 64}),
			Keys: pool.Keys(), Logger: log},
		Plan: route.Planner(route.Options{Route: "auto", Prefer: a.Prefer, TimeScale: k, Log: log,
			World: func(plan.Job) (plan.World, error) { return world, nil },
			OnDecision: func(d plan.Decision) {
				predicted = d.Wall.Mid
				if a.OnSend != nil {
					a.OnSend()
				}
			}}),
	}}
	res, err := judgejob.RunFile(ctx, a.Items, cfg)
	if err != nil {
		return nil, err
	}
	if res.Pending > 0 {
		return nil, fmt.Errorf("bench: %d items without a verdict", res.Pending)
	}
	return &SluiceArmResult{Result: res, Predicted: predicted}, nil
}

// fmtSimDur writes a duration in seconds for a reader: 41.5 s, 7m 05s,
// 25h 36m.
func fmtSimDur(s float64) string {
	switch {
	case s >= 3600:
		m := int(math.Round(s / 60))
		return fmt.Sprintf("%dh %02dm", m/60, m%60)
	case s >= 60:
		t := int(math.Round(s))
		return fmt.Sprintf("%dm %02ds", t/60, t%60)
	}
	return fmt.Sprintf("%.1f s", s)
}

// sanitize keeps a string on one table line.
func sanitize(s string) string { return strings.ReplaceAll(s, "|", "/") }

// ArmChildCommand is the hidden subcommand the kill arm runs as a child
// process (cmd/sluice-bench wires it to SluiceArm).
const ArmChildCommand = "judge-validation-arm"

func (b *JudgeValidation) runKill(ctx context.Context, items string, k float64) (*KillResult, error) {
	kr := &KillResult{TimeScale: k, Items: b.N, InFlightCap: 3 * dispatch.DefaultCaps[api.FamilySonnet]}
	dir, err := os.MkdirTemp(b.Dir, "arm-kill-")
	if err != nil {
		return nil, err
	}
	cfg := ValidationWorld(k)
	sp, err := StartSim(ctx, b.Binary, cfg, dir)
	if err != nil {
		return nil, err
	}
	defer sp.Stop()
	out := filepath.Join(dir, "verdicts.jsonl")
	args := []string{ArmChildCommand, "--base", sp.Base, "--items", items, "--out", out,
		"--time-scale", fmt.Sprint(k), "--prefer", "latency"}
	rng := rand.New(rand.NewPCG(b.Seed, 658))
	killAt := int(float64(b.N) * (0.25 + 0.5*rng.Float64()))
	start := time.Now()
	child := func() *exec.Cmd {
		c := exec.CommandContext(ctx, b.Binary, args...)
		c.Stdout, c.Stderr = b.Log, b.Log
		return c
	}
	first := child()
	if err := first.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	lc := &lineCounter{path: out + ".results.jsonl"}
	for {
		n, err := lc.count()
		if err != nil {
			first.Process.Kill()
			return nil, err
		}
		if n >= killAt {
			first.Process.Kill() // SIGKILL: no chance to clean up
			<-exited
			kr.AtKill = n
			rows, unique, err := countIDs(out+".results.jsonl", "custom_id")
			if err != nil {
				return nil, err
			}
			kr.DuplicatesAtKill = rows - unique
			break
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the run ended before the kill point (%d of %d rows): %v", n, killAt, err)
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			first.Process.Kill()
			return nil, ctx.Err()
		}
	}
	if err := child().Run(); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	kr.SimSeconds = time.Since(start).Seconds() * k
	rows, unique, err := countIDs(out+".results.jsonl", "custom_id")
	if err != nil {
		return nil, err
	}
	kr.Duplicates = rows - unique
	kr.VerdictRows, kr.Unique, err = countIDs(out, "id")
	if err != nil {
		return nil, err
	}
	kr.Missing = b.N - kr.Unique
	st, err := sp.Stats()
	if err != nil {
		return nil, err
	}
	kr.BilledTwice = st.Bodies.ExtraAnswers
	return kr, nil
}

// lineCounter counts a growing file's complete lines, reading only what
// was appended since the last call.
type lineCounter struct {
	path string
	off  int64
	n    int
}

func (l *lineCounter) count() (int, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for {
		m, err := f.Read(buf)
		for _, c := range buf[:m] {
			l.off++
			if c == '\n' {
				l.n++
			}
		}
		if err == io.EOF {
			return l.n, nil
		}
		if err != nil {
			return l.n, err
		}
	}
}

// countIDs counts the JSON lines of the file at path with a non-empty
// string field, and the distinct values of it.
func countIDs(path, field string) (rows, unique int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	seen := map[string]struct{}{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		var id string
		if json.Unmarshal(m[field], &id) != nil || id == "" {
			continue
		}
		rows++
		seen[id] = struct{}{}
	}
	return rows, len(seen), sc.Err()
}
