package cache

import (
	"strings"
	"testing"
)

const base = `{"model":"claude-sonnet-4-5-20250929","max_tokens":256,"system":"Judge it.","messages":[{"role":"user","content":[{"type":"text","text":"Q and A"}]}]}`

func mustKey(t *testing.T, params string, extra ...string) Key {
	t.Helper()
	k, err := KeyOf([]byte(params), extra...)
	if err != nil {
		t.Fatalf("KeyOf(%s): %v", params, err)
	}
	return k
}

// TestKeySame: spellings of one request share a key.
func TestKeySame(t *testing.T) {
	want := mustKey(t, base)
	same := map[string]string{
		"key order":       `{"messages":[{"content":[{"text":"Q and A","type":"text"}],"role":"user"}],"system":"Judge it.","max_tokens":256,"model":"claude-sonnet-4-5-20250929"}`,
		"whitespace":      strings.ReplaceAll(strings.ReplaceAll(base, ",", ",\n  "), ":", ": "),
		"stream false":    strings.Replace(base, `{"model"`, `{"stream":false,"model"`, 1),
		"stream true":     strings.Replace(base, `{"model"`, `{"stream":true,"model"`, 1),
		"metadata":        strings.Replace(base, `{"model"`, `{"metadata":{"user_id":"u-42"},"model"`, 1),
		"number spelling": strings.Replace(base, `256`, `256.0`, 1),
		"exponent":        strings.Replace(base, `256`, `2.56e2`, 1),
		"unicode escape":  strings.Replace(base, `Judge it.`, `J\u0075dge it.`, 1),
		"repeated key":    strings.Replace(base, `{"model"`, `{"max_tokens":9,"model"`, 1),
	}
	for name, p := range same {
		if got := mustKey(t, p); got != want {
			t.Errorf("%s: key %s, want %s", name, got, want)
		}
	}
	a := mustKey(t, strings.Replace(base, `"max_tokens"`, `"temperature":0.7,"max_tokens"`, 1))
	b := mustKey(t, strings.Replace(base, `"max_tokens"`, `"temperature":0.70,"max_tokens"`, 1))
	if a != b {
		t.Error("temperature 0.7 and 0.70 differ")
	}
	z1 := mustKey(t, strings.Replace(base, `"max_tokens"`, `"temperature":0,"max_tokens"`, 1))
	z2 := mustKey(t, strings.Replace(base, `"max_tokens"`, `"temperature":-0.0,"max_tokens"`, 1))
	if z1 != z2 {
		t.Error("temperature 0 and -0.0 differ")
	}
}

// TestKeyDiffers: every field that changes the answer changes the key.
func TestKeyDiffers(t *testing.T) {
	want := mustKey(t, base)
	with := func(field string) string { return strings.Replace(base, `{"model"`, `{`+field+`,"model"`, 1) }
	differ := map[string]string{
		"model":            strings.Replace(base, "claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 1),
		"system":           strings.Replace(base, "Judge it.", "Judge it strictly.", 1),
		"message text":     strings.Replace(base, "Q and A", "Q and B", 1),
		"role":             strings.Replace(base, `"user"`, `"assistant"`, 1),
		"max_tokens":       strings.Replace(base, "256", "257", 1),
		"temperature":      with(`"temperature":0.7`),
		"temperature zero": with(`"temperature":0`),
		"top_p":            with(`"top_p":0.9`),
		"top_k":            with(`"top_k":5`),
		"stop_sequences":   with(`"stop_sequences":["END"]`),
		"tools":            with(`"tools":[{"name":"t","input_schema":{"type":"object"}}]`),
		"thinking":         with(`"thinking":{"type":"enabled","budget_tokens":1024}`),
		"service_tier":     with(`"service_tier":"standard_only"`),
		"nested metadata":  strings.Replace(base, `"type":"text"`, `"type":"text","metadata":1`, 1),
	}
	seen := map[Key]string{want: "base"}
	for name, p := range differ {
		k := mustKey(t, p)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s: same key as %s", name, prev)
		}
		seen[k] = name
	}
}

// TestKeyExtra: the rubric fingerprint separates two rubrics over the same
// request; the parts are length-prefixed, so they cannot run together.
func TestKeyExtra(t *testing.T) {
	plain := mustKey(t, base)
	r1, r2 := mustKey(t, base, "rubric-1"), mustKey(t, base, "rubric-2")
	if r1 == r2 || r1 == plain || r2 == plain {
		t.Fatal("the extra fingerprint does not separate keys")
	}
	if r1 != mustKey(t, base, "rubric-1") {
		t.Fatal("KeyOf is not deterministic")
	}
	if mustKey(t, base, "ab", "c") == mustKey(t, base, "a", "bc") {
		t.Fatal("extra parts run together")
	}
	if mustKey(t, base, "") == plain {
		t.Fatal("an empty extra part equals none")
	}
	if s := plain.String(); len(s) != 64 {
		t.Fatalf("String() = %q", s)
	}
}

func TestKeyRefuses(t *testing.T) {
	for _, p := range []string{``, `not json`, `[1,2]`, `"s"`, `null`, base + `{}`, `{"a":1e999}`} {
		if k, err := KeyOf([]byte(p)); err == nil {
			t.Errorf("KeyOf(%s) = %s, want an error", p, k)
		}
	}
}

func TestCanonical(t *testing.T) {
	got, err := Canonical([]byte(`{"z": [3, 1.50, {"b": true, "a": null}], "stream": true, "a": "<é>", "metadata": {}}`))
	want := `{"a":"\u003cé\u003e","z":[3,1.5,{"a":null,"b":true}]}`
	if err != nil || string(got) != want {
		t.Fatalf("Canonical = %s, %v want %s", got, err, want)
	}
}
