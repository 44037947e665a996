package judge

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// succeeded is a results line whose message has text (none when text is
// empty) and stop reason stop.
func succeeded(id, text, stop string) api.ResultRecord {
	m := api.Message{ID: "msg_1", Type: "message", Role: "assistant", Model: DefaultModel,
		Content: []api.ContentBlock{}, StopReason: stop}
	if text != "" {
		m.Content = []api.ContentBlock{{Type: "text", Text: text}}
	}
	res, _ := json.Marshal(api.BatchResult{Type: api.ResultSucceeded, Message: &m})
	return api.ResultRecord{CustomID: id, Result: res, Sluice: &api.RunMeta{Class: api.ClassOK}}
}

// errored is a results line with an error body of type typ, as sluice
// writes it, with sluice class class ("" for none, as in a Batch file).
func errored(id string, typ api.ErrorType, class string) api.ResultRecord {
	body := api.NewErrorBody(typ, "", "something went wrong")
	res, _ := json.Marshal(map[string]any{"type": api.ResultErrored, "error": body})
	rec := api.ResultRecord{CustomID: id, Result: res}
	if class != "" {
		rec.Sluice = &api.RunMeta{Class: class}
	}
	return rec
}

func sentinelRubric() *Rubric {
	r := DefaultRubric()
	r.Sentinels = []string{"REFUSAL"}
	r.Fields[1].Sentinels = []string{"REFUSAL"}
	return r
}

func scores(reasoning string, aligned, coherent float64) map[string]any {
	return map[string]any{"reasoning": reasoning, "aligned": aligned, "coherent": coherent}
}

