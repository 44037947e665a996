package jsonl

import (
	"crypto/sha256"
	"encoding/hex"
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
