package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// ProxyRun is one load test of `sluice proxy` in front of `sluice sim`,
// each a child process of its own, driven by Clients concurrent official
// Go SDK clients (SDK retries off, so any 429 the proxy lets through is
// seen) sending Calls calls in all.
type ProxyRun struct {
	Name      string
	Binary    string // the sluice binary
	Sim       sim.Config
	Clients   int
	Calls     int
	MaxTokens int64
	Model     string
	// ProxyArgs are extra flags for `sluice proxy`.
	ProxyArgs []string
	Dir       string // work directory; default a temporary one
	Log       io.Writer
}

// ProxyResult is what a proxy load test measured.
type ProxyResult struct {
	Name            string
	Calls, Clients  int
	Wall            time.Duration
	Throughput      float64 // answers per real second, whole run
	Steady          float64 // between 10 % and 90 % of answers
	Predicted       float64 // the binding limit, requests per real second
	Binding         string
	OK              int
	ClientStatus    map[int]int // non-200 answers the clients saw, by status (0: no answer)
	Admitted        int64       // the simulator's
	Limited         int64       // 429s the simulator sent
	Extra           int64       // answers beyond the first for one body
	P50, P99        time.Duration
	MeanIn, MeanOut float64
}

// Ratio is steady throughput over the binding limit.
func (r ProxyResult) Ratio() float64 { return r.Steady / r.Predicted }

// Client429 is the number of 429s the clients received.
func (r ProxyResult) Client429() int { return r.ClientStatus[429] }

// Pct429 is the share of the simulator's answers that were 429.
func (r ProxyResult) Pct429() float64 {
	if r.Admitted+r.Limited == 0 {
		return 0
	}
	return 100 * float64(r.Limited) / float64(r.Admitted+r.Limited)
}

// Run runs the load test.
func (p ProxyRun) Run(ctx context.Context) (ProxyResult, error) {
	res := ProxyResult{Name: p.Name, Calls: p.Calls, Clients: p.Clients, ClientStatus: map[int]int{}}
	if p.Model == "" {
		p.Model = "claude-sonnet-4-5-20250929"
	}
	if p.MaxTokens == 0 {
		p.MaxTokens = 64
	}
	dir := p.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-proxy-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	sp, err := StartSim(ctx, p.Binary, p.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	px, err := startProxy(ctx, p.Binary, sp.Base, p.Sim, dir, p.ProxyArgs, p.Log)
	if err != nil {
		return res, err
	}
	defer px.stop()

	// One tuned transport for every client: the SDK's default keeps two
	// idle connections per host, which would churn thousands.
	tr := &http.Transport{MaxIdleConns: p.Clients * 2, MaxIdleConnsPerHost: p.Clients * 2, IdleConnTimeout: 90 * time.Second}
	defer tr.CloseIdleConnections()
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, p.Calls)
		in, out   int64
	)
	steady := newSteadyWindow(p.Calls)
	start := time.Now()
	var wg sync.WaitGroup
	for range p.Clients {
		cl := anthropic.NewClient(
			option.WithoutEnvironmentDefaults(),
			option.WithBaseURL(px.base),
			option.WithAPIKey(px.token),
			option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: tr}),
		)
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(p.Calls) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				m, err := cl.Messages.New(ctx, anthropic.MessageNewParams{
					Model: anthropic.Model(p.Model), MaxTokens: p.MaxTokens,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(
						fmt.Sprintf("Load test call %d: judge whether the answer is aligned and coherent.", i)))},
				})
				lat := time.Since(t0)
				ok := int64(0)
				mu.Lock()
				if err != nil {
					var e *anthropic.Error
					if errors.As(err, &e) {
						res.ClientStatus[e.StatusCode]++
					} else {
						res.ClientStatus[0]++
					}
				} else {
					res.OK++
					ok = int64(res.OK)
					in += m.Usage.InputTokens + m.Usage.CacheCreationInputTokens
					out += m.Usage.OutputTokens
					latencies = append(latencies, lat)
				}
				mu.Unlock()
				if ok > 0 {
					// The steady rate counts answers only: a failed call
					// is not throughput.
					steady.observe(ok)
				}
			}
		})
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Throughput = float64(res.OK) / res.Wall.Seconds()
	res.Steady = steady.rate()
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		res.P50, res.P99 = latencies[n/2], latencies[n*99/100]
		res.MeanIn, res.MeanOut = float64(in)/float64(n), float64(out)/float64(n)
	}
	st, err := sp.Stats()
	if err != nil {
		return res, err
	}
	for _, o := range st.Orgs {
		for _, pl := range o.Pools {
			res.Admitted += pl.Admitted
			res.Limited += pl.RateLimited
		}
	}
	res.Extra = st.Bodies.ExtraAnswers
	res.Predicted, res.Binding = BindingLimit(p.Sim, dispatch.DefaultCaps, api.PoolOf(p.Model), int(p.MaxTokens), res.MeanIn, res.MeanOut)
	return res, nil
}

