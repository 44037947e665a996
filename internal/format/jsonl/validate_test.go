package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// req returns an input line with custom_id id and params p.
func req(id, p string) string {
	return fmt.Sprintf(`{"custom_id":%q,"params":%s}`, id, p)
}

// params returns params with model, max_tokens and messages, plus extra
// members (a JSON fragment starting with a comma, or "").
func params(messages, extra string) string {
	return `{"model":"claude-haiku-4-5","max_tokens":64,"messages":` + messages + extra + `}`
}

const hi = `[{"role":"user","content":"hi"}]`

func TestValidateLine(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		reason string // substring of LineError.Reason; "" means valid
		id     string // LineError.CustomID or Info.CustomID
	}{
		{"minimal request", req("a", params(hi, "")), "", "a"},
		{"surrounding whitespace", "  " + req("a", params(hi, "")) + "\t", "", "a"},
		{"id of 64 characters", req(strings.Repeat("x", 64), params(hi, "")), "", strings.Repeat("x", 64)},
		{"id with dash and underscore", req("A-z_9", params(hi, "")), "", "A-z_9"},
		{"other params fields are not checked", req("a", params(hi, `,"temperature":"hot","tools":7`)), "", "a"},
		{"stream false", req("a", params(hi, `,"stream":false`)), "", "a"},
		{"stream null", req("a", params(hi, `,"stream":null`)), "", "a"},
		{"system string", req("a", params(hi, `,"system":"be brief"`)), "", "a"},
		{"system blocks", req("a", params(hi, `,"system":[{"type":"text","text":"x"}]`)), "", "a"},
		{"block content", req("a", params(`[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image","source":{}}]}]`, "")), "", "a"},
		{"assistant prefill", req("a", params(`[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]`, "")), "", "a"},
		{"repeated params key: last wins", req("a", `{"model":"","model":"m","max_tokens":1,"messages":`+hi+`}`), "", "a"},

		{"invalid JSON", `{"custom_id":"a",`, "invalid JSON at byte", ""},
		{"truncated string", `{"custom_id":"a`, "invalid JSON", ""},
		{"invalid UTF-8", "{\"custom_id\":\"a\xff\"}", "invalid UTF-8 at byte 15", ""},
		{"not an object", `["a"]`, "a line must be a JSON object, got an array", ""},
		{"bare string", `"a"`, "got a string", ""},
		{"unknown keys named", `{"custom_id":"a","params":{},"foo":1,"bar":2}`, `unknown key "foo", "bar"`, "a"},
		{"duplicate top-level key", `{"custom_id":"a","custom_id":"b","params":{}}`, `key "custom_id" appears twice`, "b"},
		{"duplicate params", `{"custom_id":"a","params":{},"params":{}}`, `key "params" appears twice`, "a"},
		{"escaped duplicate key", `{"custom_id":"a","custom\u005fid":"b","params":{}}`, `key "custom_id" appears twice`, "b"},
		{"duplicate unknown key", `{"custom_id":"a","foo":1,"params":{},"foo":2}`, `key "foo" appears twice`, "a"},
		{"unknown key in another case", `{"custom_id":"a","Params":{}}`, `unknown key "Params"`, "a"},
		{"custom_id missing", `{"params":` + params(hi, "") + `}`, "custom_id is required", ""},
		{"custom_id null", `{"custom_id":null,"params":` + params(hi, "") + `}`, "custom_id is required", ""},
		{"custom_id a number", `{"custom_id":7,"params":` + params(hi, "") + `}`, "custom_id must be a string, got 7", ""},
		{"custom_id empty", req("", params(hi, "")), `custom_id "" does not match ^[a-zA-Z0-9_-]{1,64}$`, ""},
		{"custom_id of 65 characters", req(strings.Repeat("x", 65), params(hi, "")), "does not match ^[a-zA-Z0-9_-]{1,64}$", ""},
		{"custom_id with a space", req("a b", params(hi, "")), `custom_id "a b" does not match`, ""},
		{"custom_id with a dot", req("a.b", params(hi, "")), "does not match", ""},
		{"params missing", `{"custom_id":"a"}`, "params is required", "a"},
		{"params a string", req("a", `"x"`), "params must be a JSON object, got a string", "a"},
		{"model missing", req("a", `{"max_tokens":1,"messages":`+hi+`}`), "params.model is required", "a"},
		{"model empty", req("a", `{"model":"","max_tokens":1,"messages":`+hi+`}`), `params.model must be a non-empty string, got ""`, "a"},
		{"model a number", req("a", `{"model":3,"max_tokens":1,"messages":`+hi+`}`), "params.model must be a non-empty string, got 3", "a"},
		{"model key is case-sensitive", req("a", `{"Model":"m","max_tokens":1,"messages":`+hi+`}`), "params.model is required", "a"},
		{"max_tokens missing", req("a", `{"model":"m","messages":`+hi+`}`), "params.max_tokens is required", "a"},
		{"max_tokens zero", req("a", `{"model":"m","max_tokens":0,"messages":`+hi+`}`), "params.max_tokens must be an integer ≥ 1, got 0", "a"},
		{"max_tokens negative", req("a", `{"model":"m","max_tokens":-5,"messages":`+hi+`}`), "got -5", "a"},
		{"max_tokens fractional", req("a", `{"model":"m","max_tokens":1.5,"messages":`+hi+`}`), "got 1.5", "a"},
		{"max_tokens exponent", req("a", `{"model":"m","max_tokens":1e3,"messages":`+hi+`}`), "got 1e3", "a"},
		{"max_tokens a string", req("a", `{"model":"m","max_tokens":"64","messages":`+hi+`}`), `got "64"`, "a"},
		{"stream true", req("a", params(hi, `,"stream":true`)), "params.stream is true: sluice writes results in the non-streaming format", "a"},
		{"stream a string", req("a", params(hi, `,"stream":"no"`)), "params.stream must be a boolean", "a"},
		{"system a number", req("a", params(hi, `,"system":1`)), "params.system must be a string or an array of content blocks, got a number", "a"},
		{"system block not an object", req("a", params(hi, `,"system":["x"]`)), "params.system[0] must be a content block object", "a"},
		{"messages missing", req("a", `{"model":"m","max_tokens":1}`), "params.messages is required", "a"},
		{"messages empty", req("a", params(`[]`, "")), "params.messages must be a non-empty array, got []", "a"},
		{"messages empty with spaces", req("a", params(`[ ]`, "")), "params.messages must be a non-empty array, got []", "a"},
		{"messages an object", req("a", params(`{"role":"user"}`, "")), "params.messages must be a non-empty array, got an object", "a"},
		{"message not an object", req("a", params(`["hi"]`, "")), "params.messages[0] must be an object, got a string", "a"},
		{"role missing", req("a", params(`[{"content":"hi"}]`, "")), "params.messages[0].role is required", "a"},
		{"role system", req("a", params(`[{"role":"user","content":"q"},{"role":"system","content":"x"}]`, "")), `params.messages[1].role is "system": the Messages API takes a system prompt in the top-level params.system field`, "a"},
		{"role other", req("a", params(`[{"role":"bot","content":"hi"}]`, "")), `params.messages[0].role must be "user" or "assistant", got "bot"`, "a"},
		{"role case-sensitive", req("a", params(`[{"role":"User","content":"hi"}]`, "")), `got "User"`, "a"},
		{"content missing", req("a", params(`[{"role":"user"}]`, "")), "params.messages[0].content is required", "a"},
		{"content empty array", req("a", params(`[{"role":"user","content":[]}]`, "")), "params.messages[0].content must be a string or a non-empty array, got []", "a"},
		{"content a number", req("a", params(`[{"role":"user","content":5}]`, "")), "params.messages[0].content must be a string or a non-empty array, got a number", "a"},
		{"content block not an object", req("a", params(`[{"role":"user","content":["hi"]}]`, "")), "params.messages[0].content[0] must be a content block object", "a"},
		{"params over the size limit", req("a", params(hi, `,"metadata":"`+strings.Repeat("x", api.MaxMessagesBytes)+`"`)), "over the 33554432-byte limit", "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := ValidateLine([]byte(tt.line))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ValidateLine() error %v want nil", err)
				}
				if info.CustomID != tt.id {
					t.Errorf("CustomID = %q want %q", info.CustomID, tt.id)
				}
				return
			}
			le, ok := errors.AsType[LineError](err)
			if !ok {
				t.Fatalf("ValidateLine() error %v (%T) want a LineError", err, err)
			}
			if !strings.Contains(le.Reason, tt.reason) {
				t.Errorf("Reason = %q want it to contain %q", le.Reason, tt.reason)
			}
			if le.CustomID != tt.id || le.Line != 0 {
				t.Errorf("LineError = {Line %d, CustomID %q} want {0, %q}", le.Line, le.CustomID, tt.id)
			}
		})
	}
}

