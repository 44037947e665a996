package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

// OverheadRun measures what `sluice proxy` adds to one request: the same
// closed-loop load (Connections keep-alive connections, each sending the
// next request when the last is answered) straight to a zero-latency,
// unlimited `sluice sim` and then through `sluice proxy` in front of it.
// The simulator, the proxy and the load (this process) are three
// processes, so each one's CPU is its own.
type OverheadRun struct {
	Binary      string
	Sim         sim.Config // zero latency, limits out of reach
	Connections int
	BodyBytes   int // size of each request body, bytes (at least the JSON frame)
	Duration    time.Duration
	Warmup      time.Duration
	// Rate > 0 adds an open-loop phase to each target: requests scheduled
	// Rate a second, evenly spaced, over the same Connections, each
	// request's latency counted from the moment it was due (a request that
	// waits for a free connection waits on the clock). A closed loop at
	// saturation measures queueing, not what the proxy adds: by Little's
	// law its p50 is about Connections ÷ rate, so the slower target's p50
	// is larger by the throughput ratio alone. At a rate both targets
	// sustain, the difference in latency is the proxy's own.
	Rate  float64
	Model string
	// ProxyArgs are extra flags for `sluice proxy`.
	ProxyArgs []string
	Dir       string
	Log       io.Writer
}

// LoadResult is one phase of an overhead run.
type LoadResult struct {
	Name     string
	Requests int // sent and answered 200 within the measured window (the rate's count)
	// Sent is how many 200s were sent within the window: the latencies'
	// count, at least Requests (one in flight as the window closes is
	// waited for and its latency counted, so the slowest are not dropped).
	Sent     int
	Errors   map[int]int
	Rate     float64 // answers per second
	P50, P99 time.Duration
	// CPUPerRequest is the CPU time (user+system) each process spent per
	// answered request in the window, by process; 0 where not measured.
	CPUPerRequest map[string]time.Duration
}

// OverheadResult is both phases and the proxy's allocations.
type OverheadResult struct {
	Direct, Proxy LoadResult
	// DirectAtRate and ProxyAtRate are the open-loop phases at Rate
	// requests a second; zero when Rate is 0.
	DirectAtRate, ProxyAtRate LoadResult
	Rate                      float64
	// AllocsPerRequest and AllocBytesPerRequest are the proxy process's
	// heap allocations per answered request in the window (from its
	// /metrics).
	AllocsPerRequest, AllocBytesPerRequest float64
	Connections, BodyBytes                 int
}

// Ratio is the proxy's rate over the direct rate.
func (r OverheadResult) Ratio() float64 {
	if r.Direct.Rate == 0 {
		return 0
	}
	return r.Proxy.Rate / r.Direct.Rate
}

// AddedP50 is the proxy's median latency less the direct one.
func (r OverheadResult) AddedP50() time.Duration { return r.Proxy.P50 - r.Direct.P50 }

// maxRate bounds --rate: beyond it the schedule's spacing (a whole
// number of nanoseconds) is too coarse to mean the rate asked for.
const maxRate = 1e6

// check refuses a run whose figures would mean nothing, naming the flag.
func (o OverheadRun) check() error {
	switch {
	case o.Connections < 1 || o.BodyBytes < 1 || o.Duration <= 0:
		return errors.New("bench overhead: --connections, --body and --duration must be positive")
	case o.Warmup < 0:
		return errors.New("bench overhead: --warmup must not be negative")
	case o.Rate != 0 && !(o.Rate >= 1 && o.Rate <= maxRate): // NaN fails both
		return fmt.Errorf("bench overhead: --rate %v: want 0 (closed loop only) or 1 to %.0f requests a second", o.Rate, maxRate)
	}
	return nil
}

