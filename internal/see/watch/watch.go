// Package watch samples a running job (or proxy) into its history: once a
// second it reads what the engine already exposes — the dispatcher's
// Snapshot, the batch path's Stats, the cost ledger, the durable count,
// the keys' health — appends a point to the history file, and keeps the
// Timeline the live page reads and the status /api/status and `sluice
// status` print. It is the run's job.Watcher: the engine's events and
// answers come to it (docs/see.md).
package watch

import (
	"encoding/json"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/event"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/see/history"
	"github.com/sluice-dev/sluice/internal/see/metrics"
	"github.com/sluice-dev/sluice/keys"
)

// The history's column counts mirror the engine's.
var (
	_ [history.NumWaits - int(lane.NumWaits)]struct{}
	_ [int(lane.NumWaits) - history.NumWaits]struct{}
	_ [history.NumDims - int(budget.NumDims)]struct{}
	_ [int(budget.NumDims) - history.NumDims]struct{}
)

// Config configures a Watch.
type Config struct {
	// Path is the history file ("": kept in memory only).
	Path string
	// Cmd names what is watched: run, judge or proxy.
	Cmd string
	// Interval between samples (default 1 s).
	Interval time.Duration
	// History configures the history file (its clock is Now).
	History history.Options
	// Now reads the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Watch records one process's run. Create with New; the run calls Start
// (through job.Options.Watch, or directly for the proxy), then Finish.
type Watch struct {
	cfg     Config
	reg     *prometheus.Registry
	answers *metrics.Answers

	mu       sync.Mutex
	live     *job.Live
	w        *history.Writer
	tl       *history.Timeline
	compacts int
	lanes    []history.LaneID // the current segment's lane columns
	keys     []*keys.Key
	keyState map[*keys.Key]string
	pending  []history.Event // before the history opened
	phase    string
	started  time.Time
	routing  *history.Event // the routing in force (the first, or the last re-plan applied)
	report   *history.Report
	err      error // the history's first error, logged once

	stop chan struct{}
	wg   sync.WaitGroup
}

// Phases of a watched run.
const (
	PhasePreparing = "preparing" // reading the input, discovering keys, planning
	PhaseRunning   = "running"
	PhaseEnded     = "ended"
)

// New returns a Watch in the preparing phase, with its metrics registry
// (the Go runtime's, the process's, the answers' histograms and, once
// started, the lanes').
func New(cfg Config) *Watch {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.History.Now == nil {
		cfg.History.Now = cfg.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watch{cfg: cfg, reg: prometheus.NewRegistry(), tl: history.NewTimeline(), keyState: map[*keys.Key]string{},
		phase: PhasePreparing, started: cfg.Now(), stop: make(chan struct{})}
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w.answers = metrics.NewAnswers(w.reg)
	w.reg.MustRegister(jobCollector{w})
	return w
}

// Registry is the process's metrics registry (served on /metrics).
func (w *Watch) Registry() *prometheus.Registry { return w.reg }

// Start implements job.Watcher: the history opens (a new segment) and
// sampling begins.
func (w *Watch) Start(l job.Live) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live != nil {
		return
	}
	w.live = &l
	w.keys = append(w.keys, l.Keys...)
	for _, k := range l.Keys {
		w.keyState[k] = keyState(k)
	}
	w.phase = PhaseRunning
	if l.Snapshot != nil {
		w.reg.MustRegister(metrics.NewLanes(l.Snapshot))
	}
	w.openLocked(history.Run{Cmd: w.cfg.Cmd, Total: l.Total, Todo: l.Todo, Done0: l.AlreadyDone, MaxCost: l.MaxCost})
	w.wg.Go(w.loop)
}

// openLocked opens the history with run and writes the events that came
// before. Requires w.mu.
func (w *Watch) openLocked(run history.Run) {
	run.T = history.Millis(w.cfg.Now())
	run.PID = pid
	run.K, run.V = history.KindRun, history.Version
	if w.cfg.Path != "" {
		hw, err := history.Open(w.cfg.Path, run, w.cfg.History)
		if err != nil {
			w.fail(err)
		} else {
			w.w = hw
			// What an earlier process recorded: the timeline continues it.
			if tl, err := history.FromLines(hw.Lines()); err == nil {
				w.tl = tl
			}
		}
	}
	if w.w == nil {
		run.Seg = len(w.tl.Segments) + 1
		run.Cols = history.Cols
		w.tl.AddRun(run)
	}
	for _, e := range w.pending {
		w.appendLocked(e)
		w.tl.Events = append(w.tl.Events, e)
	}
	w.pending = nil
}

// fail logs the history's first error: the run goes on without it.
func (w *Watch) fail(err error) {
	if w.err == nil {
		w.err = err
		w.cfg.Logger.Warn("the run's history is not recorded any more (the run goes on)", "err", err)
	}
}

// appendLocked writes rec to the history file, if there is one.
func (w *Watch) appendLocked(rec any) {
	if w.w == nil {
		return
	}
	if err := w.w.Append(rec); err != nil {
		w.fail(err)
		w.w = nil
	}
}

// Record implements event.Recorder (job.Watcher).
func (w *Watch) Record(e event.Event) {
	if e.At.IsZero() {
		e.At = w.cfg.Now()
	}
	he := history.Event{K: history.KindEvent, T: history.Millis(e.At), Kind: e.Kind, State: e.State, Lane: e.Lane, ID: e.ID,
		Batch: e.Batch, N: e.N, Why: e.Why, Route: e.Route, Share: e.Share,
		Pred: e.Predicted.Seconds(), Low: e.PredLow.Seconds(), High: e.PredHigh.Seconds()}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.Kind == event.Route || (e.Kind == event.Replan && e.State == "applied") {
		w.routing = &he
	}
	if w.live == nil && w.w == nil {
		w.pending = append(w.pending, he)
		return
	}
	w.appendLocked(he)
	w.tl.Events = append(w.tl.Events, he)
}

// Answered implements job.Watcher: a sync answer's latency and queue wait
// go to the histograms.
func (w *Watch) Answered(res dispatch.Result, batchID string) {
	if batchID != "" || res.Request == nil {
		return
	}
	w.answers.Observe(res.Org, string(api.PoolOf(res.Request.Model)), res.Latency.Seconds(), res.Queued.Seconds())
}

// KeysJoined implements job.Watcher.
func (w *Watch) KeysJoined(ks []*keys.Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range ks {
		if _, ok := w.keyState[k]; !ok {
			w.keys = append(w.keys, k)
			w.keyState[k] = keyState(k)
		}
	}
}

// SetKeys replaces the keys watched (the proxy's pool after a rotation).
func (w *Watch) SetKeys(ks []*keys.Key) { w.KeysJoined(ks) }

// keyState names a key's health: dead, retired, suspect or live.
func keyState(k *keys.Key) string {
	switch dead, _ := k.Dead(); {
	case dead:
		return "dead"
	case k.Retired():
		return "retired"
	case k.Suspect(keys.AllPools):
		return "suspect"
	}
	return "live"
}

func (w *Watch) loop() {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.Sample()
		}
	}
}

