package watch

import (
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/internal/see/history"
)

// Status is a running job as JSON: GET /api/status and `sluice status`.
type Status struct {
	Cmd        string  `json:"cmd"`
	PID        int     `json:"pid"`
	Phase      string  `json:"phase"`
	StartedAt  string  `json:"started_at"`
	ElapsedSec float64 `json:"elapsed_seconds"`
	// Done counts results done (before this process and since); Total the
	// input's requests (0 for the proxy); Todo what this process runs.
	Done        int64   `json:"done"`
	Total       int     `json:"total"`
	Todo        int     `json:"todo"`
	AlreadyDone int     `json:"already_done"`
	RatePerMin  float64 `json:"rate_per_minute"` // results over the last minute
	ETASec      float64 `json:"eta_seconds"`     // -1: unknown
	Plan        *Plan   `json:"plan,omitempty"`
	Cost        Cost    `json:"cost"`
	Retries     struct {
		RateLimited int64 `json:"rate_limited"`
		Overloaded  int64 `json:"overloaded"`
		Failed      int64 `json:"failed"`
	} `json:"retries"`
	Lanes   []LaneStatus `json:"lanes"`
	Batch   BatchStatus  `json:"batch"`
	Keys    []KeyStatus  `json:"keys"`
	History struct {
		Path     string `json:"path,omitempty"`
		Points   int    `json:"points"`
		Segments int    `json:"segments"`
		Events   int    `json:"events"`
		Error    string `json:"error,omitempty"`
	} `json:"history"`
}

// Plan is the routing in force and the planner's prediction.
type Plan struct {
	Route     string  `json:"route"`
	Share     float64 `json:"batch_share,omitempty"`
	Predicted float64 `json:"predicted_seconds"`
	Low       float64 `json:"predicted_low_seconds,omitempty"`
	High      float64 `json:"predicted_high_seconds,omitempty"`
	Why       string  `json:"why,omitempty"`
	Replans   int     `json:"replans"`
}

// Cost is the ledger so far, the projection at the current cost per
// result, and --max-cost. With Unpriced > 0 (requests of models without a
// price) the cost is unknown: USD is only the priced part, and no
// projection is made.
type Cost struct {
	Unpriced  int64   `json:"unpriced_requests,omitempty"`
	USD       float64 `json:"usd"`
	SyncUSD   float64 `json:"sync_usd"`
	BatchUSD  float64 `json:"batch_usd"`
	Projected float64 `json:"projected_usd"`
	MaxCost   float64 `json:"max_cost,omitempty"`
}

// LaneStatus is one lane now.
type LaneStatus struct {
	Org         string  `json:"org"`
	Pool        string  `json:"pool"`
	InFlight    int     `json:"in_flight"`
	Limit       int     `json:"limit"`
	Cap         int     `json:"cap"`
	Attempts    int64   `json:"attempts"`
	OK          int64   `json:"ok"`
	RateLimited int64   `json:"rate_limited"`
	Overloaded  int64   `json:"overloaded"`
	Failed      int64   `json:"failed"`
	OKPerMin    float64 `json:"ok_per_minute"`
	Dead        bool    `json:"dead"`
	Paused      bool    `json:"paused"`
	// Binding is what work waited on longest over the last minute (the
	// text report's names), "" when nothing waited.
	Binding string         `json:"binding"`
	Buckets []BucketStatus `json:"buckets"`
}

// BucketStatus is one rate-limit bucket of a lane.
type BucketStatus struct {
	Dim         string  `json:"dim"`
	LimitPerMin float64 `json:"limit_per_minute"`
	DepthSec    float64 `json:"depth_seconds"` // the learned depth, in seconds of refill
	Level       float64 `json:"level"`
	// UsedShare is the lane's own use over the last minute as a share of
	// the limit; OthersShare what the headers showed others used.
	UsedShare   float64 `json:"used_share"`
	OthersShare float64 `json:"others_share"`
}

// BatchStatus is the batch path now.
type BatchStatus struct {
	Submitted int64 `json:"submitted"`
	Results   int64 `json:"results"`
	Rerouted  int64 `json:"rerouted"`
	Pending   int64 `json:"pending"`
	InFlight  int64 `json:"in_flight"`
	Chunks    struct {
		Open, Ended, Harvested, Abandoned, Cancelled int
	} `json:"chunks"`
}

