package jsonl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

func TestParamsHash(t *testing.T) {
	compact := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi there"}]}`
	sum := sha256.Sum256([]byte(compact))
	want := hex.EncodeToString(sum[:16])

	tests := []struct {
		name   string
		params string
		same   bool
	}{
		{"compact", compact, true},
		{"whitespace between tokens", "{ \"model\" : \"m\",\n\t\"max_tokens\": 5, \"messages\": [ {\"role\":\"user\", \"content\":\"hi there\"} ] }", true},
		{"whitespace inside a string counts", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi  there"}]}`, false},
		{"key order counts", `{"max_tokens":5,"model":"m","messages":[{"role":"user","content":"hi there"}]}`, false},
		{"a value change counts", `{"model":"m","max_tokens":6,"messages":[{"role":"user","content":"hi there"}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParamsHash([]byte(tt.params))
			if len(got) != 32 {
				t.Errorf("ParamsHash = %q, %d characters want 32", got, len(got))
			}
			if (got == want) != tt.same {
				t.Errorf("ParamsHash = %s, compact form %s: same = %v want %v", got, want, got == want, tt.same)
			}
		})
	}
}

func TestParamsHashInvalidJSON(t *testing.T) {
	raw := []byte(`{"model": `)
	sum := sha256.Sum256(raw)
	if got, want := ParamsHash(raw), hex.EncodeToString(sum[:16]); got != want {
		t.Errorf("ParamsHash(invalid) = %s want hash of the raw bytes %s", got, want)
	}
}

// compactHash is the definition ParamsHash implements: SHA-256 of
// json.Compact's output, first 16 bytes in hex.
func compactHash(t *testing.T, params []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, params); err != nil {
		t.Fatalf("Compact(%q): %v", params, err)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:16])
}

var paramsHashSeeds = []string{
	`{}`, ` { "a" : 1 } `, "{\n\t\"model\": \"m\",\r\n \"messages\": [ {\"role\":\"user\", \"content\": \"a b\\n\\\" c \"} ]\n}",
	`{"s": "\\\\", "t": " \" ", "u": "\u00e9 \\u00e9"}`, `[1, 2 ,3]`, `"x y"`, `  true  `, `{"a":{"b":[{"c":null}]}}`,
}

// TestParamsHashIsCompactsHash: the one-pass hash of a valid body equals
// the hash of its json.Compact form, whitespace inside strings kept.
func TestParamsHashIsCompactsHash(t *testing.T) {
	for _, s := range paramsHashSeeds {
		if got, want := ParamsHash([]byte(s)), compactHash(t, []byte(s)); got != want {
			t.Errorf("ParamsHash(%q) = %s, want %s (json.Compact's)", s, got, want)
		}
	}
}

func FuzzParamsHash(f *testing.F) {
	for _, s := range paramsHashSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		if got, want := ParamsHash(b), compactHash(t, b); got != want {
			t.Errorf("ParamsHash(%q) = %s, want %s (json.Compact's)", b, got, want)
		}
	})
}