// Sample takes one sample now (the loop's tick; tests call it).
func (w *Watch) Sample() {
	w.mu.Lock()
	l := w.live
	w.mu.Unlock()
	if l == nil {
		return
	}
	now := w.cfg.Now()
	p := history.Point{K: history.KindPoint, T: history.Millis(now)}
	var lanes []dispatch.LaneView
	if l.Snapshot != nil {
		_, lanes = l.Snapshot()
	}
	if l.Durable != nil {
		p.Done = int64(l.AlreadyDone) + l.Durable()
	}
	if l.Cost != nil {
		c := l.Cost().Total
		p.Cost = [3]float64{c.USD, c.SyncUSD, c.BatchUSD}
		p.Unpriced = c.UnknownModelRequests
		p.Tok = [4]int64{c.Tokens.Input, c.Tokens.Output, c.Tokens.CacheWrite5m + c.Tokens.CacheWrite1h, c.Tokens.CacheRead}
	}
	if l.Batch != nil {
		if b, ok := l.Batch(); ok {
			inflight := 0
			for _, n := range b.InFlight {
				inflight += n
			}
			p.B = [5]int64{b.Submitted, b.Results, b.Rerouted, int64(b.Pending), int64(inflight)}
		}
	}
	ids := make([]history.LaneID, len(lanes))
	p.L = make([][]float64, len(lanes))
	for i := range lanes {
		ids[i] = history.LaneID{Org: lanes[i].Org, Pool: string(lanes[i].Pool)}
		p.L[i] = laneRow(&lanes[i])
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if !sameLanes(ids, w.lanes) {
		w.lanes = ids
		rec := history.Lanes{K: history.KindLanes, T: p.T, Lanes: ids}
		w.appendLocked(rec)
		w.tl.AddLanes(rec)
	}
	for _, k := range w.keys {
		if s := keyState(k); s != w.keyState[k] {
			w.keyState[k] = s
			e := history.Event{K: history.KindEvent, T: p.T, Kind: event.Key, State: s, ID: k.String(), Lane: k.Org()}
			w.appendLocked(e)
			w.tl.Events = append(w.tl.Events, e)
		}
	}
	w.appendLocked(p)
	w.tl.AddPoint(p)
	if w.w != nil && w.w.Compactions() != w.compacts {
		// The file was downsampled: so is the page's timeline.
		w.compacts = w.w.Compactions()
		w.tl.Retain(w.w.PointTimes())
	}
}

func sameLanes(a, b []history.LaneID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// laneRow is one lane's columns (history.Col*).
func laneRow(v *dispatch.LaneView) []float64 {
	r := make([]float64, history.NumCols)
	r[history.ColSent], r[history.ColOK] = float64(v.Attempts), float64(v.OK)
	r[history.Col429], r[history.Col529], r[history.Col5xx] = float64(v.RateLimited), float64(v.Overloaded), float64(v.Failed)
	r[history.ColIn], r[history.ColOut] = float64(v.InputTokens), float64(v.OutputTokens)
	r[history.ColCacheW], r[history.ColCacheR] = float64(v.CacheWriteTokens), float64(v.CacheReadTokens)
	r[history.ColInFlight], r[history.ColLimit], r[history.ColCap] = float64(v.State.InFlight), float64(v.State.Limit), float64(v.State.Cap)
	r[history.ColDead], r[history.ColPaused] = b2f(v.Dead), b2f(v.State.Paused)
	for i, d := range v.State.Stats.Waited {
		r[history.ColWait0+i] = float64(d.Milliseconds())
	}
	for i, b := range v.State.Buckets {
		if !b.Known {
			continue
		}
		c := history.ColBucket0 + i*history.BucketCols
		r[c+history.BucketLimit] = math.Round(b.Limit)
		r[c+history.BucketDepth] = math.Round(b.Depth)
		r[c+history.BucketLevel] = math.Round(b.Level)
		r[c+history.BucketLowered] = math.Round(b.Lowered)
	}
	return r
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Finish ends the recording: a last sample, the run's report (rep, and a
// judge's summary; either may be nil) and how it ended (status) appended,
// the history compacted and closed. A run that never started (nothing to
// do, invalid input) still gets a segment, with its report — unless every
// request was already done, when the history is left as it was (Reported
// then says false).
func (w *Watch) Finish(rep *job.Report, judgeSummary any, status string) error {
	w.mu.Lock()
	started := w.live != nil
	w.mu.Unlock()
	if started {
		close(w.stop)
		w.wg.Wait()
		w.Sample()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !started && (rep == nil || rep.Requests.Total > 0 && rep.Requests.AlreadyDone >= rep.Requests.Total) {
		// Stopped before it began (invalid input, no key), or a finished
		// run run again: nothing to record, and the earlier report stands.
		w.phase = PhaseEnded
		return nil
	}
	if !started {
		run := history.Run{Cmd: w.cfg.Cmd}
		if rep != nil {
			run.Total, run.Done0 = rep.Requests.Total, rep.Requests.AlreadyDone
		}
		w.openLocked(run)
	}
	w.phase = PhaseEnded
	r := history.Report{K: history.KindReport, T: history.Millis(w.cfg.Now()), Status: status}
	if rep != nil {
		r.Report, _ = json.Marshal(rep)
	}
	if judgeSummary != nil {
		r.Judge, _ = json.Marshal(judgeSummary)
	}
	w.report = &r
	w.tl.Report = &r
	w.appendLocked(r)
	var err error
	if w.w != nil {
		err = w.w.Close()
		w.w = nil
	}
	if err == nil {
		err = w.err
	}
	return err
}

// Reported says whether Finish recorded a report: false for a run that
// stopped before it began or found everything already done.
func (w *Watch) Reported() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.report != nil
}

// Timeline writes the timeline after since (Unix ms; 0: all of it) as
// JSON.
func (w *Watch) Timeline(since int64) ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tl := w.tl
	if since > 0 {
		tl = tl.Since(since)
	}
	return json.Marshal(tl)
}
