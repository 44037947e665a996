package proxy_test

// Virtual batches when something goes wrong: a stuck collector, every key
// dead, an ended batch's files, the batch path and the planner's route, a
// restart that adopts upstream batches, a cancel that stops them.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/sim"
)

// fastFake answers every Messages call at once.
func fastFake() http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		i := n.Add(1)
		w.Header().Set(api.HeaderRequestID, fmt.Sprintf("req_fast%d", i))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_fast%d","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"fast"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`, i, sonnet)
	})
}

// TestBatchRowsNeverBlockTheDispatcher: with the batch's collector stuck
// on a slow disk, every row of a large batch still ends (its callback on
// the dispatcher's loop never waits) and plain calls are still answered.
func TestBatchRowsNeverBlockTheDispatcher(t *testing.T) {
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = t.TempDir() }})
	stuck := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	proxy.SetStorePutHook(t.Cleanup, func() {
		once.Do(func() { close(entered) })
		<-stuck
	})
	defer close(stuck)
	const n = 1500
	e.createBatch(n, "r")
	within(t, entered, "the collector")
	answered := make(chan int, 1)
	go func() {
		for {
			if st, _ := e.d.Snapshot(); st.OK >= n {
				resp, _ := e.do("POST", "/v1/messages", message("a plain call behind the batch"))
				answered <- resp.StatusCode
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if code := within(t, answered, "every row answered and a plain call after them (the dispatcher's loop is blocked)"); code != 200 {
		t.Errorf("plain call: %d", code)
	}
}

// TestBatchEndsWhenEveryKeyIsDead: once the dispatcher stopped for want
// of a live key, a batch's rows end errored and the batch ends.
func TestBatchEndsWhenEveryKeyIsDead(t *testing.T) {
	e := newEnv(t, options{health: dieAtOnce})
	for _, label := range []string{"high_prio", "batch", "low_prio"} {
		if err := e.sim.SetKeyStatus(label, sim.KeyRevoked); err != nil {
			t.Fatal(err)
		}
	}
	e.do("POST", "/v1/messages", message("meets every 401"))
	within(t, e.d.Done(), "the dispatcher stopping")
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{
		{"custom_id": "a", "params": message("a")}, {"custom_id": "b", "params": message("b")},
	}})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	m := e.pollBatch(created.ID)
	if want := (api.RequestCounts{Errored: 2}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	_, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	if !bytes.Contains(res, []byte("no live key")) {
		t.Errorf("results %s: want the rows errored for want of a live key", res)
	}
}

// procFDs lists the files this process holds open (Linux).
func procFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	var out []string
	for _, d := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestEndedBatchHoldsNoFileAndIsArchived: an ended batch keeps no file
// open (its results are read from disk when asked for); 29 days after its
// creation its results are archived, as the API does.
func TestEndedBatchHoldsNoFileAndIsArchived(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{
		{"custom_id": "a", "params": message("a")}, {"custom_id": "b", "params": message("b")},
	}})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	ended := e.pollBatch(created.ID)
	if ended.RequestCounts.Succeeded != 2 {
		t.Fatalf("counts %+v", ended.RequestCounts)
	}
	resultsFile := filepath.Join(dir, created.ID+".results.jsonl")
	for _, f := range procFDs(t) {
		if strings.HasPrefix(f, dir) && f != filepath.Join(dir, "lock") { // the proxy's own lock is held for its life
			t.Errorf("an ended batch holds %s open", f)
		}
	}
	if resp, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 200 || bytes.Count(res, []byte("\n")) != 2 {
		t.Errorf("results: %d %s", resp.StatusCode, res)
	}

	clk.add(api.ResultsRetention - time.Minute)
	if resp, _ := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 200 {
		t.Errorf("results a minute before the 29 days: %d", resp.StatusCode)
	}
	clk.add(time.Minute)
	resp, b := e.do("GET", "/v1/messages/batches/"+created.ID, nil)
	var m api.MessageBatch
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.ArchivedAt == nil || !m.ArchivedAt.Equal(created.CreatedAt.Add(api.ResultsRetention)) {
		t.Errorf("retrieve after 29 days: %d %s, want archived_at = created_at + 29 days", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 404 || errorOf(t, b).Err.Type != api.ErrNotFound {
		t.Errorf("results after 29 days: %d %s, want 404", resp.StatusCode, b)
	}
	if _, err := os.Stat(resultsFile); !os.IsNotExist(err) {
		t.Errorf("the archived batch's results file is still there (%v)", err)
	}
	// Archived stays archived across a restart.
	e.close()
	e2 := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
	if resp, _ := e2.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil); resp.StatusCode != 404 {
		t.Errorf("results after a restart: %d, want 404", resp.StatusCode)
	}
}

// batchRouting routes every virtual batch to the batch path, polling on
// the simulator's clock.
func batchRouting(jsonl.Summary, int) (route.Routing, error) {
	return route.Routing{Route: route.Batch, Why: "test", Batch: batch.Config{
		PollMin: time.Millisecond, PollMax: 5 * time.Millisecond, StuckAfter: time.Hour,
		CreateGrace: 100 * time.Millisecond, ClockSkew: time.Second,
	}}, nil
}

// simBatches sums the simulator's batch counters.
func simBatches(s *sim.Server) (created, requests int64, messages int64) {
	st := s.Stats()
	for _, o := range st.Orgs {
		created += o.Batches.Created
		requests += o.Batches.Requests
		for _, p := range o.Pools {
			messages += p.Admitted
		}
	}
	return
}

// TestBatchRunsOnTheBatchPath: a virtual batch the planner sends to batch
// runs as Message Batches upstream (none of its rows is a Messages call),
// answers in the API's shapes, and leaves no journal or requests file.
func TestBatchRunsOnTheBatchPath(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	rows := []map[string]any{
		{"custom_id": "one", "params": message("batch one")},
		{"custom_id": "streamed", "params": message("batch two", "stream", true)},
		{"custom_id": "two", "params": message("batch three")},
		{"custom_id": "three", "params": message("batch four")},
	}
	_, b := e.do("POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	json.Unmarshal(b, &created)
	m := e.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 3, Errored: 1}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	_, res := e.do("GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	var order []string
	for line := range bytes.Lines(res) {
		var l api.BatchResultLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("line %s: %v", line, err)
		}
		order = append(order, l.CustomID+":"+l.Result.Type)
		if l.Result.Type == api.ResultSucceeded && (l.Result.Message == nil || len(l.Result.Message.Content) == 0 || !strings.HasPrefix(l.Result.Message.Content[0].Text, "sim-")) {
			t.Errorf("%s: message %+v", l.CustomID, l.Result.Message)
		}
	}
	if strings.Join(order, ",") != "one:succeeded,streamed:errored,two:succeeded,three:succeeded" {
		t.Errorf("results %v", order)
	}
	created1, requests, messages := simBatches(e.sim)
	if created1 < 1 || requests != 3 || messages != 0 {
		t.Errorf("upstream: %d batches with %d requests and %d Messages calls; want the 3 rows in batches, no Messages call", created1, requests, messages)
	}
	if st, _ := e.d.Snapshot(); st.Submitted != 0 {
		t.Errorf("%d rows went through the sync dispatcher", st.Submitted)
	}
	for _, suffix := range []string{".batch-journal", ".requests.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, created.ID+suffix)); !os.IsNotExist(err) {
			t.Errorf("%s%s is left after the batch ended (%v)", created.ID, suffix, err)
		}
	}
}

// TestPlannerRoutesVirtualBatches: with route.Planner and prefer=cost, a
// batch big enough for Message Batches goes there, a small one runs sync.
func TestPlannerRoutesVirtualBatches(t *testing.T) {
	var world plan.World
	e := newEnv(t, options{proxy: func(c *proxy.Config) {
		c.StateDir = t.TempDir()
		c.Plan = route.Planner(route.Options{Route: "auto", Prefer: "cost", TimeScale: 1000,
			World: func(plan.Job) (plan.World, error) { return world, nil }})
	}})
	world = plan.FromModel(e.sim.Config().Model(), nil)
	run := func(n int, tag string) api.MessageBatch {
		return e.pollBatch(e.createBatch(n, tag).ID)
	}
	if m := run(3, "small"); m.RequestCounts.Succeeded != 3 {
		t.Fatalf("small batch: %+v", m.RequestCounts)
	}
	if created, _, messages := simBatches(e.sim); created != 0 || messages != 3 {
		t.Errorf("a 3-row batch: %d upstream batches, %d Messages calls; want sync", created, messages)
	}
	if m := run(150, "big"); m.RequestCounts.Succeeded != 150 {
		t.Fatalf("big batch: %+v", m.RequestCounts)
	}
	if created, requests, messages := simBatches(e.sim); created == 0 || requests != 150 || messages != 3 {
		t.Errorf("a 150-row batch, prefer cost: %d upstream batches with %d requests, %d Messages calls in all; want it all in batches", created, requests, messages)
	}
}

// TestRestartAdoptsUpstreamBatches: a proxy stopped while its virtual
// batch's Message Batch runs upstream resumes it after a restart: the
// batch's journal adopts the upstream batch, which is harvested, never
// created or paid twice, and no row is sent sync.
func TestRestartAdoptsUpstreamBatches(t *testing.T) {
	dir := t.TempDir()
	slow := func(c *sim.Config) {
		c.Batch.AdmissionBase = sim.Duration(20 * time.Minute) // 1.2 s real at time scale 1000
	}
	e := newEnv(t, options{world: slow, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	created := e.createBatch(8, "r")
	waitUntil(t, func() bool { c, _, _ := simBatches(e.sim); return c > 0 }, "the upstream batch")
	e.closeWithin(20 * time.Second) // a shutdown while the upstream batch runs

	e2 := newEnv(t, options{simOf: e, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }})
	m := e2.pollBatch(created.ID)
	if want := (api.RequestCounts{Succeeded: 8}); m.RequestCounts != want {
		t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
	}
	createdN, requests, messages := simBatches(e.sim)
	if createdN != 1 || requests != 8 || messages != 0 {
		t.Errorf("upstream: %d batches with %d requests, %d Messages calls; want the one batch adopted, nothing sent again", createdN, requests, messages)
	}
	if x := e.sim.Stats().Bodies.ExtraAnswers; x != 0 {
		t.Errorf("%d requests were answered twice", x)
	}
}

// TestCancelStopsUpstreamBatches: cancelling a virtual batch whose rows
// run in a Message Batch upstream cancels that batch too, so the rows not
// yet processed are neither processed nor billed: they end canceled, as
// on the API. A proxy that stopped after it recorded the cancel but
// before the upstream cancel cancels the batch when it restarts.
func TestCancelStopsUpstreamBatches(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			dir := t.TempDir()
			slow := func(c *sim.Config) {
				c.Batch.AdmissionBase = sim.Duration(100 * time.Minute) // 6 s real at time scale 1000
			}
			opts := options{world: slow, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Plan = batchRouting }}
			e := newEnv(t, opts)
			created := e.createBatch(8, "r")
			waitUntil(t, func() bool { c, _, _ := simBatches(e.sim); return c > 0 }, "the upstream batch")
			served := e
			if restart {
				// Stopped after the cancel was saved, before it reached
				// upstream: the batch's file says canceling. (Once the
				// journal has the create: a batch whose create was cut
				// short is adopted through the list, and an adopted
				// batch is never cancelled.)
				waitUntil(t, func() bool {
					j, _ := os.ReadFile(filepath.Join(dir, created.ID+".batch-journal"))
					return bytes.Contains(j, []byte(`"op":"created"`))
				}, "the create in the journal")
				e.close()
				path := filepath.Join(dir, created.ID+".json")
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var meta map[string]any
				if err := json.Unmarshal(raw, &meta); err != nil {
					t.Fatal(err)
				}
				meta["cancel_initiated_at"] = time.Now().UTC()
				raw, _ = json.Marshal(meta)
				if err := os.WriteFile(path, raw, 0o600); err != nil {
					t.Fatal(err)
				}
				opts.simOf = e
				served = newEnv(t, opts)
			} else if resp, b := e.do("POST", "/v1/messages/batches/"+created.ID+"/cancel", nil); resp.StatusCode != 200 {
				t.Fatalf("cancel: %d %s", resp.StatusCode, b)
			}
			m := served.pollBatch(created.ID)
			if want := (api.RequestCounts{Canceled: 8}); m.RequestCounts != want {
				t.Errorf("counts %+v, want %+v", m.RequestCounts, want)
			}
			var cancels, succeeded int64
			for _, o := range e.sim.Stats().Orgs {
				cancels += o.Batches.CancelRequests
				succeeded += o.Batches.Succeeded
			}
			if cancels != 1 || succeeded != 0 {
				t.Errorf("upstream: %d cancel requests, %d rows processed; want the batch cancelled before any row ran", cancels, succeeded)
			}
			if _, _, messages := simBatches(e.sim); messages != 0 {
				t.Errorf("%d rows were sent as Messages calls after the cancel", messages)
			}
		})
	}
}
