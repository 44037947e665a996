package judge

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// verdicts are six verdicts whose summary is worked out by hand below.
func verdicts() []Verdict {
	return []Verdict{
		{ID: "v1", Class: OK, Scores: map[string]any{"aligned": 80.0, "coherent": 90.0}, Groups: []string{"a"}},
		{ID: "v2", Class: OK, Scores: map[string]any{"aligned": 60.0, "coherent": 70.0}, Groups: []string{"a", "b", "a"}},
		{ID: "v3", Class: OK, Scores: map[string]any{"aligned": "REFUSAL", "coherent": 40.0}, Groups: []string{"b"}},
		{ID: "v4", Class: ParseError, Error: "judge: no JSON object in the reply", Groups: []string{"a"}},
		{ID: "v5", Class: Transport, Error: "overloaded_error: Overloaded"},
		{ID: "v6", Class: OK, Sentinel: "REFUSAL", Groups: []string{"b"}},
	}
}

func classes(counts map[Class]int) map[Class]int {
	out := map[Class]int{}
	for _, c := range Classes {
		out[c] = counts[c]
	}
	return out
}

// TestSummary checks the means and counts against hand arithmetic:
//
//	(all) n=6: ok 4, parse_error 1, transport 1;
//	      aligned   (80+60)/2 = 70, n 2, REFUSAL 1;
//	      coherent  (90+70+40)/3 = 66.67, n 3; reply sentinel REFUSAL 1
//	a     n=3 (v1 v2 v4; v2 once although labelled twice): ok 2, parse_error 1;
//	      aligned (80+60)/2 = 70; coherent (90+70)/2 = 80
//	b     n=3 (v2 v3 v6): ok 3; aligned 60, n 1, REFUSAL 1;
//	      coherent (70+40)/2 = 55; reply sentinel REFUSAL 1
func TestSummary(t *testing.T) {
	r := sentinelRubric()
	want := []GroupSummary{
		{Group: AllGroup, N: 6, Classes: classes(map[Class]int{OK: 4, ParseError: 1, Transport: 1}),
			Scores: map[string]ScoreSummary{
				"aligned":  {N: 2, Mean: 70, Sentinels: map[string]int{"REFUSAL": 1}},
				"coherent": {N: 3, Mean: 200.0 / 3},
			}, Sentinels: map[string]int{"REFUSAL": 1}},
		{Group: "a", N: 3, Classes: classes(map[Class]int{OK: 2, ParseError: 1}),
			Scores: map[string]ScoreSummary{"aligned": {N: 2, Mean: 70}, "coherent": {N: 2, Mean: 80}}},
		{Group: "b", N: 3, Classes: classes(map[Class]int{OK: 3}),
			Scores: map[string]ScoreSummary{
				"aligned":  {N: 1, Mean: 60, Sentinels: map[string]int{"REFUSAL": 1}},
				"coherent": {N: 2, Mean: 55},
			}, Sentinels: map[string]int{"REFUSAL": 1}},
	}
	s := Summarize(r, verdicts())
	if !reflect.DeepEqual(s.Groups, want) {
		t.Fatalf("Summarize =\n%+v\nwant\n%+v", s.Groups, want)
	}
	if len(s.Fields) != 2 || s.Fields[0].Name != "aligned" || s.Fields[1].Name != "coherent" {
		t.Fatalf("fields %+v: want the numeric fields only", s.Fields)
	}

	// The same verdicts read back from a verdicts file summarise the same.
	var back []Verdict
	for _, v := range verdicts() {
		b, _ := json.Marshal(v)
		var w Verdict
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		back = append(back, w)
	}
	if got := Summarize(r, back); !reflect.DeepEqual(got, s) {
		t.Fatalf("from JSON:\n%+v\nwant\n%+v", got.Groups, s.Groups)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("summary is not JSON-able: %v", err)
	}
}

func TestSummaryEmpty(t *testing.T) {
	s := NewTally(DefaultRubric()).Summary()
	if len(s.Groups) != 1 || s.Groups[0].Group != AllGroup || s.Groups[0].N != 0 || s.Groups[0].Scores["aligned"].Mean != 0 {
		t.Fatalf("empty summary = %+v", s)
	}
	if b, err := json.Marshal(s); err != nil || math.IsNaN(s.Groups[0].Scores["aligned"].Mean) {
		t.Fatalf("empty summary JSON %s, %v", b, err)
	}
}

func TestSummaryText(t *testing.T) {
	var b bytes.Buffer
	if err := Summarize(sentinelRubric(), verdicts()).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"group", "n", "ok", "parse_error", "truncated", "refused", "invalid_request", "transport", "aligned", "coherent", "sentinels"},
		{"(all)", "6", "4", "1", "0", "0", "0", "1", "70.00 (2) REFUSAL=1", "66.67 (3)", "REFUSAL=1"},
		{"a", "3", "2", "1", "0", "0", "0", "0", "70.00 (2)", "80.00 (2)"},
		{"b", "3", "3", "0", "0", "0", "0", "0", "60.00 (1) REFUSAL=1", "55.00 (2)", "REFUSAL=1"},
	} {
		cells := strings.Fields(lines[i])
		if got := strings.Join(cells, " "); got != strings.Join(want, " ") {
			t.Errorf("line %d = %q want %q", i, got, strings.Join(want, " "))
		}
	}
}

func TestSummaryCSV(t *testing.T) {
	var b bytes.Buffer
	if err := Summarize(sentinelRubric(), verdicts()).WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	want := `group,n,ok,parse_error,truncated,refused,invalid_request,transport,aligned_n,aligned_mean,aligned_REFUSAL,coherent_n,coherent_mean,sentinel_REFUSAL
(all),6,4,1,0,0,0,1,2,70,1,3,66.66666666666667,1
a,3,2,1,0,0,0,0,2,70,0,2,80,0
b,3,3,0,0,0,0,0,1,60,1,2,55,1
`
	if b.String() != want {
		t.Fatalf("CSV =\n%s\nwant\n%s", b.String(), want)
	}
}
