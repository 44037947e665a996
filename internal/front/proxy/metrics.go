package proxy

import (
	"net/http"
	runtimemetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	sharedmetrics "github.com/sluice-dev/sluice/internal/see/metrics"
)

// metrics are the proxy's own counters, through the Prometheus client
// library; the lanes' come from the dispatcher's Snapshot at scrape time
// (internal/see/metrics, shared with run and judge). The metric names are the
// ones the proxy has always served.
type metrics struct {
	waitExpired atomic.Int64

	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	ledger    cost.Ledger // every answer's usage: the proxy's cost (Proxy.Cost)
	costUSD   *prometheus.CounterVec
	unpriced  *prometheus.CounterVec // answers of models the table has no price for
	wait      *prometheus.HistogramVec
	cacheHits prometheus.Counter
	cacheMis  prometheus.Counter
	bound     sync.Once // the collectors that read the Proxy, registered at the first scrape
	handler   http.Handler
}

// waitBuckets are the upper bounds of the queue-wait histogram, seconds.
var waitBuckets = sharedmetrics.WaitBuckets

func (m *metrics) init() {
	m.reg = prometheus.NewRegistry()
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_proxy_requests_total",
		Help: "Requests the proxy answered, by endpoint and HTTP status."}, []string{"endpoint", "code"})
	m.costUSD = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_lane_cost_usd_total",
		Help: "USD spent on the lane's answers at list prices (proxy traffic)."}, []string{"org", "pool"})
	m.unpriced = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_lane_unpriced_answers_total",
		Help: "Answers of models the model table has no price for: their cost is unknown and not in sluice_lane_cost_usd_total (sluice models; --models FILE prices them)."}, []string{"org", "pool"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_proxy_queue_wait_seconds",
		Help: "Time from a request's arrival to its first attempt, by the lane that answered it.", Buckets: waitBuckets}, []string{"org", "pool"})
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_proxy_cache_hits_total", Help: "Plain Messages calls answered from the cache."})
	m.cacheMis = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_proxy_cache_misses_total", Help: "Cache lookups that missed."})
	m.reg.MustRegister(m.requests, m.costUSD, m.unpriced, m.wait, m.cacheHits, m.cacheMis,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_proxy_wait_expired_total",
			Help: "Requests whose wait ended (--max-wait, or --max-attempts spent) unanswered: given the last upstream 429/529/5xx, or sluice's own 429, 529 or 500."},
			func() float64 { return float64(m.waitExpired.Load()) }),
		// The process's own allocations: what `sluice-bench overhead`
		// divides by the requests served to report allocations per request.
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_go_heap_allocs_objects_total", Help: "Heap objects the process has allocated."},
			func() float64 { return heapAllocs("/gc/heap/allocs:objects") }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_go_heap_allocs_bytes_total", Help: "Heap bytes the process has allocated."},
			func() float64 { return heapAllocs("/gc/heap/allocs:bytes") }),
	)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func heapAllocs(name string) float64 {
	s := []runtimemetrics.Sample{{Name: name}}
	runtimemetrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// bind registers the collectors that read p: the lanes, the keys, the
// virtual batches, whether it serves.
func (m *metrics) bind(p *Proxy) {
	m.reg.MustRegister(
		sharedmetrics.NewLanes(p.d.Snapshot),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_keys_live", Help: "Keys not marked dead."},
			func() float64 { return float64(len(p.pool().Live())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_proxy_up", Help: "1 while the proxy serves, 0 while it drains."},
			func() float64 {
				if p.draining.Load() {
					return 0
				}
				return 1
			}),
		batchesCollector{p: p, desc: prometheus.NewDesc("sluice_proxy_batches", "Virtual batches by processing status.", []string{"status"}, nil)},
	)
}

// batchesCollector counts the virtual batches by status at scrape time.
type batchesCollector struct {
	p    *Proxy
	desc *prometheus.Desc
}

func (c batchesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c batchesCollector) Collect(ch chan<- prometheus.Metric) {
	byStatus := c.p.batches.counts()
	for _, st := range []string{api.BatchInProgress, api.BatchCanceling, api.BatchEnded} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(byStatus[st]), st)
	}
}

func (m *metrics) request(endpoint, code string) {
	m.requests.WithLabelValues(endpoint, code).Inc()
}

func (m *metrics) cacheLookup(hit bool) {
	if hit {
		m.cacheHits.Inc()
	} else {
		m.cacheMis.Inc()
	}
}

func (m *metrics) queueWait(org string, pool api.Pool, d time.Duration) {
	m.wait.WithLabelValues(org, string(pool)).Observe(d.Seconds())
}

// usage adds an answer's cost, at batch prices for a batch's row, to the
// ledger and the counters.
func (m *metrics) usage(org string, pool api.Pool, model string, u api.Usage, batch bool) {
	m.ledger.Add(org, model, u, batch)
	usd, ok := cost.Cost(model, u, batch)
	if !ok {
		m.unpriced.WithLabelValues(org, string(pool)).Inc()
		return
	}
	if usd == 0 {
		return
	}
	m.costUSD.WithLabelValues(org, string(pool)).Add(usd)
}

// Cost is what the proxy's answers cost so far, at list prices.
func (p *Proxy) Cost() cost.Snapshot { return p.metrics.ledger.Snapshot() }

// handleMetrics serves GET /metrics in the Prometheus exposition format.
func (p *Proxy) handleMetrics(w http.ResponseWriter, r *http.Request) {
	p.metrics.bound.Do(func() { p.metrics.bind(p) })
	p.metrics.handler.ServeHTTP(w, r)
}
