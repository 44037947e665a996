package rawjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// validCases are inputs at every edge of the grammar; each is checked
// against json.Valid, not against a verdict written here.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, "\t\r\n[]\n", `{} x`, `{}}`, `[]]`, `{`, `[`, `}`, `]`,
	`{"a":1}`, `{"a" : 1 , "b":[1, 2,3]}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`,
	`[1 2]`, `{"a":{"b":{"c":[[[]]]}}}`, `[{}]`, `[{]`, `{[}`, `[{"a":[}]`,
	`"`, `""`, `"abc`, `"a\"b"`, `"a\\"`, `"a\\\"`, `"\/\b\f\n\r\t"`, `"\a"`, `"\x41"`, `"\'"`, `"\u00e9"`, `"\u00E9"`,
	`"\u00g9"`, `"\u00e"`, `"\u"`, `"\`, `"\ud800"`, `"\ud800\udc00"`, "\"tab\there\"", "\"nl\nhere\"", "\"\x00\"", "\"\x1f\"", "\"\x7f\"",
	"\"\xff\xfe\"", "\"caf\xc3\xa9\"", `"123456789012345678901234567890"`, `"1234567\"9012345"`, `"12345678\\"`,
	`0`, `-0`, `-`, `01`, `-01`, `1.`, `.5`, `1.5`, `1e`, `1e+`, `1e-5`, `1E5`, `1.5e+10`, `-1.0e-0`, `1e5.5`, `0x10`, `+1`, `1 `, ` 1`, `1 2`,
	`12345678901234567890123456789`, `-`, `--1`, `1-`, `1.e5`, `[1.5,-0.0,2e3]`,
	`true`, `false`, `null`, `tru`, `nul`, `fals`, `truex`, `True`, `NULL`, `[true,false,null]`, `[true false]`,
	"\xef\xbb\xbf{}", "\u00a0{}", "{}\u00a0", "\v{}", "\f{}",
}

func TestValidIsJSONValid(t *testing.T) {
	for _, s := range validCases {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", s, got, want)
		}
	}
}

// TestValidDepth: encoding/json allows 10,000 nested containers and not
// one more.
func TestValidDepth(t *testing.T) {
	for _, n := range []int{1, 100, maxDepth - 1, maxDepth, maxDepth + 1} {
		for _, open := range []string{"[", `{"k":`} {
			close := map[string]string{"[": "]", `{"k":`: "}"}[open]
			s := []byte(strings.Repeat(open, n) + "1" + strings.Repeat(close, n))
			if got, want := Valid(s), json.Valid(s); got != want {
				t.Errorf("%d × %s: Valid %v, json.Valid %v", n, open, got, want)
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validCases {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"custom_id":"item-1","params":{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Question:\n\"why?\"\tanswer \u00e9"}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	line := []byte(`{"custom_id":"item-0000001","params":{"max_tokens":64,"messages":[{"content":"Question asked to the AI:\n` + strings.Repeat("consider detail evaluate user report ", 40) + `\n\nAI's response:\n` + strings.Repeat("data because evidence refute compare ", 40) + `","role":"user"}],"model":"claude-sonnet-4-5-20250929","system":"` + strings.Repeat("You are a judge. Score the answer. ", 10) + `"}}`)
	b.Run("rawjson", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			Valid(line)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			json.Valid(line)
		}
	})
}

func FuzzAppendCompact(f *testing.F) {
	for _, s := range validCases {
		f.Add([]byte(s))
	}
	f.Add([]byte("{ \"a\" : [ 1 , 2.5e3 , \"x y\\\" z\" ] ,\n\t\"b\" : { } }\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		if got := AppendCompact([]byte("prefix"), b); string(got) != "prefix"+want.String() {
			t.Fatalf("AppendCompact(%q) = %q, json.Compact %q", b, got[6:], want.Bytes())
		}
	})
}
