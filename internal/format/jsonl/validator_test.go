package jsonl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

func TestValidatorDuplicates(t *testing.T) {
	ok := func(id string) string { return req(id, params(hi, "")) }
	bad := func(id string) string { return req(id, `{"model":"m"}`) } // fails another rule
	tests := []struct {
		name  string
		lines []string
		want  []string // per line: "" valid, else LineError.Error()
	}{
		{"distinct ids", []string{ok("a"), ok("b"), ok("c")}, []string{"", "", ""}},
		{"second use is a duplicate", []string{ok("a"), ok("b"), ok("a")},
			[]string{"", "", `line 3: duplicate custom_id "a", first on line 1`}},
		{"every later use names the first line", []string{ok("a"), ok("a"), ok("a")},
			[]string{"", `line 2: duplicate custom_id "a", first on line 1`, `line 3: duplicate custom_id "a", first on line 1`}},
		{"an invalid line claims its id", []string{bad("a"), ok("a")},
			[]string{"line 1: params.max_tokens is required", `line 2: duplicate custom_id "a", first on line 1`}},
		{"a reused id is a duplicate even on an invalid line", []string{ok("a"), bad("a")},
			[]string{"", `line 2: duplicate custom_id "a", first on line 1; also params.max_tokens is required`}},
		{"ids are case-sensitive", []string{ok("a"), ok("A")}, []string{"", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v Validator
			for i, line := range tt.lines {
				_, err := v.Check(i+1, []byte(line))
				got := ""
				if err != nil {
					got = err.Error()
				}
				if got != tt.want[i] {
					t.Errorf("Check(%d) error %q want %q", i+1, got, tt.want[i])
				}
			}
		})
	}
}

func TestValidatorSummary(t *testing.T) {
	var v Validator
	lines := []string{
		req("a", `{"model":"m1","max_tokens":100,"messages":[{"role":"user","content":"abcd"}]}`),     // est 1+4+7 = 12
		req("b", `{"model":"m2","max_tokens":300,"messages":[{"role":"user","content":"abcdefgh"}]}`), // est 2+4+7 = 13
		req("c", `{"model":"m1","max_tokens":200,"messages":[{"role":"user","content":""}]}`),         // est 0+4+7 = 11
		req("a", `{"model":"m1","max_tokens":200,"messages":[{"role":"user","content":""}]}`),         // duplicate
		`not json`,
	}
	for i, l := range lines {
		v.Check(i+1, []byte(l))
	}
	s := v.Summary()
	if s.Lines != 5 || s.Valid != 3 || s.Invalid != 2 {
		t.Errorf("Lines, Valid, Invalid = %d, %d, %d want 5, 3, 2", s.Lines, s.Valid, s.Invalid)
	}
	if len(s.Models) != 2 || s.Models["m1"] != 2 || s.Models["m2"] != 1 {
		t.Errorf("Models = %v want map[m1:2 m2:1]", s.Models)
	}
	if s.EstInputTokens != 36 || s.MeanEstInputTokens() != 12 {
		t.Errorf("EstInputTokens = %d, mean %v want 36, 12", s.EstInputTokens, s.MeanEstInputTokens())
	}
	if s.MaxTokens != 600 || s.MeanMaxTokens() != 200 {
		t.Errorf("MaxTokens = %d, mean %v want 600, 200", s.MaxTokens, s.MeanMaxTokens())
	}
	s.Models["m1"] = 99
	if v.Summary().Models["m1"] != 2 {
		t.Error("Summary().Models aliases the Validator's map")
	}
	var zero Validator
	if m := zero.Summary(); m.MeanEstInputTokens() != 0 || m.MeanMaxTokens() != 0 {
		t.Errorf("empty Summary means = %v, %v want 0, 0", m.MeanEstInputTokens(), m.MeanMaxTokens())
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestScanFile(t *testing.T) {
	ok := func(id string) string { return req(id, params(hi, "")) }
	content := strings.Join([]string{
		ok("a"),            // 1
		"",                 // 2 blank
		`{"custom_id":"b"`, // 3 invalid JSON
		ok("c"),            // 4
		ok("a"),            // 5 duplicate
		req("d", "{}"),     // 6 no model
		ok("e") + "\r",     // 7 CRLF
		`[]`,               // 8 not an object
	}, "\n")
	path := writeFile(t, content)
	tests := []struct {
		name      string
		maxErrors int
		wantLines []int
	}{
		{"keep two", 2, []int{3, 5}},
		{"keep all", -1, []int{3, 5, 6, 8}},
		{"keep more than there are", 10, []int{3, 5, 6, 8}},
		{"keep none", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, errs, err := ScanFile(path, tt.maxErrors)
			if err != nil {
				t.Fatal(err)
			}
			if s.Lines != 7 || s.Valid != 3 || s.Invalid != 4 {
				t.Errorf("Lines, Valid, Invalid = %d, %d, %d want 7, 3, 4", s.Lines, s.Valid, s.Invalid)
			}
			var got []int
			for _, e := range errs {
				got = append(got, e.Line)
			}
			if len(got) != len(tt.wantLines) {
				t.Fatalf("error lines = %v want %v (%v)", got, tt.wantLines, errs)
			}
			for i := range got {
				if got[i] != tt.wantLines[i] {
					t.Fatalf("error lines = %v want %v (%v)", got, tt.wantLines, errs)
				}
			}
		})
	}
	_, errs, _ := ScanFile(path, -1)
	if want := `line 5: duplicate custom_id "a", first on line 1`; errs[1].Error() != want || errs[1].CustomID != "a" {
		t.Errorf("errs[1] = %q (id %q) want %q (id \"a\")", errs[1].Error(), errs[1].CustomID, want)
	}
}

func TestScanFileMissing(t *testing.T) {
	_, _, err := ScanFile(filepath.Join(t.TempDir(), "nope.jsonl"), 10)
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "jsonl: ") {
		t.Errorf("ScanFile(missing) error %v want a jsonl: error wrapping os.ErrNotExist", err)
	}
}

