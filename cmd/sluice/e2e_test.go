package main

// End-to-end tests of the sluice binary: each test builds it once, starts the
// simulator in this process on loopback TCP, and runs the binary as a
// subprocess with a clean environment, as a user would.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/leakcheck"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/internal/testkit/testbin"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// bin is the sluice binary the tests run.
var bin = &testbin.Binary{Name: "sluice"}

// TestMain removes the binary the end-to-end tests built, and fails the
// package if its tests leave goroutines running.
func TestMain(m *testing.M) { leakcheck.Main(m, bin.Remove) }

// sluiceBin returns the path of the sluice binary, building it on first
// use. It skips the test under -short.
func sluiceBin(t *testing.T) string { return bin.Path(t) }

// fakeKeys are the simulator's keys, as the binary's environment gets them.
var fakeKeys = map[string]string{
	keys.EnvAPIKey:  sim.FakeKeyHighPrio,
	keys.EnvBatch:   sim.FakeKeyBatch,
	keys.EnvLowPrio: sim.FakeKeyLowPrio,
}

// e2e is one test's world: a simulator on loopback and a working directory.
type e2e struct {
	t   *testing.T
	bin string
	sim *sim.Server
	url string
	dir string // the binary's working directory
	env []string
	// probe lets run and judge send the planner's limits probe.
	probe bool
}

func newE2E(t *testing.T) *e2e {
	t.Helper()
	return newE2EWith(t, nil)
}

// newE2EWith is newE2E with the simulator's configuration changed by mutate.
func newE2EWith(t *testing.T, mutate func(*sim.Config)) *e2e {
	t.Helper()
	bin := sluiceBin(t)
	s, base := simtest.Loopback(t, func(c *sim.Config) {
		c.TimeScale = 20
		if mutate != nil {
			mutate(c)
		}
	})
	e := &e2e{t: t, bin: bin, sim: s, url: base, dir: t.TempDir()}
	e.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + e.url}
	for name, k := range fakeKeys {
		e.env = append(e.env, name+"="+k)
	}
	return e
}

func (e *e2e) path(name string) string { return filepath.Join(e.dir, name) }

// proc is a running sluice.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer // read only after done
	done           chan struct{}
}

