package bench

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/sim"
)

// TestChaosChecker checks the chaos benchmark's own judge on a made-up
// input and results file: a missing row, a row written twice, a row
// holding another request's answer, a row for an id not in the input, an
// errored row and a torn last line are each counted where they belong.
func TestChaosChecker(t *testing.T) {
	dir := t.TempDir()
	params := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"q%d"}]}`, i))
	}
	var in strings.Builder
	for i := range 6 {
		fmt.Fprintf(&in, `{"custom_id":"r%d","params":%s}`+"\n", i, params(i))
	}
	row := func(id string, answerOf int, route string) string {
		return fmt.Sprintf(`{"custom_id":%q,"result":{"type":"succeeded","message":{"content":[{"type":"text","text":"%s the answer"}]}},"sluice":{"route":%q}}`,
			id, sim.AnswerTag(params(answerOf)), route) + "\n"
	}
	out := row("r0", 0, "sync") + row("r1", 1, "batch") + row("r1", 1, "sync") + // r1 twice
		row("r2", 3, "batch") + // r2 holds r3's answer
		row("r9", 0, "sync") + // not in the input
		`{"custom_id":"r4","result":{"type":"errored","error":{"type":"error"}}}` + "\n" +
		row("r5", 5, "cache") + `{"custom_id":"r3","res` // torn; r3 has no row
	inPath, outPath := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(inPath, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outPath, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := checkChaosResults(inPath, outPath)
	if err != nil {
		t.Fatal(err)
	}
	type counts struct{ Rows, Lost, Missing, Duplicated, Foreign, NotSucceeded, Torn int }
	got := counts{rc.Rows, rc.Lost, rc.Missing, rc.Duplicated, rc.Foreign, rc.NotSucceeded, rc.Torn}
	want := counts{Rows: 7, Lost: 3, Missing: 1, Duplicated: 1, Foreign: 2, NotSucceeded: 1, Torn: len(`{"custom_id":"r3","res`)}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if rc.ByRoute["sync"] != 2 || rc.ByRoute["batch"] != 1 || rc.ByRoute["cache"] != 1 {
		t.Errorf("succeeded rows by route %v, want sync 2, batch 1, cache 1", rc.ByRoute)
	}
}

// TestChaosKeyScan plants a key's value, its first 20 characters and its
// base64 form in three files, and the value in a skipped directory: the
// scan finds the three, across its read boundary too, and not the fourth.
func TestChaosKeyScan(t *testing.T) {
	dir := t.TempDir()
	secret := "sk-ant-api03-0123456789abcdef0123456789abcdef01234567"
	other := "sk-ant-api03-fedcba9876543210fedcba9876543210fedcba98"
	big := make([]byte, 8<<20+100)
	copy(big[8<<20-10:], secret) // straddles the first 8 MiB read
	files := map[string][]byte{
		"a/results.jsonl": []byte(`{"x":"` + secret[:20] + `…"}`),
		"b/big.bin":       big,
		"c/log.txt":       []byte("token " + base64.StdEncoding.EncodeToString([]byte(secret)) + "\n"),
		"clean.txt":       []byte("nothing here: " + other[:12]),
		"skip/cfg.json":   []byte(secret),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, n, _, err := scanForKeys(dir, map[string]bool{filepath.Join(dir, "skip"): true}, map[string]string{"k": secret, "o": other})
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d files scanned, want 4 (the skipped directory left out)", n)
	}
	joined := strings.Join(found, "\n")
	for _, want := range []string{"k (first 20 characters) in a/results.jsonl", "k (value) in b/big.bin", "k (base64, offset 0) in c/log.txt"} {
		if !strings.Contains(joined, want) {
			t.Errorf("not found: %q; found:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "skip") || strings.Contains(joined, "o (") || strings.Contains(joined, "clean.txt") {
		t.Errorf("found where nothing is:\n%s", joined)
	}
}

// TestChaosJournalState follows chunks through their records.
func TestChaosJournalState(t *testing.T) {
	js := journalState{open: map[string]string{}, batches: map[string]bool{}}
	for _, l := range []string{
		`{"op":"run","v":1}`,
		`{"op":"intent","chunk":"a"}`, `{"op":"intent","chunk":"b"}`,
		`{"op":"created","chunk":"a","batch":"msgbatch_1"}`,
		`{"op":"created","chunk":"b","batch":"msgbatch_2","adopted":true}`,
		`{"op":"intent","chunk":"c"}`,
		`{"op":"harvested","chunk":"a"}`,
		`not json`,
	} {
		js.add([]byte(l))
	}
	if js.state("intent") != 1 || js.state("created") != 1 {
		t.Errorf("open: %v; want c an intent and b created", js.open)
	}
	want := ChaosJournal{Intents: 3, Created: 2, Adopted: 1, Harvested: 1, Batches: 2}
	if got := js.counts(); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
}

// TestChaosSchedule: the kinds' shares, for any number of kills.
func TestChaosSchedule(t *testing.T) {
	for _, n := range []int{0, 1, 3, 10, 50} {
		ks := chaosSchedule(n, rand.New(rand.NewPCG(1, 2)))
		if len(ks) != n {
			t.Fatalf("%d kinds for %d kills", len(ks), n)
		}
		if n == 50 {
			c := map[string]int{}
			for _, k := range ks {
				c[k]++
			}
			if c[killCreate] != 10 || c[killPoll] != 10 || c[killDownload] != 10 || c[killStartup] != 5 || c[killRandom] != 15 {
				t.Errorf("50 kills: %v", c)
			}
		}
	}
}

// TestChaosLimitsFile: the planner reads the limits file written from the
// chaos world and splits a 100,000-request job between sync and batch, on
// the simulator's clock.
func TestChaosLimitsFile(t *testing.T) {
	cfg := chaosSim(Chaos{TimeScale: 20, Seed: 1}, map[string]string{"high_prio": "a", "batch": "b", "low_prio": "c", chaosRevoked: "d"})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "limits.json")
	if err := writeChaosLimits(path, cfg); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := plan.ReadWorld(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Orgs) != 3 || w.Poll.Min != plan.DefaultPollMin/20 {
		t.Errorf("%d orgs, poll min %v; want 3 and %v", len(w.Orgs), w.Poll.Min, plan.DefaultPollMin/20)
	}
	prio, err := plan.ParsePriority("latency") // sluice run's default
	if err != nil {
		t.Fatal(err)
	}
	d, err := plan.Decide(w, plan.Job{N: 100000, Model: "claude-sonnet-4-5-20250929", MeanInput: 260, MaxTokens: 256}, plan.Options{Priority: prio, Chunk: 250})
	if err != nil {
		t.Fatal(err)
	}
	if d.Route != plan.RouteSplit || d.BatchN < 10000 || d.BatchN > 60000 {
		t.Errorf("route %s with %d to batch; want a split with a sizeable batch part", d.Route, d.BatchN)
	}
}
