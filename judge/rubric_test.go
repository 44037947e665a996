package judge

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
)

func item(id string, fields ...string) Item {
	it := Item{ID: id, Fields: map[string]string{}}
	for i := 0; i+1 < len(fields); i += 2 {
		it.Fields[fields[i]] = fields[i+1]
	}
	return it
}

func ptr[T any](v T) *T { return &v }

func TestRender(t *testing.T) {
	it := item("a", "question", "Why?", "completion", "Because.", "x-y", "dash", "a.b", "dot")
	tests := []struct {
		name, tmpl, want string
	}{
		{"default", DefaultTemplate, "Question asked to the AI:\nWhy?\n\nAI's response:\nBecause."},
		{"JSON example is literal", `Reply {"score": <0-100>} for {question}`, `Reply {"score": <0-100>} for Why?`},
		{"digits and spaces are literal", `{0-100} { question } {}`, `{0-100} { question } {}`},
		{"double braces keep the outer pair", `{{question}}`, `{Why?}`},
		{"dash and dot in names", `{x-y}/{a.b}`, `dash/dot`},
		{"unclosed brace", `tail {question`, `tail {question`},
		{"repeated", `{question}{question}`, `Why?Why?`},
	}
	for _, tt := range tests {
		r := &Rubric{System: "s", Template: tt.tmpl}
		got, err := r.Render(it)
		if err != nil || got != tt.want {
			t.Errorf("%s: Render(%q) = %q, %v want %q", tt.name, tt.tmpl, got, err, tt.want)
		}
	}
	r := &Rubric{System: "s", Template: "{question} {answer}"}
	if _, err := r.Render(it); err == nil || !strings.Contains(err.Error(), `"answer"`) {
		t.Fatalf("Render with a missing field = %v, want an error naming it", err)
	}
	if got := r.Placeholders(); !reflect.DeepEqual(got, []string{"question", "answer"}) {
		t.Fatalf("Placeholders = %v", got)
	}
}