// start starts `sluice args...` in e.dir. For run and keys it adds the
// flags every test wants: no .env, no progress display, and (unless
// e.probe) no planner's limits probe — its max_tokens-1 calls are answers
// the exactly-once checks would count (TestRunProbesOnceThenObserves
// covers it).
func (e *e2e) start(args ...string) *proc {
	e.t.Helper()
	switch args[0] {
	case "run", "judge":
		args = append(args, "--no-dotenv", "--no-progress")
		if !e.probe {
			args = append(args, "--no-probe")
		}
	case "keys":
		args = append(args, "--no-dotenv")
	}
	for _, a := range args {
		for _, k := range fakeKeys {
			if strings.Contains(a, k) {
				e.t.Fatalf("a key in argv: %q", a)
			}
		}
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 90*time.Second)
	p := &proc{cmd: exec.CommandContext(ctx, e.bin, args...), done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = e.dir, e.env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	e.t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

// wait waits for p to exit and returns its exit status.
func (p *proc) wait() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runOK runs `sluice args...` to completion and fails unless it exits 0.
func (e *e2e) runOK(args ...string) *proc {
	e.t.Helper()
	p := e.start(args...)
	if code := p.wait(); code != 0 {
		e.t.Fatalf("sluice %s: exit status %d\nstderr:\n%s", strings.Join(args, " "), code, p.stderr.String())
	}
	return p
}

// waitForLines polls the file at path until it holds at least n
// newline-terminated lines, and returns how many it saw. It fails if p
// exits first.
func (e *e2e) waitForLines(p *proc, path string, n int) int {
	e.t.Helper()
	var off int64
	lines := 0
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(60 * time.Second)
	for lines < n {
		if p.exited() {
			e.t.Fatalf("sluice exited (status %d) after %d lines, before %d\nstderr:\n%s", p.cmd.ProcessState.ExitCode(), lines, n, p.stderr.String())
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d lines after 60s, waiting for %d", lines, n)
		}
		if f, err := os.Open(path); err == nil {
			f.Seek(off, io.SeekStart)
			for {
				k, err := f.Read(buf)
				off += int64(k)
				lines += bytes.Count(buf[:k], []byte("\n"))
				if err != nil {
					break
				}
			}
			f.Close()
		}
		time.Sleep(2 * time.Millisecond)
	}
	return lines
}

// completeLines returns the newline-terminated lines of the file at path
// and the length of a torn tail after them.
func (e *e2e) completeLines(path string) (lines [][]byte, torn int) {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	cut := bytes.LastIndexByte(b, '\n') + 1
	for line := range bytes.Lines(b[:cut]) {
		lines = append(lines, line)
	}
	return lines, len(b) - cut
}

// readResults parses every line of the results file at path, failing on a
// torn line, a line that is not a result record, or a custom_id written
// twice.
func (e *e2e) readResults(path string) map[string]api.ResultRecord {
	e.t.Helper()
	lines, torn := e.completeLines(path)
	if torn > 0 {
		e.t.Fatalf("%s ends in a torn line of %d bytes", path, torn)
	}
	got := make(map[string]api.ResultRecord, len(lines))
	for i, line := range lines {
		var r api.ResultRecord
		if err := json.Unmarshal(line, &r); err != nil || r.CustomID == "" {
			e.t.Fatalf("%s:%d: not a result record (%v): %.200s", path, i+1, err, line)
		}
		if _, dup := got[r.CustomID]; dup {
			e.t.Fatalf("%s:%d: custom_id %s written twice", path, i+1, r.CustomID)
		}
		got[r.CustomID] = r
	}
	return got
}

// inputParams returns the params of every line of the requests file at
// path, by custom_id.
func (e *e2e) inputParams(path string) map[string][]byte {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]byte{}
	for line := range bytes.Lines(b) {
		var r api.BatchRequest
		if err := json.Unmarshal(line, &r); err != nil {
			e.t.Fatalf("%s: %v", path, err)
		}
		out[r.CustomID] = r.Params
	}
	return out
}

// checkExactlyOnce asserts that the results file holds exactly one
// succeeded result per request of the input, each the simulator's answer
// to that request's params, with sluice's metadata.
func (e *e2e) checkExactlyOnce(in, out string) {
	e.t.Helper()
	want, got := e.inputParams(in), e.readResults(out)
	if len(got) != len(want) {
		e.t.Errorf("%d results for %d requests", len(got), len(want))
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			e.t.Fatalf("result for %s, which is not in the input", id)
		}
	}
	for id, params := range want {
		r, ok := got[id]
		if !ok {
			e.t.Fatalf("no result for %s", id)
		}
		var res api.BatchResult
		if err := json.Unmarshal(r.Result, &res); err != nil || res.Type != api.ResultSucceeded || res.Message == nil || len(res.Message.Content) == 0 {
			e.t.Fatalf("%s: result %.300s", id, r.Result)
		}
		if tag := sim.AnswerTag(params); !strings.HasPrefix(res.Message.Content[0].Text, tag) {
			e.t.Fatalf("%s: answer %.60q does not start with %s: it belongs to another request", id, res.Message.Content[0].Text, tag)
		}
		if m := r.Sluice; m == nil || m.Class != api.ClassOK || m.Org == "" || m.Key == "" || m.ParamsHash == "" || m.Attempts < 1 {
			e.t.Fatalf("%s: sluice metadata %+v", id, m)
		}
	}
}

// simCalls is the number of authenticated calls the simulator saw.
func (e *e2e) simCalls() int64 {
	var n int64
	for _, o := range e.sim.Stats().Orgs {
		for _, k := range o.Keys {
			n += k.Calls
		}
	}
	return n
}

// readReport reads a --report file.
func (e *e2e) readReport(path string) job.Report {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	var r job.Report
	if err := json.Unmarshal(b, &r); err != nil {
		e.t.Fatalf("%s: %v", path, err)
	}
	return r
}

