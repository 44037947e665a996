package rawjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestLookup: keys compare as JSON strings — an escaped key is the name it
// decodes to — the last duplicate wins, and null is absent.
func TestLookup(t *testing.T) {
	ms := Members([]byte(`{"model": "a", "\u006dodel": "b", "max_tokens": 5, "stop": null, "x\"y": 1}`))
	for _, tt := range []struct{ key, want string }{
		{"model", `"b"`},
		{"max_tokens", "5"},
		{"stop", ""},
		{`x"y`, "1"},
		{"mode", ""},
	} {
		if got := string(Lookup(ms, tt.key)); got != tt.want {
			t.Errorf("Lookup(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	if len(ms) != 5 || ms[1].Key() != "model" || ms[4].Key() != `x"y` {
		t.Errorf("members %d, keys %q %q", len(ms), ms[1].Key(), ms[4].Key())
	}
}

// TestLookupAllocatesNothing: finding a field of an answer costs no
// allocation beyond the members slice, and none when the caller holds the
// slice's array.
func TestLookupAllocatesNothing(t *testing.T) {
	ms := Members([]byte(`{"id": "msg_1", "type": "message", "stop_reason": "end_turn", "usage": {"input_tokens": 3}}`))
	if n := testing.AllocsPerRun(100, func() { _ = Lookup(ms, "usage") }); n != 0 {
		t.Errorf("Lookup allocated %.0f times", n)
	}
	b := []byte(`{"id": "msg_1", "type": "message", "stop_reason": "end_turn", "usage": {"input_tokens": 3}}`)
	var sink []Member
	if n := testing.AllocsPerRun(100, func() { sink = Members(b) }); n != 1 {
		t.Errorf("Members of a four-member object allocated %.0f times, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		var buf [8]Member
		if len(AppendMembers(buf[:0], b)) != 4 {
			t.Fatal("not four members")
		}
	}); n != 0 {
		t.Errorf("AppendMembers into an array of the caller's allocated %.0f times", n)
	}
	_ = sink
}

// stringLenSeeds are string literal contents whose decoded length is easy
// to get wrong: every escape, surrogate pairs, lone and reversed
// surrogates, a high surrogate before a non-surrogate escape, invalid
// UTF-8 next to an escape.
var stringLenSeeds = []string{
	``, `plain`, `a\nb`, `\"\\\/\b\f\n\r\t`, `\u00e9`, `é\n`, `\u20ac`,
	`\ud83d\ude00`, `\ud83d`, `\ude00`, `\ude00\ud83d`, `\ud83d\u0041`, `\ud83dx`,
	`\ud83d\ud83d\ude00`, `\u0000`, `\uFFFF`, `\uABCD\uabcd`, "\xff\\n", "\xed\xa0\x80\\t", "ok\xc3",
}

// TestStringLen: StringLen is the length of the string String decodes
// (json.Unmarshal's), escapes or not.
func TestStringLen(t *testing.T) {
	for _, s := range stringLenSeeds {
		b := []byte(`"` + s + `"`)
		if !json.Valid(b) {
			t.Fatalf("seed %q is not a valid JSON string", s)
		}
		if got, want := StringLen(b), len(String(b)); got != want {
			t.Errorf("StringLen(%q) = %d, want %d", b, got, want)
		}
	}
}

func FuzzStringLen(f *testing.F) {
	for _, s := range stringLenSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(`"` + s + `"`)
		if !json.Valid(b) {
			return
		}
		if got, want := StringLen(b), len(String(b)); got != want {
			t.Errorf("StringLen(%q) = %d, want %d", b, got, want)
		}
	})
}

// FuzzWalk: on any valid JSON object, Members finds exactly the keys and
// values encoding/json decodes, in order — so skipValue and skipString end
// every value where the decoder does, escaped quotes and backslash runs
// included.
func FuzzWalk(f *testing.F) {
	for _, s := range []string{
		`{"a":"x\"y","b":[1,"\\",{"c":"\\\""}],"d":"\\\\"}`,
		`{ "k" : "\\\\\"" , "n" : null , "t" : true , "f" : -1.5e3 }`,
		`{"":{"":[[],{}]},"q":"\u0022"}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		if !json.Valid(b) || len(b) == 0 || b[0] != '{' {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.Token() // {
		var keys []string
		var vals []json.RawMessage
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			keys, vals = append(keys, k.(string)), append(vals, v)
		}
		got := Members(b)
		if len(got) != len(keys) {
			t.Fatalf("%s: %d members, encoding/json has %d", b, len(got), len(keys))
		}
		for i, m := range got {
			var k string
			if err := json.Unmarshal(m.raw, &k); err != nil || k != keys[i] || !bytes.Equal(m.Val, vals[i]) {
				t.Fatalf("%s: member %d is %s: %s, encoding/json has %q: %s", b, i, m.raw, m.Val, keys[i], vals[i])
			}
		}
	})
}
