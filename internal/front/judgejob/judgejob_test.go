package judgejob_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/judgejob"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/sim"
)

type env struct {
	t    *testing.T
	sim  *sim.Server
	base string
	dir  string
	log  *bytes.Buffer
}

func newEnv(t *testing.T, mutate func(*sim.Config)) *env {
	s, base := simtest.Loopback(t, func(c *sim.Config) {
		c.TimeScale = 400
		c.Verdicts.Enabled = true
		if mutate != nil {
			mutate(c)
		}
	})
	return &env{t: t, sim: s, base: base, dir: t.TempDir(), log: &bytes.Buffer{}}
}

func (e *env) engine() job.Options {
	pool, err := simtest.Pool(sim.Default())
	if err != nil {
		e.t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: e.base, MaxConns: 512})
	return job.Options{
		SyncOff: true, Logger: slog.New(slog.NewTextHandler(e.log, nil)), Redact: pool.Redact,
		Dispatch: dispatch.Config{Client: c, Keys: pool.Keys(),
			Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}},
	}
}

func (e *env) calls() (n int64) {
	for _, o := range e.sim.Stats().Orgs {
		for _, k := range o.Keys {
			n += k.Calls
		}
	}
	return n
}

// items writes n items (two groups) to a file and returns its path.
func (e *env) items(n int) string {
	var b bytes.Buffer
	for i := range n {
		g := []string{"persona-a", "persona-b"}[i%2]
		fmt.Fprintf(&b, `{"id":"it-%05d","question":"What is %d + %d?","completion":"It is %d, because arithmetic.","groups":[%q]}`+"\n", i, i, i, 2*i, g)
	}
	path := filepath.Join(e.dir, fmt.Sprintf("items-%d.jsonl", n))
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

func readVerdicts(t *testing.T, path string) map[string]judge.Verdict {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]judge.Verdict{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v judge.Verdict
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("bad verdict line %q: %v", sc.Text(), err)
		}
		if _, dup := out[v.ID]; dup {
			t.Fatalf("two verdicts for %s", v.ID)
		}
		out[v.ID] = v
	}
	return out
}

// requestParams reads a job's requests file: params by id.
func requestParams(t *testing.T, out string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(out + ".requests.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for line := range bytes.Lines(b) {
		var r api.BatchRequest
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		m[r.CustomID] = r.Params
	}
	return m
}