// maxInFlight bounds the requests in flight at any instant: the default
// per-key concurrency cap for Sonnet times the keys of the default world
// (one per organization).
var maxInFlight = int64(dispatch.DefaultCaps[api.FamilySonnet] * len(sim.Default().Orgs))

func TestKill9ThenResume(t *testing.T) {
	const n = 6000
	for _, killAt := range []int{300, 3000} {
		t.Run(fmt.Sprintf("after_%d", killAt), func(t *testing.T) {
			e := newE2E(t)
			in, out := e.path("in.jsonl"), e.path("out.jsonl")
			if err := (workload.Judge{N: n, Seed: uint64(killAt)}).WriteFile(in); err != nil {
				t.Fatal(err)
			}
			p := e.start("run", "in.jsonl", "-o", "out.jsonl")
			e.waitForLines(p, out, killAt)
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait()
			lines, torn := e.completeLines(out)
			for i, line := range lines {
				if !json.Valid(line) {
					t.Fatalf("out.jsonl:%d after SIGKILL: a complete line that is not JSON: %.200s", i+1, line)
				}
			}
			atKill := e.sim.Stats().Bodies
			t.Logf("killed with %d complete lines (+%d torn bytes); simulator had answered %d distinct requests",
				len(lines), torn, atKill.DistinctAnswered)
			if len(lines) < killAt || len(lines) >= n {
				t.Fatalf("%d lines at the kill, want [%d, %d)", len(lines), killAt, n)
			}

			e.runOK("run", "in.jsonl", "-o", "out.jsonl", "--report", "report.json")
			e.checkExactlyOnce(in, out)
			rep := e.readReport(e.path("report.json"))
			if rep.Requests.AlreadyDone != len(lines) || rep.Requests.Written != n-len(lines) {
				t.Errorf("resume: %d already done, %d written; want %d and %d (every complete line kept)",
					rep.Requests.AlreadyDone, rep.Requests.Written, len(lines), n-len(lines))
			}
			b := e.sim.Stats().Bodies
			t.Logf("simulator: %d distinct answered, %d answered more than once, %d extra answers",
				b.DistinctAnswered, b.AnsweredMoreThanOnce, b.ExtraAnswers)
			if b.DistinctAnswered != n {
				t.Errorf("simulator answered %d distinct requests, want %d", b.DistinctAnswered, n)
			}
			// Only what was in flight at the kill may be paid twice.
			if b.AnsweredMoreThanOnce > maxInFlight || b.ExtraAnswers > maxInFlight {
				t.Errorf("paid twice for %d requests (%d extra answers); at most %d were in flight at the kill",
					b.AnsweredMoreThanOnce, b.ExtraAnswers, maxInFlight)
			}
		})
	}
}

func TestSigintIsGraceful(t *testing.T) {
	const n = 4000
	e := newE2E(t)
	in, out := e.path("in.jsonl"), e.path("out.jsonl")
	if err := (workload.Judge{N: n, Seed: 11}).WriteFile(in); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "in.jsonl", "-o", "out.jsonl", "--report", "report.json")
	e.waitForLines(p, out, 500)
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != exitInterrupted {
		t.Fatalf("exit status %d after SIGINT, want %d\nstderr:\n%s", code, exitInterrupted, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "re-run") {
		t.Errorf("stderr does not say how to resume (re-run):\n%s", p.stderr.String())
	}
	done := e.readResults(out) // fails on a torn line
	rep := e.readReport(e.path("report.json"))
	t.Logf("interrupted with %d results; report: %d written, stopped %q", len(done), rep.Requests.Written, rep.Stopped)
	if len(done) == 0 || len(done) >= n {
		t.Fatalf("%d results after the interrupt, want some but not all %d", len(done), n)
	}
	if rep.Requests.Written != len(done) || rep.Stopped == "" {
		t.Errorf("report after interrupt: written %d, stopped %q; the file holds %d", rep.Requests.Written, rep.Stopped, len(done))
	}

	e.runOK("run", "in.jsonl", "-o", "out.jsonl")
	e.checkExactlyOnce(in, out)
	b := e.sim.Stats().Bodies
	t.Logf("simulator: %+v", b)
	if b.AnsweredMoreThanOnce != 0 || b.DistinctAnswered != n {
		t.Errorf("a graceful stop must record every answer it paid for: %d of %d answered, %d more than once",
			b.DistinctAnswered, n, b.AnsweredMoreThanOnce)
	}
}