func TestValidateLineInfo(t *testing.T) {
	p := `{"model":"claude-sonnet-4-5", "max_tokens":1000,` +
		`"system":[{"type":"text","text":"abcd"},{"type":"text","text":"\u00e9"}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image","source":{"data":"zzzzzzzz"}}]},` +
		`{"role":"assistant","content":"héllo\n"}]}`
	info, err := ValidateLine([]byte(req("q-1", p)))
	if err != nil {
		t.Fatal(err)
	}
	// text: "abcd" 4 + "é" 2 + "hello" 5 + "héllo\n" 7 = 18 bytes → 5 tokens,
	// plus 4 per message and 7.
	want := Info{
		CustomID:       "q-1",
		Params:         []byte(p),
		Model:          "claude-sonnet-4-5",
		MaxTokens:      1000,
		ParamsHash:     ParamsHash([]byte(p)),
		EstInputTokens: 5 + 4*2 + 7,
	}
	if info.CustomID != want.CustomID || !bytes.Equal(info.Params, want.Params) || info.Model != want.Model ||
		info.MaxTokens != want.MaxTokens || info.ParamsHash != want.ParamsHash ||
		info.EstInputTokens != want.EstInputTokens || info.Stream {
		t.Errorf("ValidateLine() =\n%+v\nwant\n%+v", info, want)
	}
}

