package job_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/sim"
)

// writeShared writes n requests that share a long system prompt (≈ 2,600
// tokens, above Sonnet's 1,024) and differ in their question.
func writeShared(t *testing.T, path string, n int) {
	t.Helper()
	rubric := strings.Repeat("Grade the answer against the reference carefully. ", 200)
	var b strings.Builder
	for i := range n {
		line, _ := json.Marshal(map[string]any{"custom_id": fmt.Sprintf("q%d", i), "params": map[string]any{
			"model": "claude-sonnet-4-5", "max_tokens": 64, "system": rubric,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Question %d: is 2+2=4?", i)}}}})
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCachePrefixAuto: with --cache-prefix auto (the default) a job whose
// requests share a long system prompt sends it with one breakpoint and
// writes it once per organization; every results line keys on the request
// as written (its params hash) and says a 5-minute breakpoint was added;
// the job costs less than the same job with --cache-prefix off, which
// sends the requests untouched (the simulator sees no breakpoint, caches
// nothing). A resume finds every row done.
func TestCachePrefixAuto(t *testing.T) {
	const n = 300
	var autoRep *job.Report
	run := func(off bool) (*env, float64) {
		e := newEnv(t, 0, nil)
		writeShared(t, e.in, n)
		o := e.options()
		o.CachePrefixOff = off
		rep, err := e.run(o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Succeeded != n {
			t.Fatalf("off=%v: %d of %d succeeded", off, rep.Succeeded, n)
		}
		if !off {
			autoRep = rep
		}
		return e, rep.Cost.Total.USD
	}
	auto, autoCost := run(false)
	in, got := auto.inputParams(), auto.readResults()
	for id, params := range in {
		r := got[id]
		if r.Sluice == nil || r.Sluice.ParamsHash != jsonl.ParamsHash(params) || r.Sluice.CachePrefix != "5m" {
			t.Fatalf("%s: metadata %+v, want the written request's hash and cache_prefix 5m", id, r.Sluice)
		}
	}
	var writes, reads int64
	for name, o := range auto.sim.Stats().Orgs {
		st := o.Pools[api.PoolSonnet4]
		writes += st.CacheWriteTokens
		reads += st.CacheReadTokens
		if st.CacheWriteTokens > 0 && st.CacheReadTokens == 0 {
			t.Errorf("org %s wrote the prefix and never read it", name)
		}
	}
	orgs := 0
	for _, o := range auto.sim.Stats().Orgs {
		if o.Pools[api.PoolSonnet4].CacheWriteTokens > 0 {
			orgs++
		}
	}
	if orgs == 0 || reads == 0 || writes%int64(orgs) != 0 || writes/int64(orgs) > 3000 {
		t.Errorf("%d orgs wrote %d prefix tokens and read %d: want one ≈ 2,600-token write per org", orgs, writes, reads)
	}
	// Resume: everything is done, nothing changed.
	calls := auto.simCalls()
	if _, err := auto.run(auto.options()); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if auto.simCalls() != calls {
		t.Errorf("the resume sent %d calls", auto.simCalls()-calls)
	}

	off, offCost := run(true)
	for name, o := range off.sim.Stats().Orgs {
		if st := o.Pools[api.PoolSonnet4]; st.CacheWriteTokens != 0 || st.CacheReadTokens != 0 {
			t.Errorf("--cache-prefix off: org %s cached %+v", name, st)
		}
	}
	for id, r := range off.readResults() {
		if r.Sluice == nil || r.Sluice.CachePrefix != "" {
			t.Fatalf("--cache-prefix off: %s metadata %+v", id, r.Sluice)
		}
	}
	if autoCost >= 0.6*offCost {
		t.Errorf("cost with auto $%.4f, off $%.4f: want well under (input is ~97 %% prefix)", autoCost, offCost)
	}
	// The report says what the cache did, and its saving is the difference.
	pc := autoRep.PromptCache
	if pc.Added != n || pc.ReadTokens != reads || pc.WriteTokens != writes || pc.ITPMSpared != reads {
		t.Errorf("report %+v, want %d breakpoints added, the simulator's %d read and %d written", pc, n, reads, writes)
	}
	var laneReads int64
	for _, l := range autoRep.Lanes {
		laneReads += l.CacheReadTokens
	}
	if laneReads != reads {
		t.Errorf("lanes read %d tokens, the simulator %d", laneReads, reads)
	}
	checkSaving(t, autoRep, offCost, fmt.Sprintf("prompt cache: %d requests sent with a breakpoint sluice added", n))
}

// checkSaving fails unless the cached run's report says it saved what the
// uncached run (offCost) cost more, within 2 %, and its summary holds
// want.
func checkSaving(t *testing.T, rep *job.Report, offCost float64, want string) {
	t.Helper()
	saved, autoCost := rep.PromptCache.SavedUSD, rep.Cost.Total.USD
	if d := offCost - (autoCost + saved); d > 0.02*offCost || d < -0.02*offCost {
		t.Errorf("saved $%.4f, but off cost $%.4f and auto $%.4f", saved, offCost, autoCost)
	}
	var sum strings.Builder
	rep.Summary(&sum)
	if !strings.Contains(sum.String(), want) {
		t.Errorf("the summary lacks %q:\n%s", want, sum.String())
	}
	t.Log(sum.String())
}

// TestCachePrefixSmallGroupsAsWritten: a prefix shared by too few
// requests to repay a write per organization is sent as written.
func TestCachePrefixSmallGroupsAsWritten(t *testing.T) {
	e := newEnv(t, 0, nil)
	writeShared(t, e.in, 6) // three orgs: fewer than 8 sharers
	rep, err := e.run(e.options())
	if err != nil {
		t.Fatal(err)
	}
	if rep.PromptCache.Added != 0 {
		t.Errorf("%d breakpoints added to a prefix six requests share", rep.PromptCache.Added)
	}
	for id, r := range e.readResults() {
		if r.Sluice == nil || r.Sluice.CachePrefix != "" {
			t.Errorf("%s: %+v, want the request as written", id, r.Sluice)
		}
	}
}

// TestCachePrefixBatchRoute: with --cache-prefix batch, on the batch
// route the breakpoint carries
// the 1 h TTL, each org that takes a batch is primed once by a sync
// request right before its first one, and the batches then read the
// prefix on most rows (best effort: the simulator's cache_hit); the report
// gives the batch hit rate, the primers and their cost, and the job costs
// less than the same job with --cache-prefix off.
func TestCachePrefixBatchRoute(t *testing.T) {
	const n = 600
	run := func(off bool) (*env, *job.Report) {
		e := newEnv(t, 0, func(c *sim.Config) { c.TimeScale = 2000 })
		writeShared(t, e.in, n)
		o := e.options()
		o.CachePrefixOff, o.CachePrefixBatch = off, !off
		o.Plan = batchRouting(1)
		rep, err := e.run(o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Succeeded != n {
			t.Fatalf("off=%v: %d of %d succeeded", off, rep.Succeeded, n)
		}
		return e, rep
	}
	auto, rep := run(false)
	for id, r := range auto.readResults() {
		if r.Sluice == nil || r.Sluice.Route != route.Batch || r.Sluice.CachePrefix != "1h" {
			t.Fatalf("%s: metadata %+v, want the batch route and cache_prefix 1h", id, r.Sluice)
		}
	}
	var orgs int64
	var reads, writes, primerWrites int64
	for _, o := range auto.sim.Stats().Orgs {
		if o.Batches.Created > 0 {
			orgs++
		}
		reads += o.Batches.CacheReadTokens
		writes += o.Batches.CacheWriteTokens
		primerWrites += o.Pools[api.PoolSonnet4].CacheWriteTokens
	}
	pc := rep.PromptCache
	if orgs == 0 || pc.Primers != orgs || rep.Batch.Primed != orgs || rep.Batch.Seeds != orgs {
		t.Errorf("%d primers (batch stats %d), %d seeds for %d orgs with batches, want one each", pc.Primers, rep.Batch.Primed, rep.Batch.Seeds, orgs)
	}
	if pc.BatchReadTokens != reads || pc.BatchWriteTokens != writes || pc.WriteTokens != writes+primerWrites || pc.ITPMSpared != 0 {
		t.Errorf("report %+v; the simulator's batches read %d and wrote %d, its primers wrote %d", pc, reads, writes, primerWrites)
	}
	if hr := pc.BatchHitRate(); hr < 0.6 {
		t.Errorf("batch hit rate %.2f, want most rows to read a primed prefix", hr)
	}
	if rep.Cost.Total.SyncUSD <= 0 {
		t.Errorf("the primers' cost is not in the run's: %+v", rep.Cost.Total)
	}
	// The default (auto without batch) sends the batch route as written.
	de := newEnv(t, 0, func(c *sim.Config) { c.TimeScale = 2000 })
	writeShared(t, de.in, n)
	do := de.options()
	do.Plan = batchRouting(1)
	defRep, err := de.run(do)
	if err != nil {
		t.Fatal(err)
	}
	if defRep.PromptCache.Primers != 0 || defRep.PromptCache.Added != 0 {
		t.Errorf("--cache-prefix auto on the batch route: %+v, want requests as written", defRep.PromptCache)
	}
	for id, r := range de.readResults() {
		if r.Sluice == nil || r.Sluice.CachePrefix != "" {
			t.Fatalf("--cache-prefix auto on batch: %s metadata %+v", id, r.Sluice)
		}
	}
	_, offRep := run(true)
	if offRep.PromptCache.Primers != 0 || offRep.Cost.Total.SyncUSD != 0 {
		t.Errorf("--cache-prefix off primed: %+v", offRep.PromptCache)
	}
	offCost, autoCost := offRep.Cost.Total.USD, rep.Cost.Total.USD
	if autoCost >= 0.75*offCost {
		t.Errorf("batch cost with auto $%.4f, off $%.4f: want well under", autoCost, offCost)
	}
	checkSaving(t, rep, offCost, fmt.Sprintf("after %d primers", orgs))
}

// TestPlanSeesTheSharedPrefix: the planner is told what the prompt cache
// can spare the requests it plans — every pending request shares one
// prefix of the rubric's estimated tokens — and nothing with
// --cache-prefix off; route.JobOf turns that into the job's cached share.
func TestPlanSeesTheSharedPrefix(t *testing.T) {
	const n = 300
	for _, off := range []bool{false, true} {
		e := newEnv(t, 0, nil)
		writeShared(t, e.in, n)
		o := e.options()
		o.CachePrefixOff = off
		var seen jsonl.Summary
		var pending int
		o.Plan = func(s jsonl.Summary, p int) (route.Routing, error) {
			seen, pending = s, p
			return route.Routing{Route: route.Sync, Why: "test"}, nil
		}
		if _, err := e.run(o); err != nil {
			t.Fatal(err)
		}
		sp := seen.Prefix
		if off {
			if sp != (cacheprefix.Reach{}) {
				t.Errorf("--cache-prefix off: the planner was told %+v", sp)
			}
			continue
		}
		rubric := int64(len(strings.Repeat("Grade the answer against the reference carefully. ", 200)) / 4)
		if sp.Requests != n || sp.Prefixes != 1 || sp.Tokens/int64(n) < rubric || sp.Tokens/int64(n) > rubric+8 {
			t.Fatalf("the planner was told %+v, want %d requests sharing one prefix of about %d tokens", sp, n, rubric)
		}
		j := route.JobOf(seen, pending)
		if j.Cached.Share != 1 || j.Cached.Prefixes != 1 || j.Cached.Tokens*j.Cached.Share > j.MeanInput || j.Cached.Tokens < float64(rubric) {
			t.Fatalf("JobOf: %+v", j)
		}
	}
}
