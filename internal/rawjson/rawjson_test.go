package rawjson

import "testing"

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
// allocation beyond the members slice.
func TestLookupAllocatesNothing(t *testing.T) {
	ms := Members([]byte(`{"id": "msg_1", "type": "message", "stop_reason": "end_turn", "usage": {"input_tokens": 3}}`))
	if n := testing.AllocsPerRun(100, func() { _ = Lookup(ms, "usage") }); n != 0 {
		t.Errorf("Lookup allocated %.0f times", n)
	}
	b := []byte(`{"id": "msg_1", "type": "message", "stop_reason": "end_turn", "usage": {"input_tokens": 3}}`)
	if n := testing.AllocsPerRun(100, func() { _ = Members(b) }); n != 1 {
		t.Errorf("Members of a four-member object allocated %.0f times, want 1", n)
	}
}
