package main

// End-to-end tests of `sluice run --route batch` through the binary: a
// SIGKILL while batches are created, polled or harvested, then a resume,
// must neither create a chunk twice nor pay for a request twice nor lose
// one; an expired batch's rows are re-driven on sync.

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// batchTimeScale runs the simulator's batch queue fast: a 200-request
// batch is admitted in 1.2 s of real time (60 s + 0.3 s × 200 of API
// time) and processed in 0.4 s, so an organization's four batches end
// 1.6–2.8 s after their create, around the batch path's first poll (2 s,
// a real-time interval the command does not scale).
const batchTimeScale = 100

// newBatchE2E is newE2E with a simulator world of its own.
func newBatchE2E(t *testing.T, mutate func(*sim.Config)) *e2e {
	t.Helper()
	bin := sluiceBin(t)
	s, base := simtest.Loopback(t, mutate)
	e := &e2e{t: t, bin: bin, sim: s, url: base, dir: t.TempDir()}
	e.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + e.url}
	for name, k := range fakeKeys {
		e.env = append(e.env, name+"="+k)
	}
	return e
}

// journalRec is the part of a batch journal record the tests read.
type journalRec struct {
	Op    string   `json:"op"`
	Chunk string   `json:"chunk"`
	N     int      `json:"n"`
	IDs   []string `json:"ids"`
	Batch string   `json:"batch"`
	Why   string   `json:"why"`
}