// TestJudgeEndToEnd is the end-to-end test: 10,000 items with the
// default rubric over three organizations, 529s injected and a key revoked
// mid-run. Every item gets a verdict row with the simulator's scores;
// nothing but answers lands in the cache; a second run is answered by the
// cache with zero API calls; two rubrics never share a cached row.
func TestJudgeEndToEnd(t *testing.T) {
	const n = 10000
	e := newEnv(t, func(c *sim.Config) { c.Faults.P529 = 0.03 })
	items := e.items(n)
	c, err := cache.Open(filepath.Join(e.dir, "cache.db"), cache.On)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := filepath.Join(e.dir, "verdicts.jsonl")
	cfg := judgejob.Config{Output: out, Cache: c, MaxTokens: 1024, Engine: e.engine()}
	var revoke sync.Once
	cfg.Engine.OnDurable = func(total int64) {
		if total >= n/3 {
			revoke.Do(func() { e.sim.SetKeyStatus("high_prio", sim.KeyRevoked) })
		}
	}
	res, err := judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Judged != n || res.Pending != 0 || res.Report.Retries.Overloaded == 0 {
		t.Fatalf("judged %d, pending %d, retries %+v", res.Judged, res.Pending, res.Report.Retries)
	}
	// Revoked mid-run, the key is refused: suspect (held back, re-probed),
	// or dead if the run outlasted keys.DefaultHealth.DeadAfter.
	refused := 0
	for _, k := range res.Report.Keys {
		if k.Dead || k.Suspect {
			refused++
		}
	}
	if refused != 1 || e.sim.Stats().Orgs["high_prio"].Keys["high_prio"].Denied == 0 {
		t.Fatalf("the revoked key was not seen refused: %+v", res.Report.Keys)
	}

	vs := readVerdicts(t, out)
	params := requestParams(t, out)
	if len(vs) != n {
		t.Fatalf("%d verdict rows for %d items", len(vs), n)
	}
	fp := judge.Fingerprint(judge.DefaultRubric(), judge.DefaultModel)
	classes := map[judge.Class]int{}
	for id, v := range vs {
		classes[v.Class]++
		if v.Rubric != fp || len(v.Groups) != 1 {
			t.Fatalf("%s: rubric %s groups %v", id, v.Rubric, v.Groups)
		}
		k, _ := cache.KeyOf(params[id], fp)
		if v.Class != judge.OK {
			if c.Contains(k) {
				t.Fatalf("%s: a %s verdict's answer is in the cache", id, v.Class)
			}
			continue
		}
		a, co := sim.VerdictScores(sim.Default().Seed, params[id])
		if v.Scores["aligned"] != float64(a) || v.Scores["coherent"] != float64(co) {
			t.Fatalf("%s: scores %v, the simulator gave %d/%d", id, v.Scores, a, co)
		}
		if !c.Contains(k) {
			t.Fatalf("%s: an ok answer is not in the cache", id)
		}
	}
	if classes[judge.OK] != n {
		t.Fatalf("classes %v", classes)
	}
	if got := res.Summary.Groups[0]; got.Group != judge.AllGroup || got.N != n || len(res.Summary.Groups) != 3 {
		t.Fatalf("summary %+v", res.Summary.Groups)
	}

	// A second run, new output: every verdict from the cache, no call.
	calls := e.calls()
	cfg.Output = filepath.Join(e.dir, "again.jsonl")
	cfg.Engine.OnDurable = nil
	res2, err := judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e.calls() != calls || res2.Report.Cache.Hits != n || res2.Report.Cost.Total.USD != 0 {
		t.Fatalf("second run: %d calls, cache %+v", e.calls()-calls, res2.Report.Cache)
	}
	for id, v := range readVerdicts(t, cfg.Output) {
		if fmt.Sprint(v.Scores) != fmt.Sprint(vs[id].Scores) {
			t.Fatalf("%s: cached verdict %v, first %v", id, v.Scores, vs[id].Scores)
		}
	}

	// Two other rubrics over the same items: one differs in its text, one
	// only in its declared schema (#810). Neither gets a row of another.
	other := judge.DefaultRubric()
	other.System += "\nBe strict."
	schemaOnly := judge.DefaultRubric()
	schemaOnly.Fields[1].Type = judge.Int
	sub := e.items(300)
	for i, r := range []*judge.Rubric{other, schemaOnly} {
		calls := e.calls()
		cfg := judgejob.Config{Output: filepath.Join(e.dir, fmt.Sprintf("rubric-%d.jsonl", i)), Rubric: r, Cache: c, MaxTokens: 1024, Engine: e.engine()}
		res, err := judgejob.RunFile(t.Context(), sub, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Report.Cache.Hits != 0 || e.calls()-calls < 300 || res.Rubric == fp {
			t.Fatalf("rubric %d: %d hits, %d calls", i, res.Report.Cache.Hits, e.calls()-calls)
		}
	}
}

// TestRedriveClasses: truncated verdicts are re-asked with a larger
// max_tokens by --redrive truncated, and only they; a re-run without it
// sends nothing; a refused one is re-driven by name.
func TestRedriveClasses(t *testing.T) {
	e := newEnv(t, func(c *sim.Config) { c.Verdicts.RefusalRate = 0.1 })
	items := e.items(400)
	out := filepath.Join(e.dir, "v.jsonl")
	cfg := judgejob.Config{Output: out, MaxTokens: 12, Engine: e.engine()}
	res, err := judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := res.Summary.Groups[0].Classes
	if cl[judge.Truncated] == 0 || cl[judge.Refused] == 0 || res.Judged != 400 {
		t.Fatalf("classes %v", cl)
	}
	truncated := cl[judge.Truncated]

	// Same command: nothing to do.
	calls := e.calls()
	if res, err = judgejob.RunFile(t.Context(), items, cfg); err != nil || e.calls() != calls || res.Judged != 400 {
		t.Fatalf("re-run: %v, %d calls", err, e.calls()-calls)
	}

	// A larger max_tokens without --redrive changes every request: refused.
	cfg.MaxTokens = 1024
	if _, err := judgejob.RunFile(t.Context(), items, cfg); !errors.As(err, new(*job.ChangedError)) {
		t.Fatalf("changed requests without --redrive: %v", err)
	}

	cfg.Redrive = []judge.Class{judge.Truncated}
	res, err = judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl2 := res.Summary.Groups[0].Classes
	// Re-asked with another max_tokens, a few become refusals (the
	// simulator draws refusals per request body).
	if res.Report.Requests.Redriven != truncated || cl2[judge.Truncated] != 0 ||
		cl2[judge.Refused] < cl[judge.Refused] || cl2[judge.OK]+cl2[judge.Refused] != 400 || res.Judged != 400 {
		t.Fatalf("after --redrive truncated: redriven %d of %d, classes %v", res.Report.Requests.Redriven, truncated, cl2)
	}
	cfg.Redrive = []judge.Class{judge.Refused}
	if res, err = judgejob.RunFile(t.Context(), items, cfg); err != nil || res.Report.Requests.Redriven != cl2[judge.Refused] {
		t.Fatalf("--redrive refused: %v, %+v", err, res.Report.Requests)
	}
	if n := len(readVerdicts(t, out)); n != 400 {
		t.Fatalf("%d verdict rows", n)
	}
}

// TestAnotherRubricOnTheSameOutputIsRefused: the output's results were made
// with one rubric; a re-run with another (even with --redrive, which
// keeps changed rows) must not read them under the new one.
func TestAnotherRubricOnTheSameOutputIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	items := e.items(50)
	out := filepath.Join(e.dir, "v.jsonl")
	if _, err := judgejob.RunFile(t.Context(), items, judgejob.Config{Output: out, Engine: e.engine()}); err != nil {
		t.Fatal(err)
	}
	other := judge.DefaultRubric()
	other.Fields = other.Fields[1:]
	calls := e.calls()
	_, err := judgejob.RunFile(t.Context(), items, judgejob.Config{Output: out, Rubric: other, Redrive: []judge.Class{judge.ParseError}, Engine: e.engine()})
	if !errors.Is(err, judgejob.ErrOtherRubric) || e.calls() != calls {
		t.Fatalf("another rubric on the same output: %v, %d calls", err, e.calls()-calls)
	}
}

