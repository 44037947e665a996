package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// demoCmd starts the simulator in-process on the three-org preset and runs
// a judge-shaped job through the same engine as `sluice run`. It needs no
// keys: it uses the simulator's fake ones, never the user's.
func demoCmd() *cobra.Command {
	var (
		flags simFlags
		n     int
		tour  bool
		keep  string
		sf    seeFlags
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a 20,000-request judge job on the built-in simulator (no keys needed)",
		Long: `demo starts the simulator in-process (three-org preset, time-scaled so a
few minutes of API time take seconds), writes a judge-shaped request file of
--n requests, runs it through the same engine as 'sluice run' with the live
display, and prints the report and what the simulated API saw.

--tour instead walks through single calls: a message, a stream, errors and a
batch round trip.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.build(cmd)
			if err != nil {
				return err
			}
			srv, err := sim.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			go srv.Serve(ln)
			defer srv.Shutdown(context.Background())
			base := "http://" + ln.Addr().String()
			if tour {
				d := &demo{out: cmd.OutOrStdout(), base: base, key: cfg.Orgs[0].Keys[0].Key, ctx: cmd.Context()}
				fmt.Fprintf(d.out, "sluice demo --tour: simulator (preset %s, time scale %g) on %s\n\n", flags.preset, cfg.TimeScale, base)
				return d.run()
			}
			return runDemoJob(cmd, srv, cfg, base, n, keep, &sf)
		},
	}
	flags.register(cmd, 10)
	cmd.Flags().IntVar(&n, "n", 20000, "number of judge requests")
	cmd.Flags().BoolVar(&tour, "tour", false, "show single calls instead of a job")
	sf.register(cmd.Flags(), false)
	cmd.Flags().StringVar(&keep, "dir", "", "keep the request, results and report files here (default: a temporary directory)")
	return cmd
}

// runDemoJob writes the workload and runs it against the in-process
// simulator with the simulator's own keys.
func runDemoJob(cmd *cobra.Command, srv *sim.Server, cfg sim.Config, base string, n int, dir string, sf *seeFlags) error {
	keep := dir
	out := cmd.ErrOrStderr()
	log := newLogger()
	resume := "sluice demo --dir " + dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("demo: --dir: %w", err)
		}
	} else {
		resume = "sluice demo --dir DIR (a temporary directory is deleted at exit)"
		tmp, err := os.MkdirTemp("", "sluice-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	in, res, rep := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "report.json")
	if err := (workload.Judge{N: n, Seed: 7}).WriteFile(in); err != nil {
		return err
	}
	os.Remove(res)
	os.Remove(res + ".history")
	see, err := sf.start("demo", res, res+".history", "sluice demo: "+in+" → "+res, out, log)
	if err != nil {
		return err
	}
	defer see.stop()
	pool, err := simKeys(cfg)
	if err != nil {
		return err
	}
	c := client.New(client.Config{BaseURL: base, MaxConns: 512})
	k := cfg.TimeScale
	dc := dispatch.Config{Client: c, Keys: pool.Keys(), Logger: log}
	fmt.Fprintf(out, "sluice demo: simulator on %s (preset three-org, time scale %g: limits ×%g, latencies ÷%g)\n", base, k, k, k)
	fmt.Fprintf(out, "  %d judge requests (Sonnet 4.5, rubric + question/answer, max_tokens 256) in %s\n\n", n, in)
	start := time.Now()
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	interval := 2 * time.Second
	if tty {
		interval = 250 * time.Millisecond
	}
	// The planner sees the simulated world as it is (time scale included).
	world := plan.FromModel(cfg.Model(), nil)
	rt := routeFlags{route: "auto", prefer: "latency"}.routerScaled(pool.Keys(), nil, &world, k, log)
	opts := job.Options{
		Input: in, Output: res, Dispatch: dc, Progress: out, Terminal: tty,
		ProgressInterval: interval, Logger: log, Command: resume, Redact: pool.Redact,
	}
	opts.RoutedBy(rt)
	html := ""
	if keep != "" {
		html = reportPathFor(res)
	}
	err = runJob(cmd.Context(), opts, rep, see, html)
	st := srv.Stats()
	var admitted, limited int64
	for _, o := range st.Orgs {
		for _, p := range o.Pools {
			admitted += p.Admitted
			limited += p.RateLimited
		}
	}
	fmt.Fprintf(out, "\nthe simulated API saw: %d calls admitted, %d answered 429, %d distinct requests answered, %d answered more than once\n",
		admitted, limited, st.Bodies.DistinctAnswered, st.Bodies.AnsweredMoreThanOnce)
	fmt.Fprintf(out, "in %s of real time = %s of API time at time scale %g\n", time.Since(start).Round(time.Millisecond),
		time.Duration(float64(time.Since(start))*k).Round(time.Second), k)
	if see.url != "" && tty && cmd.Context().Err() == nil {
		// A newcomer may have opened the page late: it stays until Ctrl-C.
		fmt.Fprintf(out, "\nthe run is over; its live view stays at %s until you press Ctrl-C\n", see.url)
		<-cmd.Context().Done()
	}
	return err
}

type demo struct {
	out  io.Writer
	base string
	key  string
	ctx  context.Context
}

func (d *demo) do(method, path string, body any) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(d.ctx, method, d.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set(api.HeaderAPIKey, d.key)
	req.Header.Set(api.HeaderVersion, api.VersionDefault)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (d *demo) headers(h http.Header) {
	var names []string
	for k := range h {
		if l := strings.ToLower(k); strings.HasPrefix(l, "anthropic-") || l == "request-id" || l == "retry-after" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(d.out, "  %s: %s\n", strings.ToLower(k), h.Get(k))
	}
}

func (d *demo) run() error {
	msg := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64,
		"messages": []map[string]any{{"role": "user", "content": "Rate this answer from 0 to 100."}}}

	fmt.Fprintln(d.out, "1. POST /v1/messages")
	resp, body, err := d.do("POST", "/v1/messages", msg)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  HTTP %d\n", resp.StatusCode)
	d.headers(resp.Header)
	fmt.Fprintf(d.out, "  %s\n\n", body)

	fmt.Fprintln(d.out, "2. the same request with stream: true (server-sent events)")
	msg["stream"] = true
	resp, body, err = d.do("POST", "/v1/messages", msg)
	if err != nil {
		return err
	}
	events := map[string]int{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			if events[ev] == 0 {
				order = append(order, ev)
			}
			events[ev]++
		}
	}
	fmt.Fprintf(d.out, "  HTTP %d, %s\n  events:", resp.StatusCode, resp.Header.Get("content-type"))
	for _, ev := range order {
		fmt.Fprintf(d.out, " %s×%d", ev, events[ev])
	}
	fmt.Fprint(d.out, "\n\n")
	delete(msg, "stream")

	fmt.Fprintln(d.out, "3. an unknown key, then a missing anthropic-version")
	key := d.key
	d.key = "sk-ant-fake-not-a-key"
	resp, body, err = d.do("POST", "/v1/messages", msg)
	d.key = key
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  HTTP %d %s\n", resp.StatusCode, body)
	req, _ := http.NewRequestWithContext(d.ctx, "POST", d.base+"/v1/messages", strings.NewReader(`{}`))
	req.Header.Set(api.HeaderAPIKey, d.key)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		return err
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Fprintf(d.out, "  HTTP %d %s\n", resp.StatusCode, body)

	fmt.Fprintln(d.out, "\n4. a Message Batch of 3 requests: create, poll, results")
	var reqs []api.BatchRequest
	for i := range 3 {
		p, _ := json.Marshal(map[string]any{"model": "claude-haiku-4-5", "max_tokens": 32,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("item %d", i)}}})
		reqs = append(reqs, api.BatchRequest{CustomID: fmt.Sprintf("item-%d", i), Params: p})
	}
	resp, body, err = d.do("POST", "/v1/messages/batches", api.BatchCreate{Requests: reqs})
	if err != nil {
		return err
	}
	var b api.MessageBatch
	if err := json.Unmarshal(body, &b); err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("batch create: HTTP %d %s", resp.StatusCode, body)
	}
	fmt.Fprintf(d.out, "  created %s, %s, counts %+v\n", b.ID, b.ProcessingStatus, b.RequestCounts)
	for b.ProcessingStatus != api.BatchEnded {
		time.Sleep(100 * time.Millisecond)
		resp, body, err = d.do("GET", "/v1/messages/batches/"+b.ID, nil)
		if err != nil {
			return err
		}
		if resp.StatusCode == 404 {
			fmt.Fprintln(d.out, "  retrieve: 404 (read-after-write window just after create), retrying")
			continue
		}
		json.Unmarshal(body, &b)
	}
	fmt.Fprintf(d.out, "  ended, counts %+v\n", b.RequestCounts)
	_, body, err = d.do("GET", "/v1/messages/batches/"+b.ID+"/results", nil)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var r api.BatchResultLine
		json.Unmarshal([]byte(line), &r)
		text := ""
		if r.Result.Message != nil && len(r.Result.Message.Content) > 0 {
			text = r.Result.Message.Content[0].Text
			if len(text) > 60 {
				text = text[:60] + "…"
			}
		}
		fmt.Fprintf(d.out, "  %s %s %q\n", r.CustomID, r.Result.Type, text)
	}

	_, body, _ = d.do("GET", "/_sim/stats", nil)
	var st sim.Stats
	json.Unmarshal(body, &st)
	fmt.Fprintf(d.out, "\n5. GET /_sim/stats: %d distinct requests answered, %d answered more than once\n",
		st.Bodies.DistinctAnswered, st.Bodies.AnsweredMoreThanOnce)
	return nil
}

// simKeys loads the simulator's fake keys as a user's environment would
// hold them: its first three organizations' first keys as
// ANTHROPIC_API_KEY, ANTHROPIC_BATCH_KEY and ANTHROPIC_API_KEY_LOW_PRIO.
func simKeys(cfg sim.Config) (*keys.Pool, error) {
	env := map[string]string{}
	for i, name := range []string{keys.EnvAPIKey, keys.EnvBatch, keys.EnvLowPrio}[:min(len(cfg.Orgs), 3)] {
		env[name] = cfg.Orgs[i].Keys[0].Key
	}
	return keys.Load(keys.LoadOptions{Env: keys.EnvMap(env), NoDotEnv: true})
}
