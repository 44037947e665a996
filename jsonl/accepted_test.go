package jsonl

import (
	"reflect"
	"strings"
	"testing"
)

func TestAccepted(t *testing.T) {
	var a Accepted
	one, two := []byte(req("a", params(hi, ""))), []byte(req("b", params(hi, "")))
	accept(t, &a, 1, one)
	accept(t, &a, 3, two) // line 2 was blank or invalid: never added
	tests := []struct {
		name string
		n    int
		line []byte
		want bool
	}{
		{"the line as accepted", 1, one, true},
		{"another accepted line", 3, two, true},
		{"an accepted line's bytes on another line number", 3, one, false},
		{"a line never added", 2, one, false},
		{"past the end", 4, two, false},
		{"line 0", 0, one, false},
		{"one byte changed", 1, []byte(strings.Replace(string(one), `"a"`, `"c"`, 1)), false},
		{"a prefix of the line", 1, one[:len(one)-1], false},
	}
	for _, tt := range tests {
		if got := a.Has(tt.n, tt.line); got != tt.want {
			t.Errorf("%s: Has(%d) = %v, want %v", tt.name, tt.n, got, tt.want)
		}
	}
	var none *Accepted
	if none.Has(1, one) {
		t.Error("a nil Accepted has a line")
	}
}

// TestCheckAgainstIsCheck: a second pass that trusts the first's verdict
// on unchanged lines returns what Check returns, and a line that changed
// since is checked in full (here: it is no longer JSON).
func TestCheckAgainstIsCheck(t *testing.T) {
	lines := []string{
		req("a", params(hi, "")),
		req("b", `{"model":"m"}`), // invalid: not accepted
		req("c", params(hi, "")),
	}
	var first Validator
	var a Accepted
	for i, l := range lines {
		if info, err := first.CheckShared(i+1, []byte(l)); err == nil {
			a.Add(i+1, []byte(l), info)
		}
	}
	var full, again Validator
	for i, l := range lines {
		wantInfo, wantErr := full.Check(i+1, []byte(l))
		info, err := again.CheckAgainst(i+1, []byte(l), &a)
		if !reflect.DeepEqual(info, wantInfo) || !reflect.DeepEqual(err, wantErr) {
			t.Errorf("line %d: CheckAgainst = %+v, %v; Check = %+v, %v", i+1, info, err, wantInfo, wantErr)
		}
	}
	changed := `{"custom_id":"a","params":{` // line 1, torn since the survey
	if _, err := new(Validator).CheckAgainst(1, []byte(changed), &a); err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Errorf("a changed line 1: err %v, want invalid JSON", err)
	}
}

// BenchmarkCheckAgainst is the feed's check of a judge-sized line with and
// without the survey's verdict (docs/overhead.md).
func BenchmarkCheckAgainst(b *testing.B) {
	text := strings.Repeat("judge the answer against the reference ", 300)
	line := []byte(req("a", params(`[{"role":"user","content":"`+text+`"}]`, "")))
	var a Accepted
	accept(b, &a, 1, line)
	for _, tc := range []struct {
		name string
		acc  *Accepted
	}{{"full", nil}, {"accepted", &a}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				var v Validator
				if _, err := v.CheckAgainst(1, line, tc.acc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// accept validates line and records it in a as line n.
func accept(t testing.TB, a *Accepted, n int, line []byte) {
	t.Helper()
	info, err := new(Validator).CheckShared(n, line)
	if err != nil {
		t.Fatalf("line %d: %v", n, err)
	}
	a.Add(n, line, info)
}

// TestCheckAgainstRecalls: an unchanged line's facts come from the first
// pass (the escaped custom_id, params before it, whitespace around it and
// several models included), and are exactly what checking it again finds;
// a line whose facts do not fit is checked again; a line changed since but
// still valid gets its new facts, not the remembered ones.
func TestCheckAgainstRecalls(t *testing.T) {
	lines := []string{
		req("a", params(hi, "")),
		` {"params":` + params(hi, `,"system":[{"type":"text","text":"be brief"}]`) + ` , "custom_id":"\u0062"}` + "\t",
		req("c", `{"model":"claude-opus-4-1","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"h\u00e9llo"}]}]}`),
		req("d", `{"model":"m","max_tokens":5000000000,"messages":[{"role":"user","content":"x"}]}`),
	}
	recallable := []bool{true, true, true, false}
	var a Accepted
	for i, l := range lines {
		accept(t, &a, i+1, []byte(l))
	}
	var full, again Validator
	for i, l := range lines {
		want, wantErr := full.Check(i+1, []byte(l))
		if _, ok := a.recall(i + 1); ok != recallable[i] {
			t.Errorf("line %d: facts kept %v, want %v", i+1, ok, recallable[i])
		}
		got, err := again.CheckAgainst(i+1, []byte(l), &a)
		if wantErr != nil || !reflect.DeepEqual(got, want) || err != nil {
			t.Errorf("line %d: CheckAgainst = %+v, %v; Check = %+v, %v", i+1, got, err, want, wantErr)
		}
	}
	if got, want := again.Summary(), full.Summary(); !reflect.DeepEqual(got, want) {
		t.Errorf("Summary %+v, want %+v", got, want)
	}
	changed := []byte(req("a", `{"model":"claude-sonnet-4-5","max_tokens":7,"messages":[{"role":"user","content":"a longer question than before"}]}`))
	want, _ := ValidateLine(changed)
	got, err := new(Validator).CheckAgainst(1, changed, &a)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("line 1 changed since: CheckAgainst = %+v, %v; want %+v", got, err, want)
	}
	if dup, err := again.CheckAgainst(1, []byte(lines[0]), &a); err == nil || !strings.Contains(err.Error(), "duplicate custom_id") {
		t.Errorf("an unchanged line seen twice by one Validator: %+v, %v; want a duplicate", dup, err)
	}
}

// TestAcceptedPages: lines on several pages, and pages with no line
// added, are told apart.
func TestAcceptedPages(t *testing.T) {
	var a Accepted
	line := []byte(req("a", params(hi, "")))
	for _, n := range []int{1, pageLines, pageLines + 1, 3*pageLines + 5} {
		accept(t, &a, n, line)
	}
	for _, tc := range []struct {
		n    int
		want bool
	}{{1, true}, {2, false}, {pageLines, true}, {pageLines + 1, true}, {pageLines + 2, false},
		{2*pageLines + 1, false}, {3*pageLines + 5, true}, {3*pageLines + 6, false}, {4*pageLines + 1, false}} {
		if got := a.Has(tc.n, line); got != tc.want {
			t.Errorf("Has(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if info, ok := a.recall(3*pageLines + 5); !ok || info.Model != "claude-haiku-4-5" || info.MaxTokens != 64 {
		t.Errorf("recall of a line on the fourth page: %+v, %v", info, ok)
	}
}