func TestMalformedInputNothingSent(t *testing.T) {
	e := newE2E(t)
	lines := []string{
		`{"custom_id":"ok-1","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"bad id","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"sys","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"system","content":"x"}]}}`,
		`{"custom_id":"ok-2","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"y"}]}}`,
	}
	if err := os.WriteFile(e.path("in.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "in.jsonl", "-o", "out.jsonl")
	if code := p.wait(); code == 0 {
		t.Fatalf("exit status 0 for a malformed input\nstderr:\n%s", p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, want := range []string{"in.jsonl:2:", "in.jsonl:3:"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr)
		}
	}
	for _, clean := range []string{"in.jsonl:1:", "in.jsonl:4:"} {
		if strings.Contains(stderr, clean) {
			t.Errorf("stderr blames the valid line %q:\n%s", clean, stderr)
		}
	}
	if calls := e.simCalls(); calls != 0 {
		t.Errorf("%d calls reached the API; nothing may be sent for a malformed file", calls)
	}
	if _, err := os.Stat(e.path("out.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a results file was created for a malformed input (stat: %v)", err)
	}
}

func TestKeysNeverPrinted(t *testing.T) {
	e := newE2E(t)
	if err := (workload.Judge{N: 200, Seed: 5}).WriteFile(e.path("in.jsonl")); err != nil {
		t.Fatal(err)
	}
	run := e.runOK("run", "in.jsonl", "-o", "out.jsonl", "--report", "report.json")
	ks := e.runOK("keys")
	e.checkExactlyOnce(e.path("in.jsonl"), e.path("out.jsonl"))

	outputs := map[string][]byte{
		"run stdout": run.stdout.Bytes(), "run stderr": run.stderr.Bytes(),
		"keys stdout": ks.stdout.Bytes(), "keys stderr": ks.stderr.Bytes(),
	}
	for _, f := range []string{"out.jsonl", "report.json"} {
		b, err := os.ReadFile(e.path(f))
		if err != nil {
			t.Fatal(err)
		}
		outputs[f] = b
	}
	for name, b := range outputs {
		for _, k := range fakeKeys {
			if bytes.Contains(b, []byte(k)) {
				t.Errorf("%s contains the key ending %s", name, k[len(k)-4:])
			}
		}
	}
	// The keys are named by label and last 4 characters, and the probe
	// found each one's organization.
	for _, want := range []string{keys.LabelHighPrio, "0001", keys.LabelBatch, "0002", keys.LabelLowPrio, "0003"} {
		if !bytes.Contains(outputs["keys stdout"], []byte(want)) {
			t.Errorf("sluice keys does not show %q:\n%s", want, outputs["keys stdout"])
		}
	}
	for _, o := range sim.Default().Orgs {
		if !bytes.Contains(outputs["keys stdout"], []byte(o.ID)) {
			t.Errorf("sluice keys does not show organization %s:\n%s", o.ID, outputs["keys stdout"])
		}
	}
}

func TestDemoRuns(t *testing.T) {
	const n = 2000
	e := newE2E(t) // for the binary and a clean environment; demo brings its own simulator
	p := e.runOK("demo", "--n", fmt.Sprint(n), "--dir", e.dir)
	stderr := p.stderr.String()
	for _, re := range []string{
		fmt.Sprintf(`(^|[^0-9])%d written now \(%d succeeded`, n, n),
		`(^|[^0-9])0 answered more than once`,
	} {
		if !regexp.MustCompile(re).MatchString(stderr) {
			t.Errorf("demo output does not match %s:\n%s", re, stderr)
		}
	}
	e.checkExactlyOnce(e.path("requests.jsonl"), e.path("results.jsonl"))
	if calls := e.simCalls(); calls != 0 {
		t.Errorf("demo called the test's simulator %d times; it must use its own", calls)
	}
}
