package rawjson

import (
	"bytes"
	"encoding/json"
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
