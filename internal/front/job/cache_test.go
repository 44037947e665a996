package job_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/sim"
)

func openCache(t *testing.T, mode cache.Mode) *cache.Cache {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache.db"), mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stopReasons counts the results file's succeeded rows by stop reason.
func (e *env) stopReasons() map[string]int {
	n := map[string]int{}
	for _, r := range e.readResults() {
		var res api.BatchResult
		if json.Unmarshal(r.Result, &res) == nil && res.Type == api.ResultSucceeded {
			n[res.Message.StopReason]++
		}
	}
	return n
}

// TestCacheAnswersASecondRunWithoutACall: a first run stores every answer
// (529s injected: none of them is stored); a second run of the same input
// into a new output is answered entirely from the cache, with not one call
// — not even the key probes — and costs nothing.
func TestCacheAnswersASecondRunWithoutACall(t *testing.T) {
	e := newEnv(t, 0, func(c *sim.Config) { c.Faults.P529 = 0.05 })
	// max_tokens high enough that no answer is cut (a cut one is not stored).
	if err := (workload.Judge{N: 1000, Seed: 3, MaxTokens: 4096}).WriteFile(e.in); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, cache.On)
	o := e.options()
	o.Cache, o.CacheExtra = c, []string{"rubric-a"}
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnce()
	if rep.Cache.Stored != 1000 || rep.Cache.Hits != 0 || rep.Retries.Overloaded == 0 {
		t.Fatalf("first run: cache %+v, retries %+v", rep.Cache, rep.Retries)
	}
	first := e.readResults()
	calls := e.simCalls()

	o.Output = filepath.Join(e.dir, "second.jsonl")
	rep, err = e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if e.simCalls() != calls {
		t.Fatalf("the cached run made %d calls: %+v %+v route %s keys %+v", e.simCalls()-calls, rep.Requests, rep.Cache, rep.Route, rep.Keys)
	}
	if rep.Cache.Hits != 1000 || rep.Requests.FromCache != 1000 || rep.Requests.Written != 1000 ||
		rep.Cost.Total.USD != 0 || rep.Cache.SavedUSD <= 0 || rep.Route != route.Cache {
		t.Fatalf("cached run: requests %+v cache %+v cost %v route %s", rep.Requests, rep.Cache, rep.Cost.Total.USD, rep.Route)
	}
	e.out = o.Output
	for id, r := range e.readResults() {
		var a, b api.BatchResult
		json.Unmarshal(first[id].Result, &a)
		json.Unmarshal(r.Result, &b)
		if b.Type != api.ResultSucceeded || b.Message.Content[0].Text != a.Message.Content[0].Text ||
			r.Sluice.Route != route.Cache || r.Sluice.ParamsHash != first[id].Sluice.ParamsHash {
			t.Fatalf("%s: cached row %s %+v differs from the first run's", id, r.Result, r.Sluice)
		}
	}

	// Another extra key part (another rubric) shares nothing.
	o.Output = filepath.Join(e.dir, "third.jsonl")
	o.CacheExtra = []string{"rubric-b"}
	rep, err = e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cache.Hits != 0 || rep.Succeeded != 1000 {
		t.Fatalf("another extra key hit the cache: %+v", rep.Cache)
	}
}