func TestSummaryMainModel(t *testing.T) {
	for _, tt := range []struct {
		models map[string]int
		want   string
	}{
		{nil, "claude-sonnet-4-5"},
		{map[string]int{"a": 1, "b": 3}, "b"},
		{map[string]int{"b": 2, "a": 2}, "a"},
	} {
		if got := (Summary{Models: tt.models}).MainModel(); got != tt.want {
			t.Errorf("MainModel(%v) = %q want %q", tt.models, got, tt.want)
		}
	}
}

// TestSummaryLongLines: the lines whose estimated prompt is over their
// model's long-context threshold are counted apart, with their mean, so
// a plan prices them in their band; a model without the rule has none.
func TestSummaryLongLines(t *testing.T) {
	m, ok := api.LookupModel("claude-haiku-5-5")
	if !ok || m.LongContext == nil {
		t.Fatal("the test needs claude-haiku-5-5's long-context rule")
	}
	long := strings.Repeat("a", int(4*m.LongContext.Threshold+400))
	var v Validator
	for i, tc := range []struct{ model, text string }{
		{"claude-haiku-5-5", "short"}, {"claude-haiku-5-5", long}, {"claude-haiku-5-5", "short"}, {"claude-sonnet-4-5", long},
	} {
		line := fmt.Sprintf(`{"custom_id":"r%d","params":{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":%q}]}}`, i, tc.model, tc.text)
		if _, err := v.Check(i+1, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	s := v.Summary()
	share, mean := s.LongShare()
	if s.LongLines != 1 || share != 0.25 || mean <= float64(m.LongContext.Threshold) {
		t.Errorf("long lines %d, share %.2f, mean %.0f: want the one Haiku 5.5 line over %d", s.LongLines, share, mean, m.LongContext.Threshold)
	}
}
