// Package metrics holds the Prometheus collectors every sluice process
// serves on /metrics (docs/see.md): the lanes' gauges and counters, read
// from the dispatcher's Snapshot at scrape time under the names the proxy
// has always used, and the answers' latency and queue-wait histograms.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// Snapshot reads a dispatcher's counters and lanes (dispatch.Dispatcher.Snapshot).
type Snapshot func() (dispatch.Stats, []dispatch.LaneView)

// laneMetric is one per-lane family and how to read it off a lane.
type laneMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	v    func(l *dispatch.LaneView) float64
}

// Lanes collects every lane's state and counters, and the dispatcher's
// retries, from a Snapshot taken at each scrape.
type Lanes struct {
	snap    Snapshot
	lane    []laneMetric
	bucket  [3]*prometheus.Desc // level, depth, limit per minute
	retries [3]*prometheus.Desc
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// NewLanes returns the collector of snap's lanes.
func NewLanes(snap Snapshot) *Lanes {
	lbl := []string{"org", "pool"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, lbl, nil) }
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	l := &Lanes{snap: snap, lane: []laneMetric{
		{d("sluice_lane_in_flight", "Attempts in flight on the lane (organization × model pool)."), g, func(l *dispatch.LaneView) float64 { return float64(l.State.InFlight) }},
		{d("sluice_lane_limit", "The lane's concurrency limit now: min(cap, warm-up ramp, AIMD)."), g, func(l *dispatch.LaneView) float64 { return float64(l.State.Limit) }},
		{d("sluice_lane_cap", "The lane's etiquette cap on concurrency."), g, func(l *dispatch.LaneView) float64 { return float64(l.State.Cap) }},
		{d("sluice_lane_paused", "1 while the lane is paused by a retry-after."), g, func(l *dispatch.LaneView) float64 { return b2f(l.State.Paused) }},
		{d("sluice_lane_dead", "1 when the lane's organization has no live key."), g, func(l *dispatch.LaneView) float64 { return b2f(l.Dead) }},
		{d("sluice_lane_attempts_total", "Attempts sent on the lane."), c, func(l *dispatch.LaneView) float64 { return float64(l.Attempts) }},
		{d("sluice_lane_ok_total", "Attempts answered 2xx."), c, func(l *dispatch.LaneView) float64 { return float64(l.OK) }},
		{d("sluice_lane_rate_limited_total", "Attempts answered 429 by the API."), c, func(l *dispatch.LaneView) float64 { return float64(l.RateLimited) }},
		{d("sluice_lane_overloaded_total", "Attempts answered 529 by the API."), c, func(l *dispatch.LaneView) float64 { return float64(l.Overloaded) }},
		{d("sluice_lane_failed_total", "Attempts answered 5xx, or without an answer."), c, func(l *dispatch.LaneView) float64 { return float64(l.Failed) }},
		{d("sluice_lane_input_tokens_total", "Input tokens of answers (uncached, cache writes and reads)."), c, func(l *dispatch.LaneView) float64 { return float64(l.InputTokens) }},
		{d("sluice_lane_output_tokens_total", "Output tokens of answers."), c, func(l *dispatch.LaneView) float64 { return float64(l.OutputTokens) }},
	}}
	bl := []string{"org", "pool", "dim"}
	l.bucket = [3]*prometheus.Desc{
		prometheus.NewDesc("sluice_lane_bucket_level", "What the lane's model of a rate-limit bucket holds now (the organization's remaining, less what is in flight).", bl, nil),
		prometheus.NewDesc("sluice_lane_bucket_depth", "A rate-limit bucket's depth, learned from the headers.", bl, nil),
		prometheus.NewDesc("sluice_lane_bucket_limit_per_minute", "A rate-limit bucket's limit per minute, from the headers.", bl, nil),
	}
	l.retries = [3]*prometheus.Desc{
		prometheus.NewDesc("sluice_dispatch_retries_rate_limited_total", "429 answers the dispatcher retried or gave up on.", nil, nil),
		prometheus.NewDesc("sluice_dispatch_retries_overloaded_total", "529 answers the dispatcher retried or gave up on.", nil, nil),
		prometheus.NewDesc("sluice_dispatch_retries_failed_total", "5xx answers and lost connections.", nil, nil),
	}
	return l
}

// Describe implements prometheus.Collector.
func (l *Lanes) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range l.lane {
		ch <- m.desc
	}
	for _, d := range l.bucket {
		ch <- d
	}
	for _, d := range l.retries {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *Lanes) Collect(ch chan<- prometheus.Metric) {
	st, lanes := l.snap()
	for i := range lanes {
		v := &lanes[i]
		for _, m := range l.lane {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.v(v), v.Org, string(v.Pool))
		}
		for dim, b := range v.State.Buckets {
			if !b.Known {
				continue
			}
			name := budget.Dim(dim).String()
			ch <- prometheus.MustNewConstMetric(l.bucket[0], prometheus.GaugeValue, b.Level, v.Org, string(v.Pool), name)
			ch <- prometheus.MustNewConstMetric(l.bucket[1], prometheus.GaugeValue, b.Depth, v.Org, string(v.Pool), name)
			ch <- prometheus.MustNewConstMetric(l.bucket[2], prometheus.GaugeValue, b.Limit, v.Org, string(v.Pool), name)
		}
	}
	for i, n := range []int64{st.RetriesRateLimited, st.RetriesOverloaded, st.RetriesFailed} {
		ch <- prometheus.MustNewConstMetric(l.retries[i], prometheus.CounterValue, float64(n))
	}
}

// Buckets of the histograms, seconds.
var (
	LatencyBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}
	WaitBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
)

// Answers holds the histograms of a run's answers: latency (first send to
// final answer) and queue wait (taken by the dispatcher to first send), by
// lane.
type Answers struct {
	Latency, QueueWait *prometheus.HistogramVec
	// lanes caches each lane's two observers: an answer costs a map
	// read, not two label lookups.
	lanes sync.Map // org + "\x00" + pool → *[2]prometheus.Observer
}

// NewAnswers returns the histograms, registered on reg.
func NewAnswers(reg prometheus.Registerer) *Answers {
	a := &Answers{
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_latency_seconds",
			Help: "Time from a request's first send to its final answer (sync), by the lane that answered it.", Buckets: LatencyBuckets},
			[]string{"org", "pool"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_queue_wait_seconds",
			Help: "Time from the dispatcher taking a request to its first send (sync), by the lane that answered it.", Buckets: WaitBuckets},
			[]string{"org", "pool"}),
	}
	reg.MustRegister(a.Latency, a.QueueWait)
	return a
}

// Observe adds one sync answer.
func (a *Answers) Observe(org, pool string, latency, queued float64) {
	k := org + "\x00" + pool
	o, ok := a.lanes.Load(k)
	if !ok {
		o, _ = a.lanes.LoadOrStore(k, &[2]prometheus.Observer{a.Latency.WithLabelValues(org, pool), a.QueueWait.WithLabelValues(org, pool)})
	}
	obs := o.(*[2]prometheus.Observer)
	obs[0].Observe(latency)
	obs[1].Observe(queued)
}
