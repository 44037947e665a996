package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/keys"
)

// execute runs a command with args and returns its standard output, in
// an environment that holds no key: `plan` without a named world plans
// for the default preset, never for the keys of whoever runs the tests.
func execute(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	out, _, err := executeWith(t, nil, cmd, args...)
	return out, err
}

// executeWith is execute with env's variables set (the keys a test
// gives), returning standard error too.
func executeWith(t *testing.T, env map[string]string, cmd *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	for _, name := range []string{keys.EnvAPIKey, keys.EnvBatch, keys.EnvLowPrio, keys.EnvAPIKeys} {
		t.Setenv(name, "") // an empty variable holds no key
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	if cmd.Flags().Lookup("no-dotenv") != nil {
		args = append(args, "--no-dotenv") // a .env beside the tests is not the test's
	}
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestPlanJSON(t *testing.T) {
	out, err := execute(t, planCmd(), "--n", "1000000", "--model", "claude-opus-4-8", "--prefer", "latency", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var d decisionJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if d.World != "three-org" || d.N != 1_000_000 || d.Route != "split" || d.SyncN+d.BatchN != d.N ||
		d.MeanInput != 260 || d.MeanOutput != 144 || len(d.Lanes) != 3 || d.Batch == nil || d.Batch.Chunk != 500 ||
		d.Wall.Mid <= 0 || d.BatchWall == nil || d.Crossover == 0 || d.Why == "" {
		t.Errorf("decision %+v", d)
	}
}

func TestPlanText(t *testing.T) {
	out, err := execute(t, planCmd(), "--n", "50", "--preset", "scale", "--prefer", "cost")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"50 × claude-sonnet-4-5-20250929", "on scale, priority cost", "route          sync", "not worth a batch queue"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanInput: --input measures N, model and shape from a requests file.
func TestPlanInput(t *testing.T) {
	in := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := (workload.Judge{N: 300, Seed: 3, Model: "claude-haiku-4-5-20251001", MaxTokens: 128}).WriteFile(in); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, planCmd(), "--input", in, "--json", "--deadline", "1m")
	if err != nil {
		t.Fatal(err)
	}
	var d decisionJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.N != 300 || d.Model != "claude-haiku-4-5-20251001" || d.MaxTokens != 128 || d.MeanInput < 100 || d.MeanInput > 500 ||
		d.Route != "sync" || d.Deadline != 60 {
		t.Errorf("decision %+v", d)
	}
}

func TestPlanLimitsFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "limits.json")
	if err := os.WriteFile(f, []byte(`{"name": "mine", "orgs": [{"name": "lab", "limits": {"sonnet-4": {"rpm": 600}}}], "caps": {"sonnet": 20}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, planCmd(), "--limits-file", f, "--n", "6000", "--prefer", "latency", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var d decisionJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	// 20 ÷ 2.84 s = 7.0/s is below 600 RPM = 10/s: the file's cap binds.
	if d.World != "mine" || len(d.Lanes) != 1 || d.Lanes[0].Cap != 20 || d.Lanes[0].Binding != "etiquette cap" {
		t.Errorf("decision %+v", d)
	}
	out, err = execute(t, planCmd(), "--limits-file", f, "--n", "6000", "--cap-sonnet", "100", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Lanes[0].Cap != 100 || d.Lanes[0].Binding != "RPM" {
		t.Errorf("--cap-sonnet over the file: lanes %+v", d.Lanes)
	}
	if _, err := execute(t, planCmd(), "--limits-file", f, "--preset", "scale", "--n", "1"); err == nil {
		t.Error("--limits-file with --preset accepted")
	}
	if _, err := execute(t, planCmd(), "--prefer", "latency"); err == nil {
		t.Error("no --n and no --input accepted")
	}
}

// TestGuidelinesCheck: the committed page is what the generator writes
// (the plan package's TestGuidelinesUpToDate compares the bytes too), and
// --check notices a stale one.
func TestGuidelinesCheck(t *testing.T) {
	if _, err := execute(t, guidelinesCmd(), "--check", "--out", filepath.Join("..", "..", "docs", "guidelines.md")); err != nil {
		t.Fatalf("docs/guidelines.md: %v", err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "guidelines.md")
	if _, err := execute(t, guidelinesCmd(), "--out", page); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, guidelinesCmd(), "--out", page, "--check"); err != nil {
		t.Fatalf("fresh page: %v", err)
	}
	if err := os.WriteFile(page, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, guidelinesCmd(), "--out", page, "--check"); err == nil {
		t.Error("--check accepted a stale page")
	}
}

// TestPlanInputCachedPrefix: with --input, `sluice plan` surveys the
// file's shared prefixes as `sluice run` would cache them and plans with
// the relief (a Sonnet 4.6 prefix of ~1,500 tokens gets a breakpoint but
// no relief: it is below the larger reading of the minimum, 2,048);
// --cache-prefix off plans the file as written.
func TestPlanInputCachedPrefix(t *testing.T) {
	dir := t.TempDir()
	write := func(name, model string, prefixChars int) string {
		path := filepath.Join(dir, name)
		wl := workload.Judge{N: 200, Seed: 4, Model: model, MaxTokens: 64, System: strings.Repeat("Grade it. ", prefixChars/10)}
		if err := wl.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	long := write("long.jsonl", "claude-sonnet-4-5", 12_000)
	plan := func(args ...string) decisionJSON {
		out, err := execute(t, planCmd(), append(args, "--json")...)
		if err != nil {
			t.Fatal(err)
		}
		var d decisionJSON
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	auto, off := plan("--input", long), plan("--input", long, "--cache-prefix", "off")
	if auto.Cost == nil || off.Cost == nil {
		t.Fatalf("a priced model's plan has no cost: %v %v", auto.Cost, off.Cost)
	}
	if auto.CachedShare != 1 || auto.CachedTokens < 2900 || auto.CachedTokens > 3100 || auto.CacheEffect == "" || *auto.Cost >= *off.Cost {
		t.Errorf("auto: share %v, %v tokens, effect %q, cost $%.4f (off $%.4f)", auto.CachedShare, auto.CachedTokens, auto.CacheEffect, *auto.Cost, *off.Cost)
	}
	if off.CachedShare != 0 || off.CacheEffect != "" {
		t.Errorf("off: %+v", off)
	}
	short := write("short.jsonl", "claude-sonnet-4-6", 6_000)
	if d := plan("--input", short); d.CachedShare != 0 {
		t.Errorf("a Sonnet 4.6 prefix below 2,048 tokens counted: share %v", d.CachedShare)
	}
	if _, err := execute(t, planCmd(), "--input", long, "--cache-prefix", "maybe"); err == nil {
		t.Error("--cache-prefix maybe accepted")
	}
}

// TestPlanInputVersion: sluice plan --input checks the lines against what
// --anthropic-version refuses, as sluice run does: under 2026-10-21 a line
// with temperature is invalid, named by line and field, and left out of
// the shape; under 2023-06-01 it is not.
func TestPlanInputVersion(t *testing.T) {
	in := filepath.Join(t.TempDir(), "requests.jsonl")
	var b strings.Builder
	for i := 1; i <= 20; i++ {
		temp := ""
		if i == 7 {
			temp = `"temperature":0.5,`
		}
		fmt.Fprintf(&b, `{"custom_id":"r%d","params":{"model":"claude-haiku-4-5","max_tokens":64,%s"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, temp, i)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version string
		n       int
		warned  bool
	}{{"2026-10-21", 19, true}, {"2023-06-01", 20, false}} {
		out, stderr, err := executeWith(t, nil, planCmd(), "--input", in, "--json", "--anthropic-version", tc.version)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.version, err, stderr)
		}
		var d decisionJSON
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(stderr, "line 7: params.temperature: API version 2026-10-21 refuses temperature")
		if d.N != tc.n || warned != tc.warned {
			t.Errorf("%s: planned %d requests, warned %v:\n%s", tc.version, d.N, warned, stderr)
		}
	}
}
