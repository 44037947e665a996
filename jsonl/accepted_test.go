package jsonl

import (
	"fmt"
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
		if _, got := a.recall(tt.n, tt.line); got != tt.want {
			t.Errorf("%s: recall(%d) found %v, want %v", tt.name, tt.n, got, tt.want)
		}
	}
	var none *Accepted
	if _, ok := none.recall(1, one); ok {
		t.Error("a nil Accepted has a line")
	}
}

// TestCheckAgainstIsCheck: a second pass that trusts the first's verdict
// on unchanged lines returns what Check returns, and a line that changed
// since is checked in full (here: it is no longer JSON).
func TestCheckAgainstIsCheck(t *testing.T) {
	a := twoPass(t, []string{
		req("a", params(hi, "")),
		req("b", `{"model":"m"}`), // invalid: not accepted
		req("c", params(hi, "")),
	})
	changed := `{"custom_id":"a","params":{` // line 1, torn since the survey
	if _, err := new(Validator).CheckAgainst(1, []byte(changed), a); err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Errorf("a changed line 1: err %v, want invalid JSON", err)
	}
}

// BenchmarkCheckAgainst is the feed's check of a judge-sized line with and
// without the survey's verdict (docs/overhead.md): a pass over 4,096 lines
// that differ only in custom_id, one Validator a pass.
func BenchmarkCheckAgainst(b *testing.B) {
	text := strings.Repeat("judge the answer against the reference ", 300)
	const n = 4096
	lines := make([][]byte, n)
	var a Accepted
	for i := range lines {
		lines[i] = []byte(req(fmt.Sprint("a", i), params(`[{"role":"user","content":"`+text+`"}]`, "")))
		accept(b, &a, i+1, lines[i])
	}
	for _, tc := range []struct {
		name string
		acc  *Accepted
	}{{"full", nil}, {"accepted", &a}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(lines[0])))
			var v *Validator
			i := 0
			for b.Loop() {
				if i%n == 0 {
					v = new(Validator)
				}
				if _, err := v.CheckAgainst(i%n+1, lines[i%n], tc.acc); err != nil {
					b.Fatal(err)
				}
				i++
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
	a := twoPass(t, lines)
	for i, l := range lines {
		if _, ok := a.recall(i+1, []byte(l)); ok != recallable[i] {
			t.Errorf("line %d: facts kept %v, want %v", i+1, ok, recallable[i])
		}
	}
	changed := []byte(req("a", `{"model":"claude-sonnet-4-5","max_tokens":7,"messages":[{"role":"user","content":"a longer question than before"}]}`))
	want, _ := ValidateLine(changed)
	got, err := new(Validator).CheckAgainst(1, changed, a)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("line 1 changed since: CheckAgainst = %+v, %v; want %+v", got, err, want)
	}
	var v Validator
	v.CheckAgainst(1, []byte(lines[0]), a)
	if dup, err := v.CheckAgainst(1, []byte(lines[0]), a); err == nil || !strings.Contains(err.Error(), "duplicate custom_id") {
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
		if _, got := a.recall(tc.n, line); got != tc.want {
			t.Errorf("recall(%d) found %v, want %v", tc.n, got, tc.want)
		}
	}
	if info, ok := a.recall(3*pageLines+5, line); !ok || info.Model != "claude-haiku-4-5" || info.MaxTokens != 64 {
		t.Errorf("recall of a line on the fourth page: %+v, %v", info, ok)
	}
}

// twoPass checks lines as the survey and the feed do: the second pass,
// through CheckAgainst, returns what Check returns, line by line and in
// the Summary. It returns what the first pass kept.
func twoPass(t *testing.T, lines []string) *Accepted {
	t.Helper()
	var first Validator
	var a Accepted
	for i, l := range lines {
		if info, err := first.CheckShared(i+1, []byte(l)); err == nil {
			a.Add(i+1, []byte(l), info)
		}
	}
	var full, again Validator
	for i, l := range lines {
		want, wantErr := full.Check(i+1, []byte(l))
		got, err := again.CheckAgainst(i+1, []byte(l), &a)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("line %d %q: CheckAgainst = %+v, %v; Check = %+v, %v", i+1, l, got, err, want, wantErr)
		}
	}
	if g, w := again.Summary(), full.Summary(); !reflect.DeepEqual(g, w) {
		t.Fatalf("Summary %+v, want %+v", g, w)
	}
	return &a
}

// TestCheckAgainstManyModels: past 65,535 models a line's facts are not
// kept (the index would wrap onto another model), and a model seen again
// keeps its index.
func TestCheckAgainstManyModels(t *testing.T) {
	var lines []string
	for i := range 70000 {
		lines = append(lines, req(fmt.Sprint("id", i), fmt.Sprintf(`{"model":"m%d","max_tokens":%d,"messages":%s}`, i, i+1, hi)))
	}
	// a model seen again after the table is full keeps its index
	lines = append(lines, req("again", `{"model":"m5","max_tokens":3,"messages":`+hi+`}`))
	lines = append(lines, req("late", `{"model":"m69999","max_tokens":3,"messages":`+hi+`}`))
	twoPass(t, lines)
}

// TestCheckAgainstOddLines: lines at the edges of the rules (a byte order
// mark, a CR, escapes, repeated keys, max_tokens at 2³²−1 and 2³², numbers
// the rules refuse, nulls, lone surrogates, data after the object).
func TestCheckAgainstOddLines(t *testing.T) {
	lines := []string{
		"\xEF\xBB\xBF" + req("bom", params(hi, "")),
		req("a", params(hi, "")) + "\r",
		`{"custom_id":"dup","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}}`,
		`{"params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]},"custom_id":"dup"}`,
		`{"custom_id":"\u0064up","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok1","params":{"model":"m","max_tokens":1,"max_tokens":99,"model":"\u006e","messages":[{"role":"user","content":"x"}],"messages":[{"role":"user","content":"a much longer text here"}]}}`,
		`{"custom_id":"ok2","params":{"model":"m","max_tokens":4294967295,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok3","params":{"model":"m","max_tokens":4294967296,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok4","params":{"model":"m","max_tokens":0001,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok5","params":{"model":"m","max_tokens":+1,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok6","params":{"model":"m","max_tokens":-0,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok7","params":{"model":"m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok8","params":{"model":"m","max_tokens":1,"stream":false,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok9","params":{"model":"m","max_tokens":1,"stream":null,"system":null,"messages":[{"role":"user","content":"x"}]}}`,
		`  {  "custom_id" : "ok10" , "params" : { "model" : "m" , "max_tokens" : 1 , "messages" : [ { "role" : "user" , "content" : "x" } ] }  }  `,
		`{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}}`,
		`{"custom_id":"ok11","params":{"model":"\ud800","max_tokens":1,"messages":[{"role":"user","content":"\udc00\ud83d\ude00"}]}}`,
		`{"custom_id":"ok12","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}, "params":{}}`,
		`{"custom_id":"ok13","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}}{"x":1}`,
	}
	twoPass(t, lines)
}

// TestCheckAgainstCopiesParams: the Info of a recalled line does not alias
// the line, which the reader reuses.
func TestCheckAgainstCopiesParams(t *testing.T) {
	line := []byte(req("a", params(hi, "")))
	var a Accepted
	accept(t, &a, 1, line)
	info, err := new(Validator).CheckAgainst(1, line, &a)
	if err != nil {
		t.Fatal(err)
	}
	want := string(info.Params)
	for i := range line {
		line[i] = 'x'
	}
	if string(info.Params) != want {
		t.Errorf("Params changed with the line: %q", info.Params)
	}
}
