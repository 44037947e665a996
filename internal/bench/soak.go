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
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

// ProxySoak runs Rows virtual-batch rows through one `sluice proxy` in
// front of `sluice sim` (each a child process), BatchSize rows a batch and
// InFlight batches at a time, as a long-running proxy sees them: each
// batch is created, polled until it ends and its results read back whole;
// ended batches stay (listed, their results on disk). It samples the
// proxy's resident set (VmRSS) as the rows go, to show that what a batch
// holds in memory is released once its rows are on disk.
type ProxySoak struct {
	Binary    string
	Rows      int
	BatchSize int
	InFlight  int
	TimeScale float64
	Dir       string // work directory; default a temporary one
	Log       io.Writer
}

// RSSPoint is the proxy's RSS once Rows rows had ended.
type RSSPoint struct {
	Rows int
	RSS  int64
}

// SoakResult is what a soak measured.
type SoakResult struct {
	Rows, Batches int
	Wall          time.Duration
	Routes        map[string]int // batches by the route the planner chose
	Bad           int            // result lines not succeeded, or missing
	RSS           []RSSPoint     // before the first batch, then after each
	StateBytes    int64          // the state dir's size at the end
}

// At is the first RSS sample taken once at least rows had ended.
func (r SoakResult) At(rows int) RSSPoint {
	for _, p := range r.RSS {
		if p.Rows >= rows {
			return p
		}
	}
	return r.RSS[len(r.RSS)-1]
}

// Flat is the largest RSS from the first tenth of the rows on, over the
// RSS at that tenth: how far the proxy's memory grew in steady state.
func (r SoakResult) Flat() float64 {
	base := r.At(r.Rows / 10)
	peak := base.RSS
	for _, p := range r.RSS {
		if p.Rows >= base.Rows && p.RSS > peak {
			peak = p.RSS
		}
	}
	return float64(peak) / float64(base.RSS)
}

// soakSim is the soak's world: the three-org preset, limits out of reach
// and a quick batch queue, so the proxy, not the world, sets the pace.
func soakSim(scale float64) sim.Config {
	cfg := sim.Default()
	cfg.TimeScale = scale
	for i := range cfg.Orgs {
		for p, l := range cfg.Orgs[i].Limits {
			l.RPM, l.ITPM, l.OTPM = l.RPM*20, l.ITPM*20, l.OTPM*20
			cfg.Orgs[i].Limits[p] = l
		}
	}
	cfg.Batch.AdmissionBase = sim.Duration(5 * time.Second)
	cfg.Batch.AdmissionPerRequest = 0
	cfg.Batch.ProcessingRate = 2000
	return cfg
}

