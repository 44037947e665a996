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
	Sim         sim.Config // zero latency, no limits
	Connections int
	BodyBytes   int // size of each request body, bytes (at least the JSON frame)
	Duration    time.Duration
	Warmup      time.Duration
	Model       string
	// ProxyArgs are extra flags for `sluice proxy`.
	ProxyArgs []string
	Dir       string
	Log       io.Writer
}

// LoadResult is one phase of an overhead run.
type LoadResult struct {
	Name     string
	Requests int // answered 200 within the measured window
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

// Run runs both phases.
func (o OverheadRun) Run(ctx context.Context) (OverheadResult, error) {
	res := OverheadResult{Connections: o.Connections, BodyBytes: o.BodyBytes}
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

	res.Direct, err = o.load(ctx, "direct to the simulator", sp.Base, simKey, body,
		map[string]int{"simulator": sp.cmd.Process.Pid}, nil)
	if err != nil {
		return res, err
	}
	px, err := startProxy(ctx, o.Binary, sp.Base, o.Sim, dir, o.ProxyArgs, o.Log)
	if err != nil {
		return res, err
	}
	defer px.stop()
	var a0, a1 proxyAllocs
	res.Proxy, err = o.load(ctx, "through sluice proxy", px.base, "placeholder: the proxy ignores callers' keys", body,
		map[string]int{"simulator": sp.cmd.Process.Pid, "proxy": px.cmd.Process.Pid},
		func(start bool) {
			if start {
				a0, _ = readProxyAllocs(px.base)
			} else {
				a1, _ = readProxyAllocs(px.base)
			}
		})
	if err != nil {
		return res, err
	}
	if n := float64(res.Proxy.Requests); n > 0 && a1.objects > 0 {
		res.AllocsPerRequest = (a1.objects - a0.objects) / n
		res.AllocBytesPerRequest = (a1.bytes - a0.bytes) / n
	}
	return res, nil
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

// load runs the closed loop against base for the warm-up and then the
// measured window; mark, when set, is called as the window opens and
// closes.
func (o OverheadRun) load(ctx context.Context, name, base, key string, body []byte, pids map[string]int, mark func(start bool)) (LoadResult, error) {
	res := LoadResult{Name: name, Errors: map[int]int{}, CPUPerRequest: map[string]time.Duration{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type conn struct {
		lat  []time.Duration
		errs map[int]int
	}
	// measured: answers count from now; stop: connections end. Read once
	// per request by every connection.
	var measured, stop atomic.Bool
	conns := make([]*conn, o.Connections)
	var wg sync.WaitGroup
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
				if stop.Load() {
					return
				}
				in := measured.Load()
				req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/messages", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("content-type", "application/json")
				req.Header.Set(api.HeaderAPIKey, key)
				req.Header.Set("anthropic-version", "2023-06-01")
				t0 := time.Now()
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
				if status == 200 {
					c.lat = append(c.lat, lat)
				} else if ctx.Err() == nil {
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
	if mark != nil {
		mark(false)
	}
	cpu1 := map[string]time.Duration{}
	for n, pid := range pids {
		cpu1[n] = procCPU(pid)
	}
	cpu1["load"] = procCPU(os.Getpid())
	wg.Wait()
	var all []time.Duration
	for _, c := range conns {
		all = append(all, c.lat...)
		for s, n := range c.errs {
			res.Errors[s] += n
		}
	}
	res.Requests = len(all)
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
func readProxyAllocs(base string) (proxyAllocs, error) {
	var a proxyAllocs
	resp, err := http.Get(base + "/metrics")
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
	for _, l := range []LoadResult{r.Direct, r.Proxy} {
		var cpu []string
		for _, n := range []string{"simulator", "proxy", "load"} {
			if d, ok := l.CPUPerRequest[n]; ok {
				cpu = append(cpu, fmt.Sprintf("%s %.0f µs", n, float64(d)/1e3))
			}
		}
		errs := ""
		if len(l.Errors) > 0 {
			errs = fmt.Sprintf("; non-200 answers by status: %v", l.Errors)
		}
		fmt.Fprintf(w, "  %-24s %7.0f req/s  p50 %6.2f ms  p99 %6.2f ms  CPU per request: %s%s\n",
			l.Name+":", l.Rate, ms(l.P50), ms(l.P99), strings.Join(cpu, ", "), errs)
	}
	fmt.Fprintf(w, "  proxy ÷ direct = %.3f; added at p50 %.2f ms, at p99 %.2f ms\n", r.Ratio(), ms(r.AddedP50()), ms(r.Proxy.P99-r.Direct.P99))
	if r.AllocsPerRequest > 0 {
		fmt.Fprintf(w, "  proxy allocations per request: %.0f objects, %.1f KiB\n", r.AllocsPerRequest, r.AllocBytesPerRequest/1024)
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