// Run runs both phases.
func (o OverheadRun) Run(ctx context.Context) (OverheadResult, error) {
	res := OverheadResult{Connections: o.Connections, BodyBytes: o.BodyBytes, Rate: o.Rate}
	if err := o.check(); err != nil {
		return res, err
	}
	if o.Model == "" {
		o.Model = "claude-haiku-4-5-20251001"
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-overhead-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	sp, err := StartSim(ctx, o.Binary, o.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	body := overheadBody(o.Model, o.BodyBytes)
	simKey := o.Sim.Orgs[0].Keys[0].Key

	simPids := map[string]int{"simulator": sp.cmd.Process.Pid}
	res.Direct, err = o.load(ctx, "direct to the simulator", sp.Base, simKey, body, simPids, 0, nil)
	if err != nil {
		return res, err
	}
	if o.Rate > 0 {
		res.DirectAtRate, err = o.load(ctx, "direct to the simulator", sp.Base, simKey, body, simPids, o.Rate, nil)
		if err != nil {
			return res, err
		}
	}
	px, err := startProxy(ctx, o.Binary, sp.Base, o.Sim, dir, o.ProxyArgs, o.Log)
	if err != nil {
		return res, err
	}
	defer px.stop()
	var a0, a1 proxyAllocs
	callerKey := px.token
	pxPids := map[string]int{"simulator": sp.cmd.Process.Pid, "proxy": px.cmd.Process.Pid}
	res.Proxy, err = o.load(ctx, "through sluice proxy", px.base, callerKey, body, pxPids, 0,
		func(start bool) {
			if start {
				a0, _ = readProxyAllocs(px)
			} else {
				a1, _ = readProxyAllocs(px)
			}
		})
	if err != nil {
		return res, err
	}
	if n := float64(res.Proxy.Requests); n > 0 && a1.objects > 0 {
		res.AllocsPerRequest = (a1.objects - a0.objects) / n
		res.AllocBytesPerRequest = (a1.bytes - a0.bytes) / n
	}
	if o.Rate > 0 {
		res.ProxyAtRate, err = o.load(ctx, "through sluice proxy", px.base, callerKey, body, pxPids, o.Rate, nil)
	}
	return res, err
}

// overheadBody is a Messages request of about size bytes: one user turn
// padded with text.
func overheadBody(model string, size int) []byte {
	frame := func(text string) []byte {
		b, _ := json.Marshal(map[string]any{
			"model": model, "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": text}},
		})
		return b
	}
	base := len(frame(""))
	pad := max(size-base, 1)
	return frame(strings.Repeat("judge this answer ", pad/18+1)[:pad])
}

// load runs the load against base for the warm-up and then the measured
// window: a closed loop when rate is 0, else requests due rate a second
// (see OverheadRun.Rate). mark, when set, is called as the window opens
// and closes.
func (o OverheadRun) load(ctx context.Context, name, base, key string, body []byte, pids map[string]int, rate float64, mark func(start bool)) (LoadResult, error) {
	res := LoadResult{Name: name, Errors: map[int]int{}, CPUPerRequest: map[string]time.Duration{}}
	// The requests run on ctx; only the schedule ends with the window, so
	// a request in flight as the window closes finishes and its latency
	// counts (cutting it would drop the slowest few).
	sched, endSchedule := context.WithCancel(ctx)
	defer endSchedule()
	// due hands out the time each request is due: now, in a closed loop;
	// the next slot of the schedule in an open one. false: stop.
	due := func() (time.Time, bool) { return time.Now(), true }
	if rate > 0 {
		slots := make(chan time.Time, o.Connections)
		go schedule(sched, rate, slots)
		due = func() (time.Time, bool) {
			t, ok := <-slots
			return t, ok
		}
	}
	type conn struct {
		lat      []time.Duration // every 200 sent in the window
		answered int             // of those, answered before it closed
		errs     map[int]int
	}
	// measured: requests sent from now count; stop: connections end.
	// Read once per request by every connection.
	var measured, stop atomic.Bool
	conns := make([]*conn, o.Connections)
	var wg sync.WaitGroup
	// However load returns, the connections end before it does: stopped,
	// the schedule ended, and (past a grace period) their requests cut.
	reqs, cutRequests := context.WithCancel(ctx)
	endConns := func() {
		stop.Store(true)
		endSchedule()
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			cutRequests()
			<-ended
		}
		cutRequests()
	}
	defer endConns()
	for i := range conns {
		c := &conn{errs: map[int]int{}}
		conns[i] = c
		// One transport a connection: exactly Connections keep-alive
		// connections, as wrk -c would open.
		tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true}
		hc := &http.Client{Transport: tr}
		wg.Go(func() {
			defer tr.CloseIdleConnections()
			for {
				t0, ok := due()
				if !ok || stop.Load() {
					return
				}
				in := measured.Load()
				req, err := http.NewRequestWithContext(reqs, "POST", base+"/v1/messages", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("content-type", "application/json")
				req.Header.Set(api.HeaderAPIKey, key)
				req.Header.Set("anthropic-version", "2023-06-01")
				resp, err := hc.Do(req)
				status := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				lat := time.Since(t0)
				if !in {
					continue
				}
				switch {
				case status == 200:
					c.lat = append(c.lat, lat)
					if !stop.Load() {
						c.answered++
					}
				case reqs.Err() == nil:
					c.errs[status]++
				}
			}
		})
	}
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := sleep(o.Warmup); err != nil {
		return res, err
	}
	cpu0 := map[string]time.Duration{}
	for n, pid := range pids {
		cpu0[n] = procCPU(pid)
	}
	cpu0["load"] = procCPU(os.Getpid())
	if mark != nil {
		mark(true)
	}
	measured.Store(true)
	t0 := time.Now()
	if err := sleep(o.Duration); err != nil {
		return res, err
	}
	stop.Store(true)
	measured.Store(false)
	window := time.Since(t0)
	endSchedule() // an open loop's waiting connections end with it
	if mark != nil {
		mark(false)
	}
	cpu1 := map[string]time.Duration{}
	for n, pid := range pids {
		cpu1[n] = procCPU(pid)
	}
	cpu1["load"] = procCPU(os.Getpid())
	endConns()
	var all []time.Duration
	for _, c := range conns {
		all = append(all, c.lat...)
		res.Requests += c.answered
		for s, n := range c.errs {
			res.Errors[s] += n
		}
	}
	res.Sent = len(all)
	if res.Requests == 0 {
		return res, fmt.Errorf("bench overhead: %s: no answers in %s (errors by status: %v)", name, window.Round(time.Millisecond), res.Errors)
	}
	res.Rate = float64(res.Requests) / window.Seconds()
	slices.Sort(all)
	res.P50, res.P99 = all[len(all)/2], all[len(all)*99/100]
	for n := range cpu1 {
		if d := cpu1[n] - cpu0[n]; d > 0 {
			res.CPUPerRequest[n] = d / time.Duration(res.Requests)
		}
	}
	return res, nil
}