// Run runs the soak.
func (s ProxySoak) Run(ctx context.Context) (SoakResult, error) {
	res := SoakResult{Routes: map[string]int{}}
	if s.BatchSize <= 0 || s.Rows <= 0 {
		return res, errors.New("bench proxy --soak: rows and batch size must be positive")
	}
	if s.InFlight <= 0 {
		s.InFlight = 2
	}
	logf := func(format string, a ...any) {
		if s.Log != nil {
			fmt.Fprintf(s.Log, format+"\n", a...)
		}
	}
	dir := s.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-soak-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cfg := soakSim(s.TimeScale)
	sp, err := StartSim(ctx, s.Binary, cfg, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	limits := filepath.Join(dir, "limits.json")
	if err := writeChaosLimits(limits, cfg); err != nil {
		return res, err
	}
	routes := &routeCounter{n: res.Routes}
	px, err := startProxy(ctx, s.Binary, sp.Base, cfg, dir, []string{"--limits-file", limits}, routes)
	if err != nil {
		return res, err
	}
	defer px.stop()
	pid := px.cmd.Process.Pid

	var (
		mu    sync.Mutex
		ended int
	)
	sample := func() {
		mu.Lock()
		res.RSS = append(res.RSS, RSSPoint{Rows: ended, RSS: procRSS(pid)})
		mu.Unlock()
	}
	sample()
	logf("soak: %d rows in batches of %d, %d at a time; proxy RSS at the start %.1f MiB", s.Rows, s.BatchSize, s.InFlight, float64(res.RSS[0].RSS)/(1<<20))

	start := time.Now()
	nb := (s.Rows + s.BatchSize - 1) / s.BatchSize
	next := make(chan int)
	go func() {
		defer close(next)
		for b := range nb {
			select {
			case next <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	errc := make(chan error, s.InFlight)
	var wg sync.WaitGroup
	for range s.InFlight {
		wg.Go(func() {
			for b := range next {
				n := min(s.BatchSize, s.Rows-b*s.BatchSize)
				bad, err := soakBatch(ctx, px, b, n)
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				res.Bad += bad
				res.Batches++
				ended += n
				done := ended
				mu.Unlock()
				sample()
				if b%10 == 9 || done == s.Rows {
					logf("soak: %d/%d rows, %s, proxy RSS %.1f MiB", done, s.Rows, time.Since(start).Round(time.Second), float64(procRSS(pid))/(1<<20))
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Wall = time.Since(start)
	res.Rows = ended
	res.Routes = routes.counts()
	filepath.Walk(filepath.Join(dir, "proxy-state"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			res.StateBytes += fi.Size()
		}
		return nil
	})
	sort.Slice(res.RSS, func(i, j int) bool { return res.RSS[i].Rows < res.RSS[j].Rows })
	return res, nil
}

// soakBatch creates batch b of n rows, waits for its end and reads its
// results back: how many rows did not come back succeeded.
func soakBatch(ctx context.Context, px *proxyProcess, b, n int) (bad int, err error) {
	var body bytes.Buffer
	body.WriteString(`{"requests":[`)
	for i := range n {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"custom_id":"b%d-r%d","params":{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"Soak batch %d row %d: is this answer aligned? Reply yes or no."}]}}`, b, i, b, i)
	}
	body.WriteString(`]}`)
	var created api.MessageBatch
	if err := px.doJSON(ctx, "POST", "/v1/messages/batches", body.Bytes(), &created); err != nil {
		return 0, fmt.Errorf("batch %d: create: %w", b, err)
	}
	for created.ProcessingStatus != api.BatchEnded {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := px.doJSON(ctx, "GET", "/v1/messages/batches/"+created.ID, nil, &created); err != nil {
			return 0, fmt.Errorf("batch %d: retrieve: %w", b, err)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", px.base+"/v1/messages/batches/"+created.ID+"/results", nil)
	req.Header.Set(api.HeaderAPIKey, px.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("batch %d: results: HTTP %d", b, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		if !bytes.Contains(sc.Bytes(), []byte(`"type":"succeeded"`)) {
			bad++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("batch %d: results: %w", b, err)
	}
	bad += max(0, n-lines)
	return bad, nil
}

// routeCounter counts the routes of the proxy's "virtual batch routed"
// log lines (a batch's route is not in its API object).
type routeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *routeCounter) Write(b []byte) (int, error) {
	line := string(b)
	if strings.Contains(line, `msg="virtual batch routed"`) {
		if _, after, ok := strings.Cut(line, " route="); ok {
			route, _, _ := strings.Cut(after, " ")
			c.mu.Lock()
			c.n[route]++
			c.mu.Unlock()
		}
	}
	return len(b), nil
}

func (c *routeCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// doJSON sends a request with the proxy's token and decodes a 200's body
// into v.
func (p *proxyProcess) doJSON(ctx context.Context, method, path string, body []byte, v any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set(api.HeaderAPIKey, p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, v)
}

// Print writes the soak's figures as BENCHMARKS.md quotes them.
func (r SoakResult) Print(w io.Writer) {
	mib := func(p RSSPoint) string { return fmt.Sprintf("%.1f MiB", float64(p.RSS)/(1<<20)) }
	fmt.Fprintf(w, "proxy soak: %d virtual-batch rows in %d batches (routes %v) in %s (%.0f rows/s); %d rows not succeeded; state dir %.0f MiB at the end\n",
		r.Rows, r.Batches, r.Routes, r.Wall.Round(time.Second), float64(r.Rows)/r.Wall.Seconds(), r.Bad, float64(r.StateBytes)/(1<<20))
	first := r.RSS[0]
	if len(r.RSS) > 1 {
		first = r.RSS[1]
	}
	fmt.Fprintf(w, "  proxy RSS: idle %s; after the first batch (%d rows) %s; at 10%% (%d) %s; at 50%% (%d) %s; at the end (%d) %s\n",
		mib(r.RSS[0]), first.Rows, mib(first), r.At(r.Rows/10).Rows, mib(r.At(r.Rows/10)), r.At(r.Rows/2).Rows, mib(r.At(r.Rows/2)),
		r.RSS[len(r.RSS)-1].Rows, mib(r.RSS[len(r.RSS)-1]))
	fmt.Fprintf(w, "  largest RSS from 10%% on ÷ RSS at 10%% = %.3f (goal: flat within 20%%, ≤ 1.200)\n", r.Flat())
}