// KeyStatus is one key: label and last four characters only.
type KeyStatus struct {
	Key   string `json:"key"` // label …last4
	Org   string `json:"org"`
	State string `json:"state"` // live, suspect, dead, retired
}

// window is how far back the rates look.
const window = 60 * time.Second

// Status builds the status now.
func (w *Watch) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.cfg.Now()
	tl := w.tl
	s := Status{Cmd: w.cfg.Cmd, PID: pid, Phase: w.phase, StartedAt: w.started.UTC().Format(time.RFC3339),
		ElapsedSec: now.Sub(w.started).Seconds(), ETASec: -1}
	if w.live != nil {
		s.Total, s.Todo, s.AlreadyDone, s.Cost.MaxCost = w.live.Total, w.live.Todo, w.live.AlreadyDone, w.live.MaxCost
	}
	s.History.Path, s.History.Points, s.History.Segments, s.History.Events = w.cfg.Path, tl.Len(), len(tl.Segments), len(tl.Events)
	if w.err != nil {
		s.History.Error = w.err.Error()
	}
	if r := w.routing; r != nil {
		s.Plan = &Plan{Route: r.Route, Share: r.Share, Predicted: r.Pred, Low: r.Low, High: r.High, Why: r.Why}
		for _, e := range tl.Events {
			if e.Kind == "replan" && e.State == "applied" {
				s.Plan.Replans++
			}
		}
	}
	for _, k := range w.keys {
		s.Keys = append(s.Keys, KeyStatus{Key: k.String(), Org: k.Org(), State: w.keyState[k]})
	}
	sort.Slice(s.Keys, func(i, j int) bool { return s.Keys[i].Key < s.Keys[j].Key })
	n := tl.Len()
	if n == 0 {
		return s
	}
	last := n - 1
	// back: the point about a window before the last, in its segment.
	back := last
	for back > 0 && tl.Seg[back-1] == tl.Seg[last] && tl.T[last]-tl.T[back-1] <= window.Milliseconds() {
		back--
	}
	dtMin := float64(tl.T[last]-tl.T[back]) / 60e3
	s.Done = int64(tl.Done[last])
	s.Cost.USD, s.Cost.SyncUSD, s.Cost.BatchUSD = tl.Cost[0][last], tl.Cost[1][last], tl.Cost[2][last]
	s.Cost.Unpriced = int64(tl.Unpriced[last])
	first := tl.Segments[0]
	if doneSince := s.Done - int64(first.Done0); doneSince > 0 && first.Total > first.Done0 && s.Cost.Unpriced == 0 {
		s.Cost.Projected = s.Cost.USD / float64(doneSince) * float64(first.Total-first.Done0)
	}
	if dtMin > 0 {
		s.RatePerMin = (tl.Done[last] - tl.Done[back]) / dtMin
	}
	if s.RatePerMin > 0 && s.Total > 0 {
		s.ETASec = math.Max(0, float64(int64(s.Total)-s.Done)) / s.RatePerMin * 60
	}
	s.Batch = BatchStatus{Submitted: int64(tl.B[0][last]), Results: int64(tl.B[1][last]), Rerouted: int64(tl.B[2][last]),
		Pending: int64(tl.B[3][last]), InFlight: int64(tl.B[4][last])}
	s.Batch.Chunks = chunkCounts(tl.Events)
	for _, ls := range tl.Lanes {
		c := &ls.C
		v := func(col, i int) float64 {
			x := c[col][i]
			if math.IsNaN(x) {
				return 0
			}
			return x
		}
		if math.IsNaN(c[history.ColSent][last]) {
			continue // not a lane of this process
		}
		st := LaneStatus{Org: ls.Org, Pool: ls.Pool, InFlight: int(v(history.ColInFlight, last)), Limit: int(v(history.ColLimit, last)),
			Cap: int(v(history.ColCap, last)), Attempts: int64(v(history.ColSent, last)), OK: int64(v(history.ColOK, last)),
			RateLimited: int64(v(history.Col429, last)), Overloaded: int64(v(history.Col529, last)), Failed: int64(v(history.Col5xx, last)),
			Dead: v(history.ColDead, last) == 1, Paused: v(history.ColPaused, last) == 1}
		s.Retries.RateLimited += st.RateLimited
		s.Retries.Overloaded += st.Overloaded
		s.Retries.Failed += st.Failed
		if dtMin > 0 {
			st.OKPerMin = (v(history.ColOK, last) - v(history.ColOK, back)) / dtMin
		}
		var most float64
		for i := range history.NumWaits {
			if d := v(history.ColWait0+i, last) - v(history.ColWait0+i, back); d > most {
				most, st.Binding = d, lane.Wait(i).String()
			}
		}
		own := [history.NumDims]float64{
			v(history.ColSent, last) - v(history.ColSent, back),
			v(history.ColIn, last) - v(history.ColIn, back),
			v(history.ColOut, last) - v(history.ColOut, back),
			v(history.ColIn, last) - v(history.ColIn, back) + v(history.ColOut, last) - v(history.ColOut, back),
		}
		for d := range history.NumDims {
			col := history.ColBucket0 + d*history.BucketCols
			lim := v(col+history.BucketLimit, last)
			if lim <= 0 {
				continue
			}
			b := BucketStatus{Dim: budget.Dim(d).String(), LimitPerMin: lim, DepthSec: v(col+history.BucketDepth, last) / (lim / 60),
				Level: v(col+history.BucketLevel, last)}
			if dtMin > 0 {
				b.UsedShare = own[d] / (lim * dtMin)
				b.OthersShare = (v(col+history.BucketLowered, last) - v(col+history.BucketLowered, back)) / (lim * dtMin)
			}
			st.Buckets = append(st.Buckets, b)
		}
		s.Lanes = append(s.Lanes, st)
	}
	return s
}