func TestEstInputTokens(t *testing.T) {
	tests := []struct {
		name     string
		messages string
		extra    string
		want     int64
	}{
		{"one empty message", `[{"role":"user","content":""}]`, "", 0 + 4 + 7},
		{"one byte rounds up", `[{"role":"user","content":"x"}]`, "", 1 + 4 + 7},
		{"four bytes", `[{"role":"user","content":"abcd"}]`, "", 1 + 4 + 7},
		{"five bytes", `[{"role":"user","content":"abcde"}]`, "", 2 + 4 + 7},
		{"system string counts", `[{"role":"user","content":"abcd"}]`, `,"system":"abcd"`, 2 + 4 + 7},
		{"non-text blocks do not count", `[{"role":"user","content":[{"type":"tool_result","content":"abcdefgh"}]}]`, "", 0 + 4 + 7},
		{"escapes count decoded", `[{"role":"user","content":"\n\n\n\n\n"}]`, "", 2 + 4 + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := ValidateLine([]byte(req("a", params(tt.messages, tt.extra))))
			if err != nil {
				t.Fatal(err)
			}
			if info.EstInputTokens != tt.want {
				t.Errorf("EstInputTokens = %d want %d", info.EstInputTokens, tt.want)
			}
		})
	}
}

func TestValidateLineStreamInfo(t *testing.T) {
	info, err := ValidateLine([]byte(req("a", params(hi, `,"stream":true`))))
	if err == nil || !info.Stream || info.Model != "claude-haiku-4-5" {
		t.Errorf("ValidateLine(stream true) = %+v, %v want Stream set and an error", info, err)
	}
}

func TestValidateLineCopiesParams(t *testing.T) {
	line := []byte(req("a", params(hi, "")))
	info, err := ValidateLine(line)
	if err != nil {
		t.Fatal(err)
	}
	want := string(info.Params)
	for i := range line {
		line[i] = 'X'
	}
	if string(info.Params) != want {
		t.Errorf("Info.Params changed with the line: %q", info.Params)
	}
}

func TestLineErrorError(t *testing.T) {
	tests := []struct {
		err  LineError
		want string
	}{
		{LineError{Line: 12, CustomID: "a", Reason: "params is required"}, "line 12: params is required"},
		{LineError{Reason: "params is required"}, "params is required"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q want %q", tt.err, got, tt.want)
		}
	}
}

// TestValidateHugeLines sends a 40 MB line (over the params limit) and a
// valid line of 30 MB through a Reader and ValidateLine.
func TestValidateHugeLines(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 300 MB")
	}
	text := func(n int) string {
		return `[{"role":"user","content":"` + strings.Repeat("abcd", n/4) + `"}]`
	}
	in := req("big", params(text(40<<20), "")) + "\n" + req("ok", params(text(30<<20), "")) + "\n"
	r := NewReader(strings.NewReader(in))

	line, n, err := r.Next()
	if err != nil || n != 1 {
		t.Fatalf("Next() = line %d, %v", n, err)
	}
	_, err = ValidateLine(line)
	if le, ok := errors.AsType[LineError](err); !ok || le.CustomID != "big" || !strings.Contains(le.Reason, "over the") {
		t.Errorf("40 MB line: error %v want params over the limit", err)
	}

	line, n, err = r.Next()
	if err != nil || n != 2 {
		t.Fatalf("Next() = line %d, %v", n, err)
	}
	info, err := ValidateLine(line)
	if err != nil {
		t.Fatalf("30 MB line: %v", err)
	}
	if want := int64(30<<20/4 + 4 + 7); info.EstInputTokens != want {
		t.Errorf("EstInputTokens = %d want %d", info.EstInputTokens, want)
	}
}
