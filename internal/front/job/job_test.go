package job_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/format/results"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

type env struct {
	t      *testing.T
	sim    *sim.Server
	base   string
	dir    string
	in     string
	out    string
	logBuf *bytes.Buffer
}

func newEnv(t *testing.T, n int, mutate func(*sim.Config)) *env {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) {
		c.TimeScale = 200
		if mutate != nil {
			mutate(c)
		}
	})
	dir := t.TempDir()
	e := &env{t: t, sim: s, base: base, dir: dir,
		in: filepath.Join(dir, "in.jsonl"), out: filepath.Join(dir, "out.jsonl"), logBuf: &bytes.Buffer{}}
	if n > 0 {
		if err := (workload.Judge{N: n, Seed: 3}).WriteFile(e.in); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) options() job.Options {
	pool, err := simtest.Pool(sim.Default())
	if err != nil {
		e.t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: e.base, MaxConns: 512})
	return job.Options{
		Input: e.in, Output: e.out, SyncOff: true,
		Logger: slog.New(slog.NewTextHandler(e.logBuf, nil)),
		Dispatch: dispatch.Config{Client: c, Keys: pool.Keys(),
			Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}},
	}
}

func (e *env) run(o job.Options) (*job.Report, error) {
	return job.Run(e.t.Context(), o)
}

// readResults returns the results file's records by custom_id, failing on
// a duplicate or a malformed line.
func (e *env) readResults() map[string]api.ResultRecord {
	e.t.Helper()
	f, err := os.Open(e.out)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	got := map[string]api.ResultRecord{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r api.ResultRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatalf("bad results line %q: %v", sc.Text(), err)
		}
		if _, dup := got[r.CustomID]; dup {
			e.t.Fatalf("custom_id %s written twice", r.CustomID)
		}
		got[r.CustomID] = r
	}
	return got
}

// inputParams returns the params of every input line by custom_id.
func (e *env) inputParams() map[string][]byte {
	e.t.Helper()
	b, err := os.ReadFile(e.in)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r api.BatchRequest
		if json.Unmarshal(line, &r) == nil {
			out[r.CustomID] = r.Params
		}
	}
	return out
}

// checkExactlyOnce asserts one succeeded result per input line whose
// answer is the simulator's answer to that line's params.
func (e *env) checkExactlyOnce() { e.t.Helper(); e.checkOnce(false) }

// checkExactlyOnceAllowCache is checkExactlyOnce where rows may also have
// been answered from the response cache (no org then).
func (e *env) checkExactlyOnceAllowCache() { e.t.Helper(); e.checkOnce(true) }

func (e *env) checkOnce(allowCache bool) {
	e.t.Helper()
	in, got := e.inputParams(), e.readResults()
	if len(got) != len(in) {
		e.t.Fatalf("%d results for %d requests", len(got), len(in))
	}
	for id, params := range in {
		r, ok := got[id]
		if !ok {
			e.t.Fatalf("no result for %s", id)
		}
		var res api.BatchResult
		if err := json.Unmarshal(r.Result, &res); err != nil || res.Type != api.ResultSucceeded {
			e.t.Fatalf("%s: result %s", id, r.Result)
		}
		if !strings.HasPrefix(res.Message.Content[0].Text, sim.AnswerTag(params)) {
			e.t.Fatalf("%s: answer belongs to another request", id)
		}
		if r.Sluice == nil || r.Sluice.Class != api.ClassOK || (r.Sluice.Org == "" && !(allowCache && r.Sluice.Route == route.Cache)) || r.Sluice.ParamsHash == "" {
			e.t.Fatalf("%s: metadata %+v", id, r.Sluice)
		}
	}
}

func (e *env) simCalls() int64 {
	var n int64
	for _, o := range e.sim.Stats().Orgs {
		for _, k := range o.Keys {
			n += k.Calls
		}
	}
	return n
}

