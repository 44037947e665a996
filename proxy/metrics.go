package proxy

import (
	"fmt"
	"io"
	"math"
	"net/http"
	runtimemetrics "runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/cost"
)

// metrics are the proxy's own counters; the lanes' come from the
// dispatcher's Snapshot at scrape time. Written by hand in the Prometheus
// text format (version 0.0.4): a few dozen series do not need the client
// library in the binary.
type metrics struct {
	waitExpired         atomic.Int64
	cacheHits, cacheMis atomic.Int64

	mu       sync.Mutex
	requests map[[2]string]int64 // endpoint, status code
	lanes    map[laneName]*laneMetrics
}

type laneName struct {
	org  string
	pool api.Pool
}

type laneMetrics struct {
	wait    histogram
	costUSD float64
	// unpriced counts the answers of models the model table has no price
	// for: their cost is unknown, not in costUSD.
	unpriced int64
}

// waitBuckets are the upper bounds of the queue-wait histogram, seconds.
var waitBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

type histogram struct {
	counts []int64 // per bucket, not cumulative
	sum    float64
	n      int64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]int64, len(waitBuckets))
	}
	for i, b := range waitBuckets {
		if v <= b {
			h.counts[i]++
			break
		}
	}
	h.sum += v
	h.n++
}

func (m *metrics) init() {
	m.requests = map[[2]string]int64{}
	m.lanes = map[laneName]*laneMetrics{}
}

func (m *metrics) request(endpoint, code string) {
	m.mu.Lock()
	m.requests[[2]string{endpoint, code}]++
	m.mu.Unlock()
}

func (m *metrics) cacheLookup(hit bool) {
	if hit {
		m.cacheHits.Add(1)
	} else {
		m.cacheMis.Add(1)
	}
}

// lane returns the lane's metrics. Requires m.mu.
func (m *metrics) lane(org string, pool api.Pool) *laneMetrics {
	k := laneName{org, pool}
	l := m.lanes[k]
	if l == nil {
		l = &laneMetrics{}
		m.lanes[k] = l
	}
	return l
}

func (m *metrics) queueWait(org string, pool api.Pool, d time.Duration) {
	m.mu.Lock()
	m.lane(org, pool).wait.observe(d.Seconds())
	m.mu.Unlock()
}

// usage adds an answer's cost, at batch prices for a batch's row.
func (m *metrics) usage(org string, pool api.Pool, model string, u api.Usage, batch bool) {
	usd, ok := cost.Cost(model, u, batch)
	if !ok {
		m.mu.Lock()
		m.lane(org, pool).unpriced++
		m.mu.Unlock()
		return
	}
	if usd == 0 {
		return
	}
	m.mu.Lock()
	m.lane(org, pool).costUSD += usd
	m.mu.Unlock()
}

// handleMetrics serves GET /metrics.
func (p *Proxy) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	p.writeMetrics(&b)
	io.WriteString(w, b.String())
}

// series is one metric family being written.
type series struct {
	w    io.Writer
	name string
}

func family(w io.Writer, name, typ, help string) series {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	return series{w, name}
}

func (s series) add(v float64, labels ...string) { s.addSuffix("", v, labels...) }

func (s series) addSuffix(suffix string, v float64, labels ...string) {
	var b strings.Builder
	b.WriteString(s.name + suffix)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		b.WriteByte('}')
	}
	fmt.Fprintf(s.w, "%s %s\n", b.String(), formatFloat(v))
}

