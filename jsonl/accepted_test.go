package jsonl

import (
	"reflect"
	"strings"
	"testing"
)

func TestAccepted(t *testing.T) {
	var a Accepted
	one, two := []byte(req("a", params(hi, ""))), []byte(req("b", params(hi, "")))
	a.Add(1, one)
	a.Add(3, two) // line 2 was blank or invalid: never added
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
		if _, err := first.CheckShared(i+1, []byte(l)); err == nil {
			a.Add(i+1, []byte(l))
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
	a.Add(1, line)
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