func TestRunThenResumeSendsNothing(t *testing.T) {
	e := newEnv(t, 2000, nil)
	rep, err := e.run(e.options())
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	if rep.Succeeded != 2000 || rep.Requests.Written != 2000 || rep.Cost.Total.USD <= 0 {
		t.Fatalf("report %+v", rep)
	}
	calls := e.simCalls()
	rep, err = e.run(e.options())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.AlreadyDone != 2000 || rep.Requests.Written != 0 || e.simCalls() != calls {
		t.Fatalf("a finished run re-run must send nothing: %+v, calls %d → %d", rep.Requests, calls, e.simCalls())
	}
	e.checkExactlyOnce()
}

func TestMalformedInputStopsBeforeSending(t *testing.T) {
	e := newEnv(t, 0, nil)
	lines := []string{
		`{"custom_id":"ok-1","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"bad id","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok-1","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"sys","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"system","content":"x"}]}}`,
		`not json`,
		`{"custom_id":"nomax","params":{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"x"}]}}`,
	}
	os.WriteFile(e.in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	_, err := e.run(e.options())
	var inv *job.InvalidInputError
	if !errors.As(err, &inv) || inv.Total != 5 {
		t.Fatalf("err = %v, want 5 invalid lines", err)
	}
	msg := err.Error()
	for _, want := range []string{"in.jsonl:2:", "in.jsonl:3: duplicate custom_id", "in.jsonl:4:", "system", "in.jsonl:5:", "in.jsonl:6:", "max_tokens", "--skip-invalid"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if e.simCalls() != 0 {
		t.Fatalf("%d calls reached the API; nothing may be sent for a malformed file", e.simCalls())
	}
	if _, err := os.Stat(e.out); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("no results file should be created")
	}

	// With --skip-invalid the lines with a usable id become errored results.
	o := e.options()
	o.SkipInvalid = true
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	got := e.readResults()
	if len(got) != 3 { // ok-1, sys, nomax: "bad id" and "not json" have no usable id
		t.Fatalf("results %v", got)
	}
	if r := got["sys"]; r.Sluice.Class != api.ClassInvalidInput || !strings.Contains(string(r.Result), "errored") {
		t.Fatalf("sys: %s %+v", r.Result, r.Sluice)
	}
}

func TestTornTailIsRepaired(t *testing.T) {
	e := newEnv(t, 300, nil)
	if _, err := e.run(e.options()); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash mid-write: cut the last line in half.
	b, _ := os.ReadFile(e.out)
	lines := bytes.SplitAfter(b, []byte("\n"))
	last := lines[len(lines)-2]
	torn := append(bytes.Join(lines[:len(lines)-2], nil), last[:len(last)/2]...)
	os.WriteFile(e.out, torn, 0o644)
	rep, err := e.run(e.options())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Written != 1 {
		t.Fatalf("resume wrote %d, want the 1 torn request", rep.Requests.Written)
	}
	e.checkExactlyOnce()
}

func TestChangedRequestRefused(t *testing.T) {
	e := newEnv(t, 50, nil)
	if _, err := e.run(e.options()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(e.in)
	changed := bytes.Replace(b, []byte(`"max_tokens":256`), []byte(`"max_tokens":300`), 1)
	os.WriteFile(e.in, changed, 0o644)
	_, err := e.run(e.options())
	var ce *job.ChangedError
	if !errors.As(err, &ce) || ce.Total != 1 {
		t.Fatalf("err = %v, want one changed request", err)
	}
	o := e.options()
	o.AllowChanged = true
	rep, err := e.run(o)
	if err != nil || rep.Requests.Written != 1 {
		t.Fatalf("allow-changed: %v, wrote %d", err, rep.Requests.Written)
	}
	e.checkExactlyOnce()
}

func TestTransportFailuresAreRedrivenOnResume(t *testing.T) {
	// An API that fails every call: each lane's breaker opens, and the
	// requests spend their failure budgets one probe at a time.
	e := newEnv(t, 20, func(c *sim.Config) { c.Faults.P500 = 1 })
	o := e.options()
	o.Dispatch.Retry.MaxFailed = 2
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errored.Transport != 20 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range e.readResults() {
		if r.Sluice.Class != api.ClassTransport || !strings.Contains(string(r.Result), `"errored"`) {
			t.Fatalf("%s: %s %+v", r.CustomID, r.Result, r.Sluice)
		}
	}
	// The API recovers; the same command drives only those rows again.
	healthy := newEnv(t, 0, nil)
	e.sim, e.base = healthy.sim, healthy.base
	rep, err = e.run(e.options())
	if err != nil || rep.Requests.Redriven != 20 || rep.Succeeded != 20 {
		t.Fatalf("resume: %v %+v", err, rep)
	}
	e.checkExactlyOnce()
}

func TestInterruptThenResume(t *testing.T) {
	e := newEnv(t, 3000, func(c *sim.Config) { c.TimeScale = 20 })
	o := e.options()
	var durable atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for {
			if b, _ := os.ReadFile(e.out); bytes.Count(b, []byte("\n")) > 500 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	rep, err := job.Run(ctx, o)
	if !errors.Is(err, job.ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	if !strings.Contains(err.Error(), "re-run") {
		t.Fatalf("the message must say how to resume: %v", err)
	}
	durable.Store(int64(rep.Requests.Written))
	if _, err := e.run(e.options()); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	if b := e.sim.Stats().Bodies; b.AnsweredMoreThanOnce != 0 {
		t.Fatalf("a graceful interrupt must not pay twice: %+v", b)
	}
}

func TestKeysNeverWritten(t *testing.T) {
	e := newEnv(t, 200, nil)
	o := e.options()
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	repPath := filepath.Join(e.dir, "report.json")
	if err := rep.WriteJSON(repPath); err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	rep.Summary(&sum)
	outputs := map[string][]byte{"summary": sum.Bytes(), "log": e.logBuf.Bytes()}
	outputs["results"], _ = os.ReadFile(e.out)
	outputs["report"], _ = os.ReadFile(repPath)
	for name, b := range outputs {
		for _, k := range []string{sim.FakeKeyHighPrio, sim.FakeKeyBatch, sim.FakeKeyLowPrio} {
			if bytes.Contains(b, []byte(k)) {
				t.Fatalf("the %s contains a key", name)
			}
		}
	}
	if !bytes.Contains(outputs["report"], []byte(`"last4": "0001"`)) {
		t.Fatalf("the report should name keys by label and last 4: %s", outputs["report"])
	}
}

// TestSkipInvalidDuplicateGetsOneResult: a valid line then an invalid line
// reusing its id must give that id one result, the valid one's.
func TestSkipInvalidDuplicateGetsOneResult(t *testing.T) {
	e := newEnv(t, 0, nil)
	lines := []string{
		`{"custom_id":"x","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"x","params":{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}}`,
		`{"custom_id":"y","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"there"}]}}`,
	}
	os.WriteFile(e.in, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	o := e.options()
	o.SkipInvalid = true
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	got := e.readResults() // fails on a duplicate
	if len(got) != 2 || got["x"].Sluice.Class != api.ClassOK {
		t.Fatalf("results %+v", got)
	}
	if _, err := e.run(o); err != nil {
		t.Fatalf("a re-run of a finished job must succeed: %v", err)
	}
}

// TestForeignRowsDoNotHideWork: rows of another input in the results file
// do not count as this input's work.
func TestForeignRowsDoNotHideWork(t *testing.T) {
	e := newEnv(t, 5, nil)
	foreign := `{"custom_id":"other-%d","result":{"type":"succeeded","message":{}},"sluice":{"params_hash":"ab","class":"transport"}}` + "\n"
	var b strings.Builder
	for i := range 5 {
		b.WriteString(strings.Replace(foreign, "%d", string(rune('0'+i)), 1))
	}
	os.WriteFile(e.out, []byte(b.String()), 0o644)
	rep, err := e.run(e.options())
	if err != nil || rep.Requests.Written != 5 {
		t.Fatalf("err %v, wrote %d; want the 5 input requests run", err, rep.Requests.Written)
	}
	got := e.readResults()
	if len(got) != 10 {
		t.Fatalf("%d rows; the 5 foreign rows must be kept as they are", len(got))
	}
}

// TestFixedInvalidLineIsRun: a line recorded as invalid is run once fixed.
func TestFixedInvalidLineIsRun(t *testing.T) {
	e := newEnv(t, 0, nil)
	bad := `{"custom_id":"z","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"system","content":"hi"}]}}` + "\n"
	os.WriteFile(e.in, []byte(bad), 0o644)
	o := e.options()
	o.SkipInvalid = true
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	if c := e.readResults()["z"].Sluice.Class; c != api.ClassInvalidInput {
		t.Fatalf("class %s", c)
	}
	os.WriteFile(e.in, []byte(strings.Replace(bad, `"system"`, `"user"`, 1)), 0o644)
	rep, err := e.run(e.options())
	if err != nil || rep.Succeeded != 1 {
		t.Fatalf("fixed line: %v %+v", err, rep)
	}
	e.checkExactlyOnce()
}

// TestMaxCostStopsAdmitting: the run stops once the ledger reaches the
// budget; what was in flight finishes; a re-run resumes.
func TestMaxCostStopsAdmitting(t *testing.T) {
	e := newEnv(t, 3000, func(c *sim.Config) { c.TimeScale = 20 })
	o := e.options()
	o.MaxCost = 0.5 // about 150 judge calls
	rep, err := e.run(o)
	if !errors.Is(err, job.ErrInterrupted) || !strings.Contains(err.Error(), "max-cost") {
		t.Fatalf("err = %v", err)
	}
	// Overshoot is bounded by what was in flight: at most 3 orgs × 100
	// requests, each at most 400 input and 256 output tokens of Sonnet
	// ($0.005). The whole file would cost about $8.
	if spent := rep.Cost.Total.USD; spent < o.MaxCost || spent > o.MaxCost+300*0.005 {
		t.Fatalf("spent $%.3f for a $%.2f budget", spent, o.MaxCost)
	}
	if _, err := e.run(e.options()); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
}

// TestHaltHonoursGrace: a halt (here --max-cost) with attempts in flight
// that would take minutes lets them finish only within Grace, then cuts
// them; an interrupt while a halt drains cuts them at once. Either way the
// run returns, and a re-run finishes the job with each request once.
func TestHaltHonoursGrace(t *testing.T) {
	for _, how := range []string{"grace", "interrupt"} {
		t.Run(how, func(t *testing.T) {
			// Every fourth answer takes 1000× as long: about 100 s here.
			e := newEnv(t, 1000, func(c *sim.Config) { c.TimeScale = 20; c.Faults.PSlow, c.Faults.SlowFactor = 0.25, 1000 })
			o := e.options()
			o.MaxCost = 0.2
			o.Grace = time.Hour
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if how == "grace" {
				o.Grace = 200 * time.Millisecond
			} else {
				var once sync.Once
				o.Logger = slog.New(hookHandler{slog.NewTextHandler(e.logBuf, nil), func(msg string) {
					if strings.HasPrefix(msg, "stopping: --max-cost") {
						once.Do(func() { time.AfterFunc(100*time.Millisecond, cancel) })
					}
				}})
			}
			done := make(chan error, 1)
			go func() { _, err := job.Run(ctx, o); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "max-cost") {
					t.Fatalf("err = %v, want the max-cost halt", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the halted run did not return: its attempts in flight were not cut")
			}
			// The re-run, against a world without the slow answers.
			again := e.options()
			again.Dispatch.Client = client.New(client.Config{BaseURL: newEnv(t, 0, nil).base, MaxConns: 512})
			if _, err := e.run(again); err != nil {
				t.Fatal(err)
			}
			e.checkExactlyOnce()
		})
	}
}

// hookHandler calls onMsg with every record's message.
type hookHandler struct {
	slog.Handler
	onMsg func(string)
}

func (h hookHandler) Handle(ctx context.Context, r slog.Record) error {
	h.onMsg(r.Message)
	return h.Handler.Handle(ctx, r)
}

func (h hookHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return hookHandler{h.Handler.WithAttrs(as), h.onMsg}
}

func (h hookHandler) WithGroup(g string) slog.Handler {
	return hookHandler{h.Handler.WithGroup(g), h.onMsg}
}

func batchRouting(share float64) func(jsonl.Summary, int) (route.Routing, error) {
	via := route.Batch
	if share < 1 {
		via = route.Split
	}
	return func(jsonl.Summary, int) (route.Routing, error) {
		return route.Routing{Route: via, BatchShare: share, Why: "test",
			Batch: batch.Config{ChunkSize: 200, WindowPerOrg: 600, PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond}}, nil
	}
}

func batchesCreated(s *sim.Server) (n int64) {
	for _, o := range s.Stats().Orgs {
		n += o.Batches.Created
	}
	return n
}

// batchRequests is how many requests the simulator's batches held in all.
func batchRequests(s *sim.Server) (n int64) {
	for _, o := range s.Stats().Orgs {
		n += o.Batches.Requests
	}
	return n
}

func TestBatchRoute(t *testing.T) {
	e := newEnv(t, 2000, func(c *sim.Config) { c.TimeScale = 2000 })
	o := e.options()
	o.Plan = batchRouting(1)
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	for id, r := range e.readResults() {
		if r.Sluice.Route != route.Batch || r.Sluice.BatchID == "" || !strings.Contains(string(r.Result), `"service_tier":"batch"`) {
			t.Fatalf("%s: %+v %s", id, r.Sluice, r.Result)
		}
	}
	// Chunks of 200 less the run's fingerprint (0…11): 10 or 11 batches.
	if n, reqs := batchesCreated(e.sim), batchRequests(e.sim); n < 10 || n > 11 || reqs != 2000 {
		t.Fatalf("%d batches of %d requests in all created for 2000 requests in chunks of 200", n, reqs)
	}
	if rep.Cost.Total.BatchUSD <= 0 || rep.Cost.Total.SyncUSD != 0 || rep.Route != route.Batch {
		t.Fatalf("report %+v", rep)
	}
	// Every ended batch's turnaround is counted, by its org, for the
	// observations.
	var ended, reqs int64
	for label, ta := range rep.Batch.Turnaround {
		if ta.OrgID == "" || ta.Seconds <= 0 {
			t.Fatalf("%s: turnaround %+v", label, ta)
		}
		ended, reqs = ended+ta.Batches, reqs+ta.Requests
	}
	if ended != batchesCreated(e.sim) || reqs != 2000 {
		t.Fatalf("turnaround of %d batches (%d requests); %d were created for 2000", ended, reqs, batchesCreated(e.sim))
	}
}

func TestSplitRoute(t *testing.T) {
	e := newEnv(t, 1000, func(c *sim.Config) { c.TimeScale = 2000 })
	o := e.options()
	o.Plan = batchRouting(0.5)
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	routes := map[string]int{}
	for _, r := range e.readResults() {
		routes[r.Sluice.Route]++
	}
	if routes["batch"] < 350 || routes["sync"] < 350 {
		t.Fatalf("routes %v, want about half each", routes)
	}
}

// TestBatchInterruptThenResume: stopping mid-batch then re-running pays for
// no batch twice and writes every id once.
func TestBatchInterruptThenResume(t *testing.T) {
	e := newEnv(t, 2000, func(c *sim.Config) { c.TimeScale = 500 })
	o := e.options()
	o.Plan = batchRouting(1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for {
			if b, _ := os.ReadFile(e.out); bytes.Count(b, []byte("\n")) >= 400 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	_, err := job.Run(ctx, o)
	if !errors.Is(err, job.ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	before := batchesCreated(e.sim)
	o = e.options()
	o.Plan = batchRouting(1)
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	if n, reqs := batchesCreated(e.sim), batchRequests(e.sim); reqs != 2000 || n > 12 {
		t.Fatalf("%d batches of %d requests created in all (%d before the resume); want 2000 requests: none twice", n, reqs, before)
	}
}

// TestResumeOnAnotherRoute: a run interrupted with batches in flight and
// resumed on the sync route lets those batches answer their requests
// instead of paying for them again on sync.
func TestResumeOnAnotherRoute(t *testing.T) {
	e := newEnv(t, 1000, func(c *sim.Config) { c.TimeScale = 500 })
	o := e.options()
	o.Plan = batchRouting(1)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for {
			if b, _ := os.ReadFile(e.out); bytes.Count(b, []byte("\n")) >= 200 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if _, err := job.Run(ctx, o); !errors.Is(err, job.ErrInterrupted) {
		t.Fatalf("err = %v", err)
	}
	o = e.options() // no Plan: the sync route
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	if b := e.sim.Stats().Bodies; b.AnsweredMoreThanOnce != 0 {
		t.Fatalf("requests paid twice after a change of route: %+v", b)
	}
}

// TestSecondRunOnOneOutputIsRefused: while one run holds a results file,
// another on the same file stops before sending anything.
func TestSecondRunOnOneOutputIsRefused(t *testing.T) {
	e := newEnv(t, 50, nil)
	unlock, err := results.Lock(e.out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.run(e.options()); !errors.Is(err, results.ErrLocked) || e.simCalls() != 0 {
		t.Fatalf("a run on a locked output: %v, %d calls", err, e.simCalls())
	}
	unlock()
	if _, err := e.run(e.options()); err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
}

// TestRunWaitsForALockLetGoSoon: a run started while another holder still
// has the results file's lock (a run killed a moment ago, not yet torn
// down) says it waits, and runs once the lock is let go within LockWait.
func TestRunWaitsForALockLetGoSoon(t *testing.T) {
	e := newEnv(t, 50, nil)
	unlock, err := results.Lock(e.out)
	if err != nil {
		t.Fatal(err)
	}
	o := e.options()
	o.LockWait = 10 * time.Second
	said := 0
	// The holder lets go once the run has said it waits.
	o.Logger = slog.New(onLog{Handler: o.Logger.Handler(), f: func(r slog.Record) {
		if strings.Contains(r.Message, "waiting up to 10s") && strings.Contains(r.Message, e.out) {
			said++
			unlock()
		}
	}})
	if _, err := e.run(o); err != nil {
		t.Fatalf("a run whose lock was let go during its wait: %v", err)
	}
	if said != 1 {
		t.Errorf("the wait was said %d times, want 1", said)
	}
	e.checkExactlyOnce()
}

// onLog is a slog.Handler that shows f every record before passing it on.
type onLog struct {
	slog.Handler
	f func(slog.Record)
}

func (h onLog) Handle(ctx context.Context, r slog.Record) error {
	h.f(r)
	return h.Handler.Handle(ctx, r)
}

// TestReportNamesTheBindingLimit: the report's binding limit is the limit
// work waited on longest — the output-tokens bucket in a world with a low
// output-token limit, the etiquette cap when the cap is far below every
// limit. (In the first, the lanes refuse by concurrency more often than by
// tokens — each finished request frees a slot the scheduler asks about —
// though they wait on tokens twenty times longer: counting refusals named
// the wrong limit.)
func TestReportNamesTheBindingLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world func(*sim.Config)
		caps  map[api.Family]int
		want  string
	}{
		{"output tokens", func(c *sim.Config) {
			// Two seconds of the limit in the bucket, so the job (about
			// 48,000 output tokens per org) outruns it by far: 500,000
			// per real minute at time scale 1000, 16,667 of them at once,
			// so each org waits about 3.8 s for output tokens — several
			// times the ramp's wait even on a slow, loaded machine (at
			// 1,000 OTPM the two were within a factor of two, and a
			// loaded CI box named the ramp).
			c.TimeScale = 1000
			c.BucketWindow = sim.Duration(2 * time.Second)
			for i := range c.Orgs {
				l := c.Orgs[i].Limits[api.PoolSonnet4]
				l.OTPM = 500
				c.Orgs[i].Limits[api.PoolSonnet4] = l
			}
		}, nil, "output_tokens"},
		{"etiquette cap", nil, map[api.Family]int{api.FamilySonnet: 2}, "etiquette cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1000, tc.world)
			o := e.options()
			o.Dispatch.Caps = tc.caps
			rep, err := e.run(o)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Succeeded != 1000 {
				t.Fatalf("%d succeeded, want 1000", rep.Succeeded)
			}
			if rep.BindingLimit != tc.want {
				var waited []map[string]float64
				for _, l := range rep.Lanes {
					waited = append(waited, l.WaitedSeconds)
				}
				t.Errorf("binding limit %q, want %q; lanes waited %v", rep.BindingLimit, tc.want, waited)
			}
		})
	}
}