// chunkCounts counts the batch chunks by where their events left them.
func chunkCounts(evs []history.Event) (c struct{ Open, Ended, Harvested, Abandoned, Cancelled int }) {
	state := map[string]string{}
	for _, e := range evs {
		if e.Kind == "batch" {
			state[e.ID] = e.State
		}
	}
	for _, s := range state {
		switch s {
		case "harvested", "dropped":
			c.Harvested++
		case "abandoned":
			c.Abandoned++
		case "canceled", "cancel":
			c.Cancelled++
		case "ended":
			c.Ended++
		default:
			c.Open++
		}
	}
	return c
}

// jobCollector serves the job's own figures on /metrics.
type jobCollector struct{ w *Watch }

var (
	descDone  = prometheus.NewDesc("sluice_job_done", "Results done: kept from before and durable since.", nil, nil)
	descTotal = prometheus.NewDesc("sluice_job_total", "Requests in the input.", nil, nil)
	descCost  = prometheus.NewDesc("sluice_job_cost_usd_total", "USD spent so far at list prices (the ledger; only the priced part while a model without a price is used).", nil, nil)
	descBatch = prometheus.NewDesc("sluice_job_batch_in_flight", "Requests in unended Message Batches.", nil, nil)
	descKeys  = prometheus.NewDesc("sluice_keys_live", "Keys not marked dead.", nil, nil)
)

func (c jobCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDone
	ch <- descTotal
	ch <- descCost
	ch <- descBatch
	ch <- descKeys
}

func (c jobCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live == nil {
		return
	}
	live := 0
	for _, st := range w.keyState {
		if st != "dead" {
			live++
		}
	}
	ch <- prometheus.MustNewConstMetric(descKeys, prometheus.GaugeValue, float64(live))
	n := w.tl.Len()
	if n == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(descCost, prometheus.CounterValue, w.tl.Cost[0][n-1])
	if w.cfg.Cmd == "proxy" {
		return // no input, no batch path of its own: the proxy serves its batches' figures itself
	}
	ch <- prometheus.MustNewConstMetric(descDone, prometheus.GaugeValue, w.tl.Done[n-1])
	ch <- prometheus.MustNewConstMetric(descTotal, prometheus.GaugeValue, float64(w.live.Total))
	ch <- prometheus.MustNewConstMetric(descBatch, prometheus.GaugeValue, w.tl.B[4][n-1])
}