func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (p *Proxy) writeMetrics(w io.Writer) {
	st, lanes := p.d.Snapshot()
	sort.Slice(lanes, func(i, j int) bool {
		if lanes[i].Org != lanes[j].Org {
			return lanes[i].Org < lanes[j].Org
		}
		return lanes[i].Pool < lanes[j].Pool
	})
	type gauge struct {
		name, typ, help string
		v               func(i int) float64
	}
	for _, g := range []gauge{
		{"sluice_lane_in_flight", "gauge", "Attempts in flight on the lane (organization × model pool).", func(i int) float64 { return float64(lanes[i].State.InFlight) }},
		{"sluice_lane_limit", "gauge", "The lane's concurrency limit now: min(cap, warm-up ramp, AIMD).", func(i int) float64 { return float64(lanes[i].State.Limit) }},
		{"sluice_lane_cap", "gauge", "The lane's etiquette cap on concurrency.", func(i int) float64 { return float64(lanes[i].State.Cap) }},
		{"sluice_lane_paused", "gauge", "1 while the lane is paused by a retry-after.", func(i int) float64 { return b2f(lanes[i].State.Paused) }},
		{"sluice_lane_dead", "gauge", "1 when the lane's organization has no live key.", func(i int) float64 { return b2f(lanes[i].Dead) }},
		{"sluice_lane_attempts_total", "counter", "Attempts sent on the lane.", func(i int) float64 { return float64(lanes[i].Attempts) }},
		{"sluice_lane_ok_total", "counter", "Attempts answered 2xx.", func(i int) float64 { return float64(lanes[i].OK) }},
		{"sluice_lane_rate_limited_total", "counter", "Attempts answered 429 by the API.", func(i int) float64 { return float64(lanes[i].RateLimited) }},
		{"sluice_lane_overloaded_total", "counter", "Attempts answered 529 by the API.", func(i int) float64 { return float64(lanes[i].Overloaded) }},
		{"sluice_lane_failed_total", "counter", "Attempts answered 5xx, or without an answer.", func(i int) float64 { return float64(lanes[i].Failed) }},
		{"sluice_lane_input_tokens_total", "counter", "Input tokens of answers (uncached, cache writes and reads).", func(i int) float64 { return float64(lanes[i].InputTokens) }},
		{"sluice_lane_output_tokens_total", "counter", "Output tokens of answers.", func(i int) float64 { return float64(lanes[i].OutputTokens) }},
	} {
		s := family(w, g.name, g.typ, g.help)
		for i := range lanes {
			s.add(g.v(i), "org", lanes[i].Org, "pool", string(lanes[i].Pool))
		}
	}

	p.metrics.mu.Lock()
	names := make([]laneName, 0, len(p.metrics.lanes))
	for k := range p.metrics.lanes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if names[i].org != names[j].org {
			return names[i].org < names[j].org
		}
		return names[i].pool < names[j].pool
	})
	s := family(w, "sluice_lane_cost_usd_total", "counter", "USD spent on the lane's answers at list prices (proxy traffic).")
	for _, k := range names {
		s.add(p.metrics.lanes[k].costUSD, "org", k.org, "pool", string(k.pool))
	}
	s = family(w, "sluice_lane_unpriced_answers_total", "counter", "Answers of models the model table has no price for: their cost is unknown and not in sluice_lane_cost_usd_total (sluice models; --models FILE prices them).")
	for _, k := range names {
		if n := p.metrics.lanes[k].unpriced; n > 0 {
			s.add(float64(n), "org", k.org, "pool", string(k.pool))
		}
	}
	s = family(w, "sluice_proxy_queue_wait_seconds", "histogram", "Time from a request's arrival to its first attempt, by the lane that answered it.")
	for _, k := range names {
		h := p.metrics.lanes[k].wait
		if h.n == 0 {
			continue
		}
		var cum int64
		for i, le := range waitBuckets {
			cum += h.counts[i]
			s.addSuffix("_bucket", float64(cum), "org", k.org, "pool", string(k.pool), "le", formatFloat(le))
		}
		s.addSuffix("_bucket", float64(h.n), "org", k.org, "pool", string(k.pool), "le", "+Inf")
		s.addSuffix("_sum", h.sum, "org", k.org, "pool", string(k.pool))
		s.addSuffix("_count", float64(h.n), "org", k.org, "pool", string(k.pool))
	}
	reqs := make([][2]string, 0, len(p.metrics.requests))
	for k := range p.metrics.requests {
		reqs = append(reqs, k)
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i][0]+" "+reqs[i][1] < reqs[j][0]+" "+reqs[j][1] })
	s = family(w, "sluice_proxy_requests_total", "counter", "Requests the proxy answered, by endpoint and HTTP status.")
	for _, k := range reqs {
		s.add(float64(p.metrics.requests[k]), "endpoint", k[0], "code", k[1])
	}
	p.metrics.mu.Unlock()

	family(w, "sluice_proxy_wait_expired_total", "counter", "Requests whose wait ended (--max-wait, or --max-attempts spent) unanswered: given the last upstream 429/529/5xx, or sluice's own 429, 529 or 500.").add(float64(p.metrics.waitExpired.Load()))
	family(w, "sluice_proxy_cache_hits_total", "counter", "Plain Messages calls answered from the cache.").add(float64(p.metrics.cacheHits.Load()))
	family(w, "sluice_proxy_cache_misses_total", "counter", "Cache lookups that missed.").add(float64(p.metrics.cacheMis.Load()))
	family(w, "sluice_dispatch_retries_rate_limited_total", "counter", "429 answers the dispatcher retried or gave up on.").add(float64(st.RetriesRateLimited))
	family(w, "sluice_dispatch_retries_overloaded_total", "counter", "529 answers the dispatcher retried or gave up on.").add(float64(st.RetriesOverloaded))
	family(w, "sluice_dispatch_retries_failed_total", "counter", "5xx answers and lost connections.").add(float64(st.RetriesFailed))
	family(w, "sluice_keys_live", "gauge", "Keys not marked dead.").add(float64(len(p.pool().Live())))
	byStatus := p.batches.counts()
	s = family(w, "sluice_proxy_batches", "gauge", "Virtual batches by processing status.")
	for _, st := range []string{api.BatchInProgress, api.BatchCanceling, api.BatchEnded} {
		s.add(float64(byStatus[st]), "status", st)
	}
	s = family(w, "sluice_proxy_up", "gauge", "1 while the proxy serves, 0 while it drains.")
	s.add(b2f(!p.draining.Load()))

	// The process's own allocations: what `sluice bench overhead` divides
	// by the requests served to report allocations per request.
	rm := []runtimemetrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	runtimemetrics.Read(rm)
	family(w, "sluice_go_heap_allocs_objects_total", "counter", "Heap objects the process has allocated.").add(float64(rm[0].Value.Uint64()))
	family(w, "sluice_go_heap_allocs_bytes_total", "counter", "Heap bytes the process has allocated.").add(float64(rm[1].Value.Uint64()))
}
