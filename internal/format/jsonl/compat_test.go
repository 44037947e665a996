package jsonl

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// TestCheckCompat: what each (API version, model) refuses, by the model
// table's rules, and nothing else.
func TestCheckCompat(t *testing.T) {
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, version, model, params, want string
	}{
		{"2023-06-01 takes sampling", api.Version20230601, "claude-sonnet-4-5", `{"temperature":0.2,"top_p":0.9,"top_k":5,` + user + `}`, ""},
		{"2026-10-21 refuses temperature at its default", api.Version20261021, "claude-sonnet-4-5", `{"temperature":1,` + user + `}`, "params.temperature: API version 2026-10-21 refuses temperature, even at its default; remove it or send --anthropic-version 2023-06-01"},
		{"2026-10-21 refuses top_k", api.Version20261021, "claude-haiku-4-5", `{"top_k":3,` + user + `}`, "params.top_k: API version 2026-10-21 refuses"},
		{"a null field is present", api.Version20261021, "claude-sonnet-4-5", `{"temperature":null,` + user + `}`, "params.temperature: API version 2026-10-21 refuses temperature, even at its default"},
		{"a null field is not the default", api.Version20230601, "claude-sonnet-5", `{"top_p":null,` + user + `}`, "params.top_p: claude-sonnet-5 refuses top_p at null"},
		{"an escaped key is the key", api.Version20261021, "claude-sonnet-4-5", `{"temp\u0065rature":0.5,` + user + `}`, "params.temperature: API version 2026-10-21 refuses temperature"},
		{"an escaped block type", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"docum\u0065nt","source":{}}]}]}`, "params.messages[1].content[0]: API version 2026-10-21 refuses a document block in an assistant message; remove it"},
		{"an escaped citations key", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","cit\u0061tions":[{}]}]}]}`, "params.messages[0].content[0].citations: API version 2026-10-21 refuses citations"},
		{"a key in another case is another key", api.Version20261021, "claude-sonnet-4-5", `{"Temperature":0.5,` + user + `}`, ""},
		{"Sonnet 5 takes the default temperature", api.Version20230601, "claude-sonnet-5", `{"temperature":1.0,"top_p":1,` + user + `}`, ""},
		{"Sonnet 5 refuses another temperature on every version", api.Version20230601, "claude-sonnet-5", `{"temperature":0.7,` + user + `}`, "params.temperature: claude-sonnet-5 refuses temperature at 0.7 (only the defaults"},
		{"Sonnet 5 refuses any top_k", api.Version20230601, "claude-sonnet-5", `{"top_k":1,` + user + `}`, "params.top_k: claude-sonnet-5 refuses top_k at 1"},
		{"an unknown model: the version's rules alone", api.Version20261021, "claude-new-9", `{"top_p":0.5,` + user + `}`, "params.top_p: API version 2026-10-21 refuses"},
		{"an assistant document", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"document","source":{}}]}]}`, "params.messages[1].content[0]: API version 2026-10-21 refuses a document block in an assistant message"},
		{"a user document is fine", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, ""},
		{"user citations", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","citations":[{"type":"char_location"}]}]}]}`, "params.messages[0].content[0].citations: API version 2026-10-21 refuses citations"},
		{"empty citations are fine", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":[{"type":"text","text":"a","citations":[ ]}]}]}`, ""},
		{"assistant citations are fine", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"a","citations":[{}]}]}]}`, ""},
		{"a word in the text is not a field", api.Version20261021, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":"set \"temperature\" and a \"document\" with \"citations\""}]}`, ""},
		{"2023-06-01 takes assistant documents", api.Version20230601, "claude-sonnet-4-5", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"document"}]}]}`, ""},
	} {
		got := CheckCompat([]byte(tc.params), api.Current().Rules(tc.version, tc.model))
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestValidatorVersion: with a version, the lines it refuses are invalid,
// by line number and field, counted like any invalid line.
func TestValidatorVersion(t *testing.T) {
	v := Validator{Version: api.Version20261021}
	var bad []int
	for i := 1; i <= 100; i++ {
		temp := ""
		if i%10 == 7 {
			temp = `"temperature":0.5,`
		}
		line := fmt.Sprintf(`{"custom_id":"r%d","params":{"model":"claude-sonnet-4-5","max_tokens":8,%s"messages":[{"role":"user","content":"x"}]}}`, i, temp)
		if _, err := v.Check(i, []byte(line)); err != nil {
			var le LineError
			if !errors.As(err, &le) || le.Line != i || le.CustomID != fmt.Sprintf("r%d", i) || !strings.Contains(le.Reason, "params.temperature") {
				t.Fatalf("line %d: %v", i, err)
			}
			bad = append(bad, i)
		}
	}
	if s := v.Summary(); s.Invalid != 10 || s.Valid != 90 || len(bad) != 10 || bad[0] != 7 {
		t.Errorf("summary %+v, invalid lines %v", s, bad)
	}
	var plain Validator // no version: nothing checked
	if _, err := plain.Check(1, []byte(`{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":8,"temperature":0.5,"messages":[{"role":"user","content":"x"}]}}`)); err != nil {
		t.Errorf("without a version: %v", err)
	}
}