// proxyAllocs are the proxy's cumulative heap allocations.
type proxyAllocs struct{ objects, bytes float64 }

// readProxyAllocs reads the allocation counters from the proxy's /metrics.
func readProxyAllocs(px *proxyProcess) (proxyAllocs, error) {
	var a proxyAllocs
	resp, err := px.get("/metrics")
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := 0
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "sluice_go_heap_allocs_objects_total":
			a.objects, _ = strconv.ParseFloat(v, 64)
			found++
		case "sluice_go_heap_allocs_bytes_total":
			a.bytes, _ = strconv.ParseFloat(v, 64)
			found++
		}
	}
	if found < 2 {
		return a, errors.New("bench overhead: the proxy's /metrics has no allocation counters")
	}
	return a, sc.Err()
}

// Print writes the result as the lines BENCHMARKS.md quotes.
func (r OverheadResult) Print(w io.Writer) {
	fmt.Fprintf(w, "overhead: %d keep-alive connections, %d-byte bodies, zero-latency unlimited simulator\n", r.Connections, r.BodyBytes)
	fmt.Fprintf(w, "closed loop (each connection sends its next request when answered: capacity):\n")
	for _, l := range []LoadResult{r.Direct, r.Proxy} {
		l.print(w, true)
	}
	fmt.Fprintf(w, "  proxy ÷ direct = %.3f; added at p50 %.2f ms, at p99 %.2f ms (at saturation: queueing, about connections ÷ rate)\n",
		r.Ratio(), ms(r.AddedP50()), ms(r.Proxy.P99-r.Direct.P99))
	if r.AllocsPerRequest > 0 {
		fmt.Fprintf(w, "  proxy allocations per request: %.0f objects, %.1f KiB\n", r.AllocsPerRequest, r.AllocBytesPerRequest/1024)
	}
	if r.Rate > 0 {
		fmt.Fprintf(w, "open loop at %.0f req/s (latency from the moment each request was due):\n", r.Rate)
		for _, l := range []LoadResult{r.DirectAtRate, r.ProxyAtRate} {
			l.print(w, true) // the CPU a request costs at a rate both sustain
		}
		fmt.Fprintf(w, "  added by the proxy at %.0f req/s: p50 %.2f ms, p99 %.2f ms\n",
			r.Rate, ms(r.ProxyAtRate.P50-r.DirectAtRate.P50), ms(r.ProxyAtRate.P99-r.DirectAtRate.P99))
		for _, l := range []LoadResult{r.DirectAtRate, r.ProxyAtRate} {
			if l.Rate < 0.95*r.Rate {
				// Slots still due as the window closed were never sent,
				// and their wait never counted: the latency is a floor.
				fmt.Fprintf(w, "  warning: %s answered %.0f req/s of the %.0f scheduled: it cannot sustain the rate, so its latencies understate the wait\n",
					l.Name, l.Rate, r.Rate)
			}
		}
	}
}

// print writes one phase's line.
func (l LoadResult) print(w io.Writer, cpu bool) {
	var parts []string
	for _, n := range []string{"simulator", "proxy", "load"} {
		if d, ok := l.CPUPerRequest[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f µs", n, float64(d)/1e3))
		}
	}
	tail := ""
	if cpu {
		tail = "  CPU per request: " + strings.Join(parts, ", ")
	}
	if len(l.Errors) > 0 {
		tail += fmt.Sprintf("; non-200 answers by status: %v", l.Errors)
	}
	fmt.Fprintf(w, "  %-24s %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms%s\n", l.Name+":", l.Rate, ms(l.P50), ms(l.P99), tail)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// schedule sends the time each request is due into slots, rate a second
// evenly spaced from now, until ctx ends; then it closes slots. A slot
// that cannot be handed over at once (every connection busy) is sent late
// but keeps its due time, so the wait counts in that request's latency
// instead of thinning the load (no coordinated omission). Every slot due
// by the time the scheduler wakes is sent on that wake, so a late timer
// delays requests without dropping them.
func schedule(ctx context.Context, rate float64, slots chan<- time.Time) {
	defer close(slots)
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case slots <- at:
		}
	}
}
