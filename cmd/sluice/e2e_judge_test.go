package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/sim"
)

// TestJudgeCommand: `sluice judge` writes one verdict per item, the
// summary table, CSV and JSON; a second run into a new output is answered
// by the cache with no call; `sluice cache stats` sees the answers; keys
// appear nowhere.
func TestJudgeCommand(t *testing.T) {
	e := newE2EWith(t, func(c *sim.Config) { c.Verdicts.Enabled = true })
	var items bytes.Buffer
	for i := range 300 {
		fmt.Fprintf(&items, `{"id":"q%d","question":"What is %d?","completion":"%d.","group":%q}`+"\n", i, i, i, []string{"x", "y"}[i%2])
	}
	os.WriteFile(e.path("items.jsonl"), items.Bytes(), 0o644)
	first := e.runOK("judge", "items.jsonl", "-o", "v.jsonl", "--cache", "cache.db", "--max-tokens", "1024",
		"--csv", "s.csv", "--summary", "s.json", "--report", "r1.json")
	lines := bytes.Count(must(os.ReadFile(e.path("v.jsonl"))), []byte("\n"))
	if lines != 300 {
		t.Fatalf("%d verdict rows for 300 items", lines)
	}
	var sum judge.Summary
	if err := json.Unmarshal(must(os.ReadFile(e.path("s.json"))), &sum); err != nil || len(sum.Groups) != 3 || sum.Groups[0].Classes[judge.OK] != 300 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	if csv := string(must(os.ReadFile(e.path("s.csv")))); !strings.HasPrefix(csv, "group,n,ok,") || strings.Count(csv, "\n") != 4 {
		t.Fatalf("csv:\n%s", csv)
	}
	if out := first.stdout.String(); !strings.Contains(out, "(all)") || !strings.Contains(out, "aligned") {
		t.Fatalf("no summary table on stdout:\n%s", out)
	}

	calls := e.simCalls()
	second := e.runOK("judge", "items.jsonl", "-o", "v2.jsonl", "--cache", "cache.db", "--max-tokens", "1024", "--report", "r2.json")
	if rep := e.readReport(e.path("r2.json")); rep.Cache.Hits != 300 || e.simCalls() != calls {
		t.Fatalf("second run: cache %+v, %d calls", rep.Cache, e.simCalls()-calls)
	}
	st := e.runOK("cache", "stats", "--cache", "cache.db", "--json")
	var s cache.Stats
	if err := json.Unmarshal(st.stdout.Bytes(), &s); err != nil || s.Entries != 300 {
		t.Fatalf("cache stats: %s (%v)", st.stdout.String(), err)
	}

	// A bad field declaration stops before anything is sent.
	bad := e.start("judge", "items.jsonl", "-o", "v3.jsonl", "--cache-mode", "off", "--fields", "score:bool")
	if code := bad.wait(); code != 1 || !strings.Contains(bad.stderr.String(), "score") || e.simCalls() != calls {
		t.Fatalf("bad --fields: exit %d, %d calls\n%s", code, e.simCalls()-calls, bad.stderr.String())
	}

	outputs := map[string][]byte{"stdout 1": first.stdout.Bytes(), "stderr 1": first.stderr.Bytes(),
		"stdout 2": second.stdout.Bytes(), "stderr 2": second.stderr.Bytes()}
	for _, f := range []string{"v.jsonl", "v.jsonl.results.jsonl", "v.jsonl.requests.jsonl", "r1.json", "cache.db"} {
		outputs[f] = must(os.ReadFile(e.path(f)))
	}
	for name, b := range outputs {
		for _, k := range fakeKeys {
			if bytes.Contains(b, []byte(k)) {
				t.Errorf("%s contains the key ending %s", name, k[len(k)-4:])
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