func TestBuild(t *testing.T) {
	it := item("item-1", "question", "Is 2+2=4?", "completion", "Yes <b>4</b> & done.")
	p, err := Build(it, DefaultRubric(), DefaultModel, 256, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"claude-sonnet-4-5-20250929","max_tokens":256,"system":` + mustJSONString(DefaultSystem) +
		`,"messages":[{"role":"user","content":"Question asked to the AI:\nIs 2+2=4?\n\nAI's response:\nYes <b>4</b> & done."}]}`
	if string(p) != want {
		t.Fatalf("Build =\n%s\nwant\n%s", p, want)
	}
	line, _ := json.Marshal(api.BatchRequest{CustomID: it.ID, Params: p})
	if _, err := jsonl.ValidateLine(line); err != nil {
		t.Fatalf("sluice refuses the built line: %v", err)
	}
	again, _ := Build(it, DefaultRubric(), DefaultModel, 256, nil)
	if string(again) != string(p) {
		t.Fatal("Build is not deterministic")
	}

	r := DefaultRubric()
	r.PromptCache = true
	p, err = Build(it, r, DefaultModel, 1024, ptr(0.7))
	if err != nil {
		t.Fatal(err)
	}
	var got api.MessageRequest
	if err := json.Unmarshal(p, &got); err != nil {
		t.Fatal(err)
	}
	var blocks []api.ContentBlock
	json.Unmarshal(got.System, &blocks)
	if *got.Temperature != 0.7 || *got.MaxTokens != 1024 || len(blocks) != 1 || blocks[0].Text != DefaultSystem ||
		blocks[0].CacheControl == nil || blocks[0].CacheControl.Type != "ephemeral" {
		t.Fatalf("Build with prompt cache and temperature = %s", p)
	}
}

func mustJSONString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSpace(b.String())
}

func TestBuildRefuses(t *testing.T) {
	it := item("a", "question", "q", "completion", "c")
	empty := item("a", "question", " ", "completion", "")
	bare := &Rubric{System: "s", Template: "{question}{completion}"}
	tests := []struct {
		name      string
		it        Item
		r         *Rubric
		model     string
		maxTokens int
		temp      *float64
	}{
		{"no model", it, DefaultRubric(), "", 10, nil},
		{"max_tokens 0", it, DefaultRubric(), DefaultModel, 0, nil},
		{"temperature above 1", it, DefaultRubric(), DefaultModel, 10, ptr(1.5)},
		{"negative temperature", it, DefaultRubric(), DefaultModel, 10, ptr(-0.1)},
		{"missing field", item("a", "question", "q"), DefaultRubric(), DefaultModel, 10, nil},
		{"empty system", it, &Rubric{Template: "{question}"}, DefaultModel, 10, nil},
		{"empty user message", empty, bare, DefaultModel, 10, nil},
		{"bad field type", it, &Rubric{System: "s", Template: "t", Fields: []Field{{Name: "x", Type: "float"}}}, DefaultModel, 10, nil},
	}
	for _, tt := range tests {
		if p, err := Build(tt.it, tt.r, tt.model, tt.maxTokens, tt.temp); err == nil {
			t.Errorf("%s: Build = %s, want an error", tt.name, p)
		}
	}
}

func TestRubricValidate(t *testing.T) {
	lo, hi := 10.0, 0.0
	tests := []struct {
		name string
		r    Rubric
	}{
		{"no template", Rubric{System: "s"}},
		{"unnamed field", Rubric{System: "s", Template: "t", Fields: []Field{{Type: Number}}}},
		{"twice", Rubric{System: "s", Template: "t", Fields: []Field{{Name: "a", Type: Number}, {Name: "a", Type: Int}}}},
		{"min above max", Rubric{System: "s", Template: "t", Fields: []Field{{Name: "a", Type: Number, Min: &lo, Max: &hi}}}},
		{"range on a string", Rubric{System: "s", Template: "t", Fields: []Field{{Name: "a", Type: String, Min: &lo}}}},
		{"empty field sentinel", Rubric{System: "s", Template: "t", Fields: []Field{{Name: "a", Type: Number, Sentinels: []string{""}}}}},
		{"empty reply sentinel", Rubric{System: "s", Template: "t", Sentinels: []string{" "}}},
	}
	for _, tt := range tests {
		if err := tt.r.Validate(); err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tt.name)
		}
	}
	if err := DefaultRubric().Validate(); err != nil {
		t.Fatalf("default rubric: %v", err)
	}
}

// TestRubricJSON: the rubric file format round-trips.
func TestRubricJSON(t *testing.T) {
	b, err := json.Marshal(sentinelRubric())
	if err != nil {
		t.Fatal(err)
	}
	var r Rubric
	if err := json.Unmarshal(b, &r); err != nil || !reflect.DeepEqual(&r, sentinelRubric()) {
		t.Fatalf("round trip: %s → %+v, %v", b, r, err)
	}
}

func TestFingerprint(t *testing.T) {
	base := Fingerprint(DefaultRubric(), DefaultModel)
	if len(base) != 64 || base != Fingerprint(DefaultRubric(), DefaultModel) {
		t.Fatalf("Fingerprint = %q, not a stable sha256", base)
	}
	if Fingerprint(DefaultRubric(), "claude-haiku-4-5") == base {
		t.Error("changing the model leaves the fingerprint unchanged")
	}
	change := map[string]func(r *Rubric){
		"system":           func(r *Rubric) { r.System += " Be strict." },
		"template":         func(r *Rubric) { r.Template = "Q: {question}\nA: {completion}" },
		"placeholder name": func(r *Rubric) { r.Template = strings.Replace(r.Template, "{completion}", "{answer}", 1) },
		"range":            func(r *Rubric) { r.Fields[1].Max = ptr(10.0) },
		"field type":       func(r *Rubric) { r.Fields[2].Type = Int },
		"field sentinel":   func(r *Rubric) { r.Fields[1].Sentinels = []string{"REFUSAL"} },
		"reply sentinel":   func(r *Rubric) { r.Sentinels = []string{"REFUSAL"} },
	}
	for name, mutate := range change {
		r := DefaultRubric()
		mutate(r)
		if Fingerprint(r, DefaultModel) == base {
			t.Errorf("changing the %s leaves the fingerprint unchanged", name)
		}
	}
	r := DefaultRubric()
	r.PromptCache = true
	r.Sentinels = []string{}
	if Fingerprint(r, DefaultModel) != base {
		t.Error("prompt caching or an empty sentinel list changed the fingerprint")
	}
}

func TestItemJSON(t *testing.T) {
	var it Item
	err := json.Unmarshal([]byte(`{"id": "q1", "question": "Why?", "completion": "Because.", "score": 3, "meta": {"b": 1, "a": [1, 2]}, "none": null, "groups": ["g1"], "group": "g2"}`), &it)
	want := Item{ID: "q1", Groups: []string{"g1", "g2"},
		Fields: map[string]string{"question": "Why?", "completion": "Because.", "score": "3", "meta": `{"b":1,"a":[1,2]}`, "none": ""}}
	if err != nil || !reflect.DeepEqual(it, want) {
		t.Fatalf("Unmarshal = %+v, %v want %+v", it, err, want)
	}
	if err := it.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(it)
	var back Item
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip %s → %+v", b, back)
	}
	for _, bad := range []string{`{"question": "no id"}`, `{"id": 7}`, `{"id": "a", "groups": "g"}`, `[1]`, `null`} {
		if err := json.Unmarshal([]byte(bad), &it); err == nil {
			t.Errorf("Unmarshal(%s) = nil, want an error", bad)
		}
	}
	for _, bad := range []Item{{ID: "has space"}, {ID: ""}, {ID: strings.Repeat("a", 65)}, {ID: "a", Groups: []string{""}}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
}

func TestParseRubric(t *testing.T) {
	// Text: the system prompt, default template, no fields.
	r, err := ParseRubric([]byte("\xef\xbb\xbf# Grade the answer\nReply with JSON.\n"))
	if err != nil || r.System != "# Grade the answer\nReply with JSON." || r.Template != DefaultTemplate || len(r.Fields) != 0 {
		t.Fatalf("text rubric: %+v, %v", r, err)
	}
	// JSON: fields kept; an empty template is the default one.
	r, err = ParseRubric([]byte(`{"system": "S", "fields": [{"name": "score", "type": "int", "min": 0, "max": 10}], "sentinels": ["REFUSAL"]}`))
	if err != nil || r.System != "S" || r.Template != DefaultTemplate || len(r.Fields) != 1 || *r.Fields[0].Max != 10 || r.Sentinels[0] != "REFUSAL" {
		t.Fatalf("JSON rubric: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "  \n", `{"system": "S", "feilds": []}`, `{"system": ""}`, `{"system": "S"} {}`,
		`{"system": "S", "fields": [{"name": "x", "type": "bool"}]}`} {
		if _, err := ParseRubric([]byte(bad)); err == nil {
			t.Errorf("ParseRubric(%q) accepted", bad)
		}
	}
}

func TestParseFields(t *testing.T) {
	fs, err := ParseFields("aligned:number:0:100, coherent:int:0:, reasoning?:string")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 3 || fs[0].Name != "aligned" || *fs[0].Min != 0 || *fs[0].Max != 100 ||
		fs[1].Type != Int || fs[1].Max != nil || !fs[2].Optional || fs[2].Name != "reasoning" {
		t.Fatalf("%+v", fs)
	}
	for _, bad := range []string{"x", "x:number:1", "x:bool", "x:number:a:b", "x:number:5:1", "x:string:0:1", "x:int,x:int"} {
		if _, err := ParseFields(bad); err == nil {
			t.Errorf("ParseFields(%q) accepted", bad)
		}
	}
}