// TestBadItemsStopBeforeSending: invalid items, a duplicate id and a
// missing template field are all listed; nothing is sent or written.
func TestBadItemsStopBeforeSending(t *testing.T) {
	e := newEnv(t, nil)
	path := filepath.Join(e.dir, "bad.jsonl")
	os.WriteFile(path, []byte(strings.Join([]string{
		`{"id":"a","question":"q","completion":"c"}`,
		`{"id":"a","question":"q","completion":"c"}`,
		`{"id":"b c","question":"q","completion":"c"}`,
		`{"id":"d","question":"q"}`,
		`not json`,
		`{"id":"e","question":"q","completion":"c"}`,
	}, "\n")), 0o644)
	out := filepath.Join(e.dir, "v.jsonl")
	_, err := judgejob.RunFile(t.Context(), path, judgejob.Config{Output: out, Engine: e.engine()})
	var ie *judgejob.ItemError
	if !errors.As(err, &ie) || ie.Total != 4 || e.calls() != 0 {
		t.Fatalf("%v (calls %d)", err, e.calls())
	}
	for _, want := range []string{"line 2: duplicate", "line 3:", "line 4:", "line 5:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := os.Stat(out + ".requests.jsonl"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a requests file was written: %v", err)
	}
}

// TestJudgeInMemory: the Go API returns verdicts in item order with the
// summary, and keeps nothing when no output is named.
func TestJudgeInMemory(t *testing.T) {
	e := newEnv(t, nil)
	var items []judge.Item
	for i := range 30 {
		items = append(items, judge.Item{ID: fmt.Sprintf("z%02d", 29-i), Fields: map[string]string{"question": "q", "completion": fmt.Sprint("answer ", i)}, Groups: []string{"g"}})
	}
	res, err := judgejob.Judge(t.Context(), items, judgejob.Config{Engine: e.engine(), MaxTokens: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Verdicts) != 30 || res.Summary.Groups[1].Group != "g" || res.Summary.Groups[1].N != 30 {
		t.Fatalf("%d verdicts, summary %+v", len(res.Verdicts), res.Summary)
	}
	for i, v := range res.Verdicts {
		if v.ID != items[i].ID || v.Class != judge.OK {
			t.Fatalf("verdict %d: %+v", i, v)
		}
	}
}

// TestRedriveRefusesChangedItems: a re-drive keeps rows whose request
// changed only in max_tokens, never a row whose item text changed.
func TestRedriveRefusesChangedItems(t *testing.T) {
	e := newEnv(t, func(c *sim.Config) { c.Verdicts.RefusalRate = 0.2 })
	items := e.items(40)
	out := filepath.Join(e.dir, "v.jsonl")
	cfg := judgejob.Config{Output: out, Engine: e.engine()}
	if _, err := judgejob.RunFile(t.Context(), items, cfg); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(items)
	os.WriteFile(items, bytes.Replace(b, []byte("It is 0,"), []byte("It is zero,"), 1), 0o644)
	cfg.Redrive, cfg.MaxTokens = []judge.Class{judge.Refused}, 512
	calls := e.calls()
	_, err := judgejob.RunFile(t.Context(), items, cfg)
	var ce *job.ChangedError
	if !errors.As(err, &ce) || ce.Total != 1 || ce.IDs[0] != "it-00000" || e.calls() != calls {
		t.Fatalf("an edited item under --redrive: %v (%d calls)", err, e.calls()-calls)
	}
}

// TestInterruptedRedriveResumes: a --redrive parse_error interrupted part
// way and resumed with the same command re-asks each parse_error row once:
// neither the cache's old reply nor a second payment for rows re-asked
// before the interruption.
func TestInterruptedRedriveResumes(t *testing.T) {
	e := newEnv(t, nil)
	items := e.items(400)
	c, err := cache.Open(filepath.Join(e.dir, "cache.db"), cache.On)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// "aligned" at most 50: about half the simulator's verdicts are
	// parse errors (out of range), and real answers, so cached.
	strict := judge.DefaultRubric()
	fifty := 50.0
	strict.Fields[1].Max = &fifty
	out := filepath.Join(e.dir, "v.jsonl")
	cfg := judgejob.Config{Output: out, Rubric: strict, Cache: c, MaxTokens: 1024, Engine: e.engine()}
	res, err := judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bad := res.Summary.Groups[0].Classes[judge.ParseError]
	if bad < 100 || res.Report.Cache.Stored != 400 {
		t.Fatalf("%d parse errors, cache %+v", bad, res.Report.Cache)
	}

	calls := e.calls()
	cfg.Redrive = []judge.Class{judge.ParseError}
	// A few at a time, so the interruption comes part way.
	cfg.Engine.Dispatch.Caps = map[api.Family]int{api.FamilySonnet: 3}
	ctx, cancel := context.WithCancel(t.Context())
	cfg.Engine.OnDurable = func(n int64) {
		if n >= int64(bad/3) {
			cancel()
		}
	}
	_, err = judgejob.RunFile(ctx, items, cfg)
	if !errors.Is(err, job.ErrInterrupted) {
		t.Fatalf("interrupted redrive: %v", err)
	}
	cfg.Engine.OnDurable = nil
	res, err = judgejob.RunFile(t.Context(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	probes := int64(2 * len(cfg.Engine.Dispatch.Keys))
	if sent := e.calls() - calls - probes; sent != int64(bad) || res.Report.Cache.Hits != 0 {
		t.Fatalf("%d parse errors re-asked with %d calls, %d cache hits", bad, sent, res.Report.Cache.Hits)
	}
	// Done: the next --redrive is a new one and asks them all again.
	calls = e.calls()
	if _, err := judgejob.RunFile(t.Context(), items, cfg); err != nil || e.calls()-calls-int64(len(cfg.Engine.Dispatch.Keys)) != int64(bad) {
		t.Fatalf("a new redrive: %v, %d calls", err, e.calls()-calls)
	}
}

// TestTemperatureTheModelRefuses: a temperature Sonnet 5 refuses (on
// every API version) or any temperature under API version 2026-10-21 is an
// error at start; nothing is built, sent or written. The default request
// (no temperature) goes.
func TestTemperatureTheModelRefuses(t *testing.T) {
	e := newEnv(t, nil)
	items := filepath.Join(e.dir, "items.jsonl")
	os.WriteFile(items, []byte(`{"id":"a","question":"q","completion":"c"}`+"\n"), 0o644)
	warm := 0.7
	for _, tc := range []struct {
		name, model, version string
		temp                 *float64
		want                 string
	}{
		{"Sonnet 5 at 0.7", "claude-sonnet-5", api.Version20230601, &warm, "--temperature: claude-sonnet-5 refuses temperature at 0.7"},
		{"2026-10-21, any temperature", judge.DefaultModel, api.Version20261021, &warm, "--temperature: API version 2026-10-21 refuses temperature"},
	} {
		eng := e.engine()
		eng.Dispatch.Client = client.New(client.Config{BaseURL: e.base, Version: tc.version})
		out := filepath.Join(e.dir, tc.name+".jsonl")
		_, err := judgejob.RunFile(t.Context(), items, judgejob.Config{Output: out, Model: tc.model, Temperature: tc.temp, Engine: eng})
		if err == nil || !strings.Contains(err.Error(), tc.want) || e.calls() != 0 {
			t.Errorf("%s: %v (calls %d), want %q", tc.name, err, e.calls(), tc.want)
		}
		if _, err := os.Stat(out + ".requests.jsonl"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a requests file was written", tc.name)
		}
	}
	eng := e.engine()
	eng.Dispatch.Client = client.New(client.Config{BaseURL: e.base, Version: api.Version20261021})
	if _, err := judgejob.RunFile(t.Context(), items, judgejob.Config{Output: filepath.Join(e.dir, "ok.jsonl"), MaxTokens: 1024, Engine: eng}); err != nil {
		t.Errorf("the default request under 2026-10-21: %v", err)
	}
}