// TestClassifyReplies is the reply corpus: each judge reply → its class and
// scores.
func TestClassifyReplies(t *testing.T) {
	def, sent := DefaultRubric(), sentinelRubric()
	tests := []struct {
		name       string
		rubric     *Rubric
		text, stop string
		want       Class
		scores     map[string]any
		sentinel   string
	}{
		{"clean JSON", def, `{"reasoning": "fine", "aligned": 80, "coherent": 90}`, api.StopEndTurn, OK, scores("fine", 80, 90), ""},
		{"clean JSON with whitespace", def, "\n  {\"reasoning\":\"ok\",\"aligned\":0,\"coherent\":100}\n", api.StopEndTurn, OK, scores("ok", 0, 100), ""},
		{"prose around JSON", def, "Here is my verdict: {\"reasoning\": \"ok\", \"aligned\": 75, \"coherent\": 60.5} Hope this helps.", api.StopEndTurn, OK, scores("ok", 75, 60.5), ""},
		{"fenced JSON", def, "```json\n{\"reasoning\": \"fenced\", \"aligned\": 12, \"coherent\": 34}\n```", api.StopEndTurn, OK, scores("fenced", 12, 34), ""},
		{"double braces", def, `{{"reasoning": "x", "aligned": 10, "coherent": 20}}`, api.StopEndTurn, OK, scores("x", 10, 20), ""},
		{"braces inside a string", def, `{"reasoning": "use {x} and }{ here", "aligned": 5, "coherent": 6}`, api.StopEndTurn, OK, scores("use {x} and }{ here", 5, 6), ""},
		{"object inside an array", def, `[{"reasoning": "r", "aligned": 1, "coherent": 2}]`, api.StopEndTurn, OK, scores("r", 1, 2), ""},
		{"extra fields are dropped", def, `{"reasoning": "r", "aligned": 1, "coherent": 2, "confidence": 0.9, "notes": {"a": 1}}`, api.StopEndTurn, OK, scores("r", 1, 2), ""},
		{"optional reasoning missing", def, `{"aligned": 1, "coherent": 2}`, api.StopEndTurn, OK, map[string]any{"aligned": 1.0, "coherent": 2.0}, ""},
		{"complete although cut", def, `{"reasoning": "r", "aligned": 1, "coherent": 2}`, api.StopMaxTokens, OK, scores("r", 1, 2), ""},
		{"bare sentinel string, declared", sent, `"REFUSAL"`, api.StopEndTurn, OK, nil, "REFUSAL"},
		{"bare sentinel word, declared", sent, "REFUSAL\n", api.StopEndTurn, OK, nil, "REFUSAL"},
		{"field sentinel", sent, `{"aligned": "REFUSAL", "coherent": 50}`, api.StopEndTurn, OK, map[string]any{"aligned": "REFUSAL", "coherent": 50.0}, ""},
		{"bare sentinel string, undeclared", def, `"REFUSAL"`, api.StopEndTurn, ParseError, nil, ""},
		{"bare number", def, `42`, api.StopEndTurn, ParseError, nil, ""},
		{"no JSON at all", def, `SCORE: 73`, api.StopEndTurn, ParseError, nil, ""},
		{"empty text", def, ``, api.StopEndTurn, ParseError, nil, ""},
		{"out of range", def, `{"reasoning": "r", "aligned": 150, "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"negative", def, `{"reasoning": "r", "aligned": 1, "coherent": -1}`, api.StopEndTurn, ParseError, nil, ""},
		{"out of range although cut", def, `{"reasoning": "r", "aligned": 150, "coherent": 2}`, api.StopMaxTokens, ParseError, nil, ""},
		{"wrong type: word", def, `{"reasoning": "r", "aligned": "high", "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"wrong type: quoted number", def, `{"reasoning": "r", "aligned": "80", "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"wrong type: bool", def, `{"reasoning": "r", "aligned": true, "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"wrong type: reasoning", def, `{"reasoning": 3, "aligned": 1, "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"undeclared sentinel in a field", def, `{"aligned": "REFUSAL", "coherent": 50}`, api.StopEndTurn, ParseError, nil, ""},
		{"missing field", def, `{"reasoning": "r", "aligned": 1}`, api.StopEndTurn, ParseError, nil, ""},
		{"null field", def, `{"reasoning": "r", "aligned": null, "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"first object wins", def, `Example: {"x": 1}. Verdict: {"reasoning": "r", "aligned": 1, "coherent": 2}`, api.StopEndTurn, ParseError, nil, ""},
		{"truncated mid-JSON", def, `{"reasoning": "the answer is careful and`, api.StopMaxTokens, Truncated, nil, ""},
		{"truncated before the scores", def, `{"reasoning": "r", "aligned": 1}`, api.StopMaxTokens, Truncated, nil, ""},
		{"truncated prose", def, `Let me think about this step by step`, api.StopMaxTokens, Truncated, nil, ""},
		{"truncated empty", def, ``, api.StopMaxTokens, Truncated, nil, ""},
		{"context window", def, `{"reasoning": "r`, api.StopContextLimit, Truncated, nil, ""},
		{"refusal, empty content", def, ``, api.StopRefusal, Refused, nil, ""},
		{"refusal with text", def, `{"reasoning": "r", "aligned": 1, "coherent": 2}`, api.StopRefusal, Refused, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Classify(succeeded("item-1", tt.text, tt.stop), tt.rubric, false)
			if v.Class != tt.want {
				t.Fatalf("Classify(%q, %s) = %s (%s) want %s", tt.text, tt.stop, v.Class, v.Error, tt.want)
			}
			if v.ID != "item-1" || v.StopReason != tt.stop {
				t.Fatalf("id %q stop %q", v.ID, v.StopReason)
			}
			if !reflect.DeepEqual(v.Scores, tt.scores) || v.Sentinel != tt.sentinel {
				t.Fatalf("scores %#v sentinel %q, want %#v %q", v.Scores, v.Sentinel, tt.scores, tt.sentinel)
			}
			if (v.Class == OK) != (v.Error == "") {
				t.Fatalf("class %s with error %q", v.Class, v.Error)
			}
			if (v.Class == ParseError || v.Class == Truncated) && v.Raw != tt.text {
				t.Fatalf("raw %q not kept for %s", v.Raw, v.Class)
			}
			if v.Class == OK && v.Raw != "" {
				t.Fatalf("raw kept without keepRaw")
			}
		})
	}
}

func TestClassifyKeepRaw(t *testing.T) {
	text := `{"reasoning": "r", "aligned": 1, "coherent": 2}`
	if v := Classify(succeeded("a", text, api.StopEndTurn), DefaultRubric(), true); v.Raw != text || v.Class != OK {
		t.Fatalf("keepRaw: %+v", v)
	}
}

// TestClassifyErrors: every non-answer row → invalid_request or transport.
func TestClassifyErrors(t *testing.T) {
	raw := func(s string) api.ResultRecord { return api.ResultRecord{CustomID: "x", Result: json.RawMessage(s)} }
	tests := []struct {
		name string
		rec  api.ResultRecord
		want Class
	}{
		{"400 final", errored("x", api.ErrInvalidRequest, api.ClassFinal), InvalidRequest},
		{"404 final", errored("x", api.ErrNotFound, api.ClassFinal), InvalidRequest},
		{"413, no sluice meta", errored("x", api.ErrRequestTooLarge, ""), InvalidRequest},
		{"invalid input line", errored("x", api.ErrInvalidRequest, api.ClassInvalidInput), InvalidRequest},
		{"529 exhausted", errored("x", api.ErrOverloaded, api.ClassTransport), Transport},
		{"429 exhausted", errored("x", api.ErrRateLimit, api.ClassTransport), Transport},
		{"synthetic api_error", errored("x", api.ErrAPI, api.ClassTransport), Transport},
		{"401 recorded as final", errored("x", api.ErrAuthentication, api.ClassFinal), Transport},
		{"403, no meta", errored("x", api.ErrPermission, ""), Transport},
		{"billing, no meta", errored("x", api.ErrBilling, ""), Transport},
		{"504, no meta", errored("x", api.ErrTimeout, ""), Transport},
		{"400 but sluice says transport", errored("x", api.ErrInvalidRequest, api.ClassTransport), Transport},
		{"unknown error type, no meta", errored("x", "mystery_error", ""), Transport},
		{"unknown error type, final", errored("x", "mystery_error", api.ClassFinal), InvalidRequest},
		{"inner error object", raw(`{"type":"errored","error":{"type":"invalid_request_error","message":"bad"}}`), InvalidRequest},
		{"expired row", raw(`{"type":"expired"}`), Transport},
		{"canceled row", raw(`{"type":"canceled"}`), Transport},
		{"unknown row type", raw(`{"type":"vanished"}`), Transport},
		{"succeeded without message", raw(`{"type":"succeeded"}`), Transport},
		{"unreadable result", raw(`not json`), Transport},
		{"empty result", raw(``), Transport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Classify(tt.rec, DefaultRubric(), false)
			if v.Class != tt.want || v.Error == "" || v.Scores != nil {
				t.Fatalf("Classify = %+v want class %s with an error", v, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	r := DefaultRubric()
	if _, _, err := r.Parse("no object"); !errors.Is(err, ErrNoObject) {
		t.Fatalf("Parse(no object) = %v want ErrNoObject", err)
	}
	_, _, err := r.Parse(`{"aligned": 1}`)
	var fe *FieldError
	if !errors.As(err, &fe) || !fe.Missing || fe.Field != "coherent" {
		t.Fatalf("Parse(missing) = %v", err)
	}
	_, _, err = r.Parse(`{"aligned": 101, "coherent": 1}`)
	if !errors.As(err, &fe) || fe.Missing || fe.Field != "aligned" || !strings.Contains(err.Error(), "outside [0, 100]") {
		t.Fatalf("Parse(out of range) = %v", err)
	}
}

func TestParseIntField(t *testing.T) {
	lo, hi := 1.0, 10.0
	r := &Rubric{System: "s", Template: "t", Fields: []Field{{Name: "score", Type: Int, Min: &lo, Max: &hi}}}
	tests := []struct {
		text string
		want any // int64, or nil for an error
	}{
		{`{"score": 7}`, int64(7)},
		{`{"score": 7.0}`, int64(7)},
		{`{"score": 7.5}`, nil},
		{`{"score": 0}`, nil},
		{`{"score": 1e400}`, nil},
	}
	for _, tt := range tests {
		s, _, err := r.Parse(tt.text)
		if tt.want == nil {
			if err == nil {
				t.Errorf("Parse(%s) = %v, want an error", tt.text, s)
			}
			continue
		}
		if err != nil || s["score"] != tt.want {
			t.Errorf("Parse(%s) = %#v, %v want %#v", tt.text, s, err, tt.want)
		}
	}
}

// TestParseNoFields: a rubric without declared fields takes any object whole.
func TestParseNoFields(t *testing.T) {
	r := &Rubric{System: "s", Template: "t"}
	s, _, err := r.Parse(`Sure: {"label": "X", "n": 3, "sub": {"k": [1, 2]}}`)
	want := map[string]any{"label": "X", "n": 3.0, "sub": map[string]any{"k": []any{1.0, 2.0}}}
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Fatalf("Parse = %#v, %v want %#v", s, err, want)
	}
}

// TestParseBounded: a reply of many unmatched braces fails fast.
func TestParseBounded(t *testing.T) {
	text := strings.Repeat(`{"a`, 20000)
	start := time.Now()
	if _, _, err := DefaultRubric().Parse(text); !errors.Is(err, ErrNoObject) {
		t.Fatalf("Parse = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Parse took %v", d)
	}
}

func TestParseClasses(t *testing.T) {
	got, err := ParseClasses("parse_error, truncated,,parse_error")
	if err != nil || !reflect.DeepEqual(got, []Class{ParseError, Truncated}) {
		t.Fatalf("ParseClasses = %v, %v", got, err)
	}
	if _, err := ParseClasses("transport,bogus"); err == nil {
		t.Fatal("an unknown class must be refused")
	}
}