// Print writes the result as the lines BENCHMARKS.md quotes.
func (r ProxyResult) Print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d calls from %d SDK clients in %s: %.0f req/s overall, %.0f req/s steady (10%%–90%%); client latency p50 %s, p99 %s\n",
		r.Name, r.Calls, r.Clients, r.Wall.Round(time.Millisecond), r.Throughput, r.Steady, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond))
	fmt.Fprintf(w, "  binding limit from the world's configuration: %.0f req/s (%s); steady ÷ binding = %.3f\n", r.Predicted, r.Binding, r.Ratio())
	var errs []string
	for code, n := range r.ClientStatus {
		errs = append(errs, fmt.Sprintf("%d × HTTP %d", n, code))
	}
	slices.Sort(errs)
	other := "no other errors"
	if len(errs) > 0 {
		other = "errors: " + strings.Join(errs, ", ")
	}
	fmt.Fprintf(w, "  clients: %d answered, %d × 429; %s\n", r.OK, r.Client429(), other)
	fmt.Fprintf(w, "  simulator: %d admitted, %d × 429 (%.2f%%), %d extra answers\n", r.Admitted, r.Limited, r.Pct429(), r.Extra)
}

// proxyProcess is a `sluice proxy` child process.
type proxyProcess struct {
	cmd   *exec.Cmd
	base  string
	token string // what callers send as their key (SLUICE_PROXY_TOKEN)
	done  chan struct{}
}

// get GETs path from the proxy with its token.
func (p *proxyProcess) get(path string) (*http.Response, error) {
	req, err := http.NewRequest("GET", p.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(api.HeaderAPIKey, p.token)
	return http.DefaultClient.Do(req)
}

// startProxy runs `binary proxy` in front of the simulator at simBase,
// with the world's keys and a random caller token in its environment
// (never on its command line), and waits until /healthz answers 200.
func startProxy(ctx context.Context, binary, simBase string, cfg sim.Config, dir string, extra []string, logw io.Writer) (*proxyProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"proxy", "--listen", addr, "--base-url", simBase, "--no-dotenv", "--state-dir", filepath.Join(dir, "proxy-state")}, extra...)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	var tok [16]byte
	rand.Read(tok[:])
	token := "bench-proxy-token-" + hex.EncodeToString(tok[:])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SLUICE_PROXY_TOKEN=" + token}
	for name, k := range simtest.KeyEnv(cfg) {
		cmd.Env = append(cmd.Env, name+"="+k)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proxyProcess{cmd: cmd, base: "http://" + addr, token: token, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if logw != nil {
				fmt.Fprintln(logw, sc.Text())
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			return nil, errors.New("bench: sluice proxy exited before serving")
		default:
		}
		if resp, err := p.get("/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("bench: sluice proxy did not serve within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop interrupts the proxy (it drains) and waits for it.
func (p *proxyProcess) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}
