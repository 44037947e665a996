package batch

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/sim"
)

// jobRequests is n requests r0 … r(n-1) on model, their text naming job:
// two jobs share every custom_id and differ in model and bodies.
func jobRequests(n int, model, job string) []*call.Request {
	out := make([]*call.Request, n)
	for i := range out {
		p, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 64,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("%s: judge answer number %d.", job, i)}}})
		out[i] = &call.Request{ID: fmt.Sprintf("r%d", i), Params: p, Model: model, MaxTokens: 64, ParamsHash: jsonl.ParamsHash(p)}
	}
	return out
}

// TestTwoJobsNeverTakeEachOthersBatches: two jobs at once on one org, the
// same custom_ids on two models, and each job's first create answer lost
// after the batch was made. Whatever batch each adopts, each job ends with
// exactly its own answers: a batch whose answers are another model's is
// harvested from not at all, and its chunk is re-driven.
func TestTwoJobsNeverTakeEachOthersBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		var creates atomic.Int32
		w.tap.failCreate = func() string {
			if creates.Add(1) <= 2 { // the first create of each job
				return "drop-after"
			}
			return ""
		}
		jobs := []struct {
			model, name string
			reqs        []*call.Request
			col         *collector
			r           *Runner
		}{
			{model: "claude-haiku-4-5", name: "job-a"},
			{model: "claude-sonnet-4-5", name: "job-b"},
		}
		var wg sync.WaitGroup
		for i := range jobs {
			j := &jobs[i]
			j.reqs = jobRequests(20, j.model, j.name)
			cfg := w.config()
			cfg.Journal = filepath.Join(t.TempDir(), j.name+".journal")
			j.col = newCollector(t)
			wg.Go(func() {
				_, r, err := w.runWith(t, j.col, cfg, j.reqs, nil, nil, nil)
				if err != nil {
					t.Errorf("%s: %v", j.name, err)
				}
				j.r = r
			})
		}
		wg.Wait()
		var adopted, foreign int64
		for _, j := range jobs {
			mine := map[string]*call.Request{}
			for _, q := range j.reqs {
				mine[q.ID] = q
			}
			for id, res := range j.col.results {
				var m api.Message
				if err := json.Unmarshal(res.Body, &m); err != nil || len(m.Content) == 0 {
					t.Errorf("%s %s: body %s", j.name, id, res.Body)
					continue
				}
				if m.Model != j.model || !strings.HasPrefix(m.Content[0].Text, sim.AnswerTag(mine[id].Params)) {
					t.Errorf("%s %s: answer from %q %q is not its request's", j.name, id, m.Model, m.Content[0].Text)
				}
			}
			for _, q := range j.reqs {
				_, ok := j.col.results[q.ID]
				_, moved := j.col.reroutes[q.ID]
				if ok == moved {
					t.Errorf("%s %s: result %v, re-routed %v: want exactly one outcome", j.name, q.ID, ok, moved)
				}
			}
			st := j.r.Stats()
			adopted += st.Adopted
			foreign += st.Foreign
			t.Logf("%s: %d results, %d re-routed; stats %+v", j.name, len(j.col.results), len(j.col.reroutes), st)
		}
		if adopted < 2 {
			t.Errorf("%d adoptions: each lost create should have been reconciled from the list", adopted)
		}
	})
}

// TestTwoJobsSameModelSameIDs is the case a lost create answer made wrong
// before wire ids: two jobs at once on three orgs, 1,500 requests each, the
// same custom_ids on the same model with different bodies, the default
// chunk size, and half of all batch creates losing their answer after
// the batch was made (the simulator's pcreate_lost). Each job must end
// with exactly its own answers, each request once — none of the other's.
func TestTwoJobsSameModelSameIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, func(c *sim.Config) { c.Faults.PCreateLost = 0.5 })
		const model = "claude-haiku-4-5"
		type job struct {
			name string
			reqs []*call.Request
			col  *collector
			r    *Runner
		}
		jobs := []*job{{name: "job-a"}, {name: "job-b"}}
		var wg sync.WaitGroup
		for _, j := range jobs {
			j.reqs = jobRequests(1500, model, j.name)
			cfg := w.config()
			cfg.ChunkSize = DefaultChunkSize
			cfg.Journal = filepath.Join(t.TempDir(), j.name+".journal")
			j.col = newCollector(t)
			wg.Go(func() {
				_, r, err := w.runWith(t, j.col, cfg, j.reqs, nil, nil, nil)
				if err != nil {
					t.Errorf("%s: %v", j.name, err)
				}
				j.r = r
			})
		}
		wg.Wait()
		var adopted int64
		for _, j := range jobs {
			mine := map[string]*call.Request{}
			for _, q := range j.reqs {
				mine[q.ID] = q
			}
			foreign := 0
			for id, res := range j.col.results {
				var m api.Message
				if err := json.Unmarshal(res.Body, &m); err != nil || len(m.Content) == 0 {
					t.Errorf("%s %s: body %s", j.name, id, res.Body)
					continue
				}
				if !strings.HasPrefix(m.Content[0].Text, sim.AnswerTag(mine[id].Params)) {
					foreign++
				}
			}
			if foreign > 0 {
				t.Errorf("%s: %d of %d rows are the other job's answers", j.name, foreign, len(j.col.results))
			}
			for _, q := range j.reqs {
				_, ok := j.col.results[q.ID]
				_, moved := j.col.reroutes[q.ID]
				if ok == moved {
					t.Errorf("%s %s: result %v, re-routed %v: want exactly one outcome", j.name, q.ID, ok, moved)
				}
			}
			st := j.r.Stats()
			adopted += st.Adopted
			t.Logf("%s: %d results, %d re-routed; stats %+v", j.name, len(j.col.results), len(j.col.reroutes), st)
		}
		var lost int64
		for _, o := range w.sim.Stats().Orgs {
			lost += o.Batches.CreateLost
		}
		if lost == 0 || adopted == 0 {
			t.Errorf("%d creates lost their answer, %d adopted: the case did not happen", lost, adopted)
		}
	})
}