// TestCacheNeverStoresRefusalsOrTruncations: refused and cut answers are
// written as results but never stored, so a second run asks for exactly
// those again.
func TestCacheNeverStoresRefusalsOrTruncations(t *testing.T) {
	e := newEnv(t, 0, func(c *sim.Config) {
		c.Verdicts.Enabled = true
		c.Verdicts.RefusalRate = 0.2
	})
	// Half the lines with a max_tokens too small for a verdict.
	var in bytes.Buffer
	for i := range 600 {
		id := "r" + strings.Repeat("0", 3-len(itoa(i))) + itoa(i)
		mt := 256
		if i%2 == 1 {
			mt = 5
		}
		p, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": mt, "system": workload.Rubric,
			"messages": []map[string]string{{"role": "user", "content": "question " + id}}})
		line, _ := json.Marshal(api.BatchRequest{CustomID: id, Params: p})
		in.Write(append(line, '\n'))
	}
	if err := os.WriteFile(e.in, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, cache.On)
	o := e.options()
	o.Cache = c
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	stops := e.stopReasons()
	good := stops[api.StopEndTurn]
	bad := stops[api.StopRefusal] + stops[api.StopMaxTokens]
	if good+bad != 600 || stops[api.StopRefusal] == 0 || stops[api.StopMaxTokens] == 0 {
		t.Fatalf("stop reasons %v", stops)
	}
	if rep.Cache.Stored != int64(good) || rep.Cache.Refused != int64(bad) {
		t.Fatalf("cache %+v for %d answers and %d non-answers", rep.Cache, good, bad)
	}
	calls := e.simCalls()
	o.Output = filepath.Join(e.dir, "again.jsonl")
	rep, err = e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cache.Hits != int64(good) || e.simCalls()-calls < int64(bad) || rep.Succeeded != int64(bad) {
		t.Fatalf("second run: %d hits (want %d), %d calls for %d non-answers, %d sent", rep.Cache.Hits, good, e.simCalls()-calls, bad, rep.Succeeded)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestCacheSharedWithBatchPath: half the input is cached by a sync run; the
// whole input on the batch route sends only the other half, in batches,
// and stores their answers too.
func TestCacheSharedWithBatchPath(t *testing.T) {
	e := newEnv(t, 1000, func(c *sim.Config) { c.TimeScale = 2000 })
	all, err := os.ReadFile(e.in)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(all, []byte("\n"))
	half := filepath.Join(e.dir, "half.jsonl")
	os.WriteFile(half, bytes.Join(lines[:500], nil), 0o644)
	c := openCache(t, cache.On)
	o := e.options()
	o.Cache, o.Input, o.Output = c, half, filepath.Join(e.dir, "half-out.jsonl")
	first, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	// The simulator cuts a few answers at max_tokens: those are not stored.
	cachedHalf := int(first.Cache.Stored)
	if cachedHalf < 450 || int64(cachedHalf)+first.Cache.Refused != 500 {
		t.Fatalf("first half: cache %+v", first.Cache)
	}

	o = e.options()
	o.Cache = c
	o.Plan = batchRouting(1)
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	e.checkExactlyOnceAllowCache()
	routes := map[string]int{}
	for _, r := range e.readResults() {
		routes[r.Sluice.Route]++
	}
	sent := 1000 - cachedHalf
	if routes[route.Cache] != cachedHalf || routes[route.Batch] != sent || rep.Cache.Stored+rep.Cache.Refused != int64(sent) || rep.Cache.Stored < int64(sent)*9/10 {
		t.Fatalf("routes %v, cache %+v", routes, rep.Cache)
	}
	if n := batchesCreated(e.sim); n != int64((sent+199)/200) {
		t.Fatalf("%d batches for %d requests in chunks of 200", n, sent)
	}

	// Now every answer is cached, from either route.
	o.Output = filepath.Join(e.dir, "all-cached.jsonl")
	want := int64(cachedHalf) + rep.Cache.Stored
	if rep, err = e.run(o); err != nil || rep.Cache.Hits != want {
		t.Fatalf("%v, cache %+v, want %d hits", err, rep.Cache, want)
	}
}

// TestRedriveAndCacheAccept: ids named by Redrive.Again are driven again;
// the cache answers them unless Redrive.AcceptCached rejects the cached
// answer, and then they are sent.
func TestRedriveAndCacheAccept(t *testing.T) {
	e := newEnv(t, 400, nil)
	c := openCache(t, cache.On)
	o := e.options()
	o.Cache = c
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	again := map[string]bool{}
	for id := range e.readResults() {
		if len(again) < 50 {
			again[id] = true
		}
	}
	o.Redrive.Again = func(id string) bool { return again[id] }

	// Accepted: the cache answers every re-driven id it holds.
	calls := e.simCalls()
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Redriven != 50 || rep.Cache.Hits+rep.Succeeded != 50 || rep.Cache.Hits < 45 {
		t.Fatalf("redrive, cache accepted: %+v cache %+v, %d sent", rep.Requests, rep.Cache, rep.Succeeded)
	}
	if rep.Succeeded == 0 && e.simCalls() != calls {
		t.Fatalf("%d calls for a redrive the cache answered", e.simCalls()-calls)
	}

	// Rejected: every re-driven id is sent.
	var vetted int
	o.Redrive.AcceptCached = func([]byte) bool { vetted++; return false }
	calls = e.simCalls()
	rep, err = e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests.Redriven != 50 || rep.Succeeded != 50 || rep.Cache.Hits != 0 || vetted == 0 || e.simCalls()-calls != 50+int64(len(o.Dispatch.Keys)) {
		t.Fatalf("redrive, cache rejected: %+v cache %+v, %d calls, %d vetted", rep.Requests, rep.Cache, e.simCalls()-calls, vetted)
	}
	e.checkExactlyOnceAllowCache()
}

// TestKeepChanged: rows named by KeepChanged are kept though their request
// changed; any other changed row is refused.
func TestKeepChanged(t *testing.T) {
	e := newEnv(t, 100, nil)
	o := e.options()
	if _, err := e.run(o); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(e.in)
	os.WriteFile(e.in, bytes.ReplaceAll(b, []byte(`"max_tokens":256`), []byte(`"max_tokens":300`)), 0o644)
	o.Redrive.KeepChanged = func(id string) bool { return id != "item-0000007" }
	if _, err := e.run(o); !errors.As(err, new(*job.ChangedError)) || !strings.Contains(err.Error(), "item-0000007") {
		t.Fatalf("a changed row not named by KeepChanged: %v", err)
	}
	o.Redrive.KeepChanged = func(string) bool { return true }
	calls := e.simCalls()
	if rep, err := e.run(o); err != nil || rep.Requests.Written != 0 || e.simCalls() != calls {
		t.Fatalf("kept rows re-sent: %v %+v", err, rep)
	}
}

// TestReadOnlyCacheStoresNothing: a read-only cache answers but is never
// written.
func TestReadOnlyCacheStoresNothing(t *testing.T) {
	e := newEnv(t, 200, nil)
	path := filepath.Join(t.TempDir(), "c.db")
	c, err := cache.Open(path, cache.On)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ro, err := cache.Open(path, cache.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	o := e.options()
	o.Cache = ro
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Cache.Stored != 0 || rep.Cache.Mode != "read-only" {
		t.Fatalf("cache %+v", rep.Cache)
	}
	if s, _ := ro.Stats(); s.Entries != 0 {
		t.Fatalf("a read-only cache holds %d rows", s.Entries)
	}
}