// journal reads the complete lines of the batch journal at path (a
// missing file is empty).
func (e *e2e) journal(path string) []journalRec {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		e.t.Fatal(err)
	}
	var recs []journalRec
	for line := range bytes.Lines(b[:bytes.LastIndexByte(b, '\n')+1]) {
		var r journalRec
		if err := json.Unmarshal(line, &r); err != nil {
			e.t.Fatalf("%s: a complete line that is not JSON (%v): %.200s", path, err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// chunks returns the intents of the journal by chunk id, and how many
// chunks have a created record.
func chunks(recs []journalRec) (intents map[string]journalRec, created int) {
	intents = map[string]journalRec{}
	seen := map[string]bool{}
	for _, r := range recs {
		switch r.Op {
		case "intent":
			intents[r.Chunk] = r
		case "created":
			if !seen[r.Chunk] {
				seen[r.Chunk] = true
				created++
			}
		}
	}
	return intents, created
}

// waitFor polls cond every 2 ms until it holds; it fails if p exits first
// or after 30 s.
func (e *e2e) waitFor(p *proc, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if p.exited() {
			e.t.Fatalf("sluice exited (status %d) before %s\nstderr:\n%s", p.cmd.ProcessState.ExitCode(), what, p.stderr.String())
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("30 s without %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// batchStats sums the simulator's batch counters over the organizations.
func (e *e2e) batchStats() (b sim.BatchCounters) {
	for _, o := range e.sim.Stats().Orgs {
		b.Created += o.Batches.Created
		b.Ended += o.Batches.Ended
		b.Succeeded += o.Batches.Succeeded
		b.Expired += o.Batches.Expired
		b.Errored += o.Batches.Errored
		b.Canceled += o.Batches.Canceled
	}
	return b
}

// checkBatchResults asserts one succeeded result per request of the input,
// each the simulator's answer to its params, on the route routeOf names
// ("batch" with the batch's id, or "sync").
func (e *e2e) checkBatchResults(in, out string, routeOf func(id string) string) {
	e.t.Helper()
	want, got := e.inputParams(in), e.readResults(out) // readResults fails on an id written twice
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
		m := r.Sluice
		if m == nil || m.Class != api.ClassOK || m.Org == "" || m.ParamsHash == "" {
			e.t.Fatalf("%s: sluice metadata %+v", id, m)
		}
		route := routeOf(id)
		if m.Route != route || (route == "batch") != (m.BatchID != "") {
			e.t.Fatalf("%s: route %q, batch id %q; want route %q", id, m.Route, m.BatchID, route)
		}
	}
}

// checkChunks asserts that the journal's chunks respect --chunk and hold
// every request once, that no chunk was given up, and that the simulator
// created exactly one batch per chunk. It returns the intents.
func (e *e2e) checkChunks(journalPath string, n, chunk int) map[string]journalRec {
	e.t.Helper()
	recs := e.journal(journalPath)
	intents, created := chunks(recs)
	ids := map[string]bool{}
	for c, in := range intents {
		if in.N != len(in.IDs) {
			e.t.Errorf("chunk %s: n %d but %d ids", c, in.N, len(in.IDs))
		}
		if in.N > chunk {
			// With --route batch the planner's own choice here is sync:
			// the router must still size the chunks as asked.
			e.t.Errorf("chunk %s holds %d requests: --chunk %d was not honoured", c, in.N, chunk)
		}
		for _, id := range in.IDs {
			if ids[id] {
				e.t.Errorf("%s is in two chunks", id)
			}
			ids[id] = true
		}
	}
	if len(ids) != n {
		e.t.Errorf("the chunks hold %d requests, want %d", len(ids), n)
	}
	for _, r := range recs {
		if r.Op == "abandoned" {
			e.t.Errorf("chunk %s abandoned: %s", r.Chunk, r.Why)
		}
	}
	st := e.batchStats()
	if st.Created != int64(len(intents)) || created != len(intents) {
		e.t.Errorf("the simulator created %d batches and the journal has %d created chunks, for %d chunks: a chunk was created twice or never",
			st.Created, created, len(intents))
	}
	if b := e.sim.Stats().Bodies; b.AnsweredMoreThanOnce != 0 || b.ExtraAnswers != 0 {
		e.t.Errorf("paid twice: %d requests answered more than once (%d extra answers)", b.AnsweredMoreThanOnce, b.ExtraAnswers)
	}
	return intents
}

func TestBatchRouteKill9ThenResume(t *testing.T) {
	const n, chunk = 2000, 200
	for _, tc := range []struct {
		name string
		// kill reports, from the journal and the results file, when to
		// SIGKILL the first run.
		kill func(e *e2e, recs []journalRec, results int) bool
	}{
		// Every request is in a chunk and every chunk created (so no
		// create is in flight): the batches are in their 404-after-create
		// window, which the resumed run's first polls meet.
		{"after_creates", func(e *e2e, recs []journalRec, results int) bool {
			intents, created := chunks(recs)
			total := 0
			for _, in := range intents {
				total += in.N
			}
			return total == n && created == len(intents)
		}},
		// Some batches harvested, others still in progress (every chunk
		// created: a chunk's size carries the run's fingerprint, so the
		// last one is partial and may be cut after the first results; a
		// kill between its intent and its create re-chunks it, which
		// batch's TestCrashRecovery "before-create" covers).
		{"mid_harvest", func(e *e2e, recs []journalRec, results int) bool {
			intents, created := chunks(recs)
			total := 0
			for _, in := range intents {
				total += in.N
			}
			return results > 0 && total == n && created == len(intents)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBatchE2E(t, func(c *sim.Config) {
				c.TimeScale = batchTimeScale
				c.Batch.ReadAfterWrite = sim.Duration(batchTimeScale * time.Second) // 1 s of real time
			})
			in, out, jpath := e.path("in.jsonl"), e.path("out.jsonl"), e.path("out.jsonl.batch-journal")
			if err := (workload.Judge{N: n, Seed: 31}).WriteFile(in); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "in.jsonl", "-o", "out.jsonl", "--route", "batch", "--chunk", "200"}
			p := e.start(args...)
			e.waitFor(p, "the kill point", func() bool {
				results := 0
				if b, err := os.ReadFile(out); err == nil {
					results = bytes.Count(b, []byte("\n"))
				}
				return tc.kill(e, e.journal(jpath), results)
			})
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait()
			lines, torn := e.completeLines(out)
			intents, created := chunks(e.journal(jpath))
			st := e.batchStats()
			t.Logf("killed: %d chunks, %d created (the simulator: %d created, %d ended), %d results (+%d torn bytes)",
				len(intents), created, st.Created, st.Ended, len(lines), torn)
			if len(lines) >= n {
				t.Fatalf("%d results at the kill: the run was not interrupted", len(lines))
			}

			e.runOK(append(args, "--report", "report.json")...)
			e.checkBatchResults(in, out, func(string) string { return "batch" })
			e.checkChunks(jpath, n, chunk)
			rep := e.readReport(e.path("report.json"))
			if rep.Route != "batch" || rep.Requests.AlreadyDone != len(lines) || rep.Requests.Written != n-len(lines) {
				t.Errorf("resume: route %q, %d already done, %d written; want batch, %d and %d",
					rep.Route, rep.Requests.AlreadyDone, rep.Requests.Written, len(lines), n-len(lines))
			}
			if rep.Batch.Created != 0 {
				t.Errorf("the resumed run created %d batches; every chunk was created before the kill", rep.Batch.Created)
			}
			t.Logf("resumed: %+v; simulator: %+v", rep.Batch, e.batchStats())
		})
	}
}

func TestBatchRouteExpiredRowsGoSync(t *testing.T) {
	// Batches above 150 requests starve for 2 h, past their 30-minute
	// expiry (API time): every 200-request chunk expires, 1.8 s after its
	// create; the last chunk ends normally. A run's chunks are up to 11
	// below the target (a per-run offset, so two runs' batches differ), so
	// five full chunks hold 945-1,000 requests and the last 50-105, below
	// the starvation size in every run (at 1,100 an offset of 11 left 155
	// and about one run in twelve had no normal chunk).
	const n, chunk = 1050, 200
	e := newBatchE2E(t, func(c *sim.Config) {
		c.TimeScale = batchTimeScale
		c.Batch.StarveAbove = 150
		c.Batch.StarveFor = sim.Duration(2 * time.Hour)
		c.Batch.Expiry = sim.Duration(3 * time.Minute)
	})
	in, out, jpath := e.path("in.jsonl"), e.path("out.jsonl"), e.path("out.jsonl.batch-journal")
	if err := (workload.Judge{N: n, Seed: 32}).WriteFile(in); err != nil {
		t.Fatal(err)
	}
	e.runOK("run", "in.jsonl", "-o", "out.jsonl", "--route", "batch", "--chunk", "200", "--report", "report.json")
	intents := e.checkChunks(jpath, n, chunk)
	route := map[string]string{}
	starved := 0
	for _, in := range intents {
		r := "batch"
		if in.N > 150 {
			r = "sync"
			starved++
		}
		for _, id := range in.IDs {
			route[id] = r
		}
	}
	if starved == 0 || starved == len(intents) {
		t.Fatalf("%d of %d chunks above the starvation size: the test needs both kinds", starved, len(intents))
	}
	e.checkBatchResults(in, out, func(id string) string { return route[id] })
	st := e.batchStats()
	if st.Expired == 0 || st.Ended != int64(len(intents)) {
		t.Errorf("simulator: %d rows expired, %d of %d batches ended; want expired rows and every batch ended", st.Expired, st.Ended, len(intents))
	}
	rep := e.readReport(e.path("report.json"))
	t.Logf("%d chunks, %d starved; report batch stats %+v; simulator %+v", len(intents), starved, rep.Batch, st)
	if rep.Batch.Rerouted != st.Expired {
		t.Errorf("%d rows re-routed to sync, the simulator expired %d", rep.Batch.Rerouted, st.Expired)
	}
}
