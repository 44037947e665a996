package judge

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fuzzRubrics are the rubrics FuzzRubricParse reads replies under: the
// default one, the default one with sentinels, one with a bounded int, an
// optional string and an optional unbounded number with a sentinel, and
// one without fields.
func fuzzRubrics() []*Rubric {
	sent := DefaultRubric()
	sent.Sentinels = []string{"REFUSAL"}
	sent.Fields[1].Sentinels = []string{"REFUSAL"}
	lo, hi := 1.0, 10.0
	ints := &Rubric{System: "s", Template: "t", Sentinels: []string{"N/A", "CODE"}, Fields: []Field{
		{Name: "score", Type: Int, Min: &lo, Max: &hi, Sentinels: []string{"CODE"}},
		{Name: "label", Type: String, Optional: true},
		{Name: "p", Type: Number, Optional: true, Sentinels: []string{"N/A"}},
	}}
	none := &Rubric{System: "s", Template: "t", Sentinels: []string{"PASS"}}
	rubrics := []*Rubric{DefaultRubric(), sent, ints, none}
	for _, r := range rubrics {
		if err := r.Validate(); err != nil {
			panic(err)
		}
	}
	return rubrics
}

// FuzzRubricParse checks Rubric.Parse on any reply text:
//
//   - it is deterministic;
//   - exactly one of scores, sentinel and err is set (scores of an ok
//     reply are never nil);
//   - a sentinel is one of the rubric's, and the whole trimmed reply is it
//     (bare or as a JSON string);
//   - the error is ErrNoObject or a *FieldError naming a declared field,
//     Missing only for a required one; ErrNoObject never when an object
//     decodes at the first '{';
//   - ok scores hold only declared fields, every required one, each of its
//     type (float64, int64, string) within its bounds, or one of the
//     field's sentinels; without declared fields, only plain JSON values
//     (no json.Number);
//   - a reply that is one JSON object gives the values encoding/json reads
//     from it;
//   - a reply built from fuzzed values (prose, a ```json fence, the object,
//     more prose) gives those values back exactly, or the FieldError of
//     the first field out of range.
func FuzzRubricParse(f *testing.F) {
	f.Add(uint8(0), `{"reasoning": "fine", "aligned": 90, "coherent": 80}`, "ok", 90.0, 80.0, int64(7))
	f.Add(uint8(0), "Sure.\n```json\n{\"aligned\": 100, \"coherent\": 0}\n```\nDone.", "", 100.0, 0.0, int64(1))
	f.Add(uint8(1), "REFUSAL", "", 0.0, 0.0, int64(0))
	f.Add(uint8(1), `"REFUSAL"`, "", -1.0, 101.0, int64(11))
	f.Add(uint8(1), `{"aligned": "REFUSAL", "coherent": 50}`, "x", 50.5, 1e-300, int64(10))
	f.Add(uint8(2), `{"score": 7.0, "label": "a", "p": "N/A"}`, "", 0.0, 0.0, int64(1<<53))
	f.Add(uint8(2), `{"score": 1e400}`, "", 0.0, 0.0, int64(-1))
	f.Add(uint8(2), `{"score": 9007199254740993}`, "", 0.0, 0.0, int64(math.MaxInt64))
	f.Add(uint8(3), `[{"a": 1}] {"n": 1e400, "s": [1, {"k": null}]}`, "", 1e308, 0.0, int64(3))
	f.Add(uint8(3), "{{not json}} {\"ok\": true}", "\xff\xfe", 0.0, 0.0, int64(0))
	f.Add(uint8(0), "", "", 0.0, 0.0, int64(0))
	f.Add(uint8(0), strings.Repeat(`{"a`, 300)+`{"aligned": 1, "coherent": 2}`, "", 0.0, 0.0, int64(0))
	f.Add(uint8(0), "{\"aligned\": 5, \"coherent\": 5, \"reasoning\": \"\xff\"}", "\x00", 0.0, 0.0, int64(0))
	rubrics := fuzzRubrics()
	f.Fuzz(func(t *testing.T, sel uint8, text, reasoning string, a, c float64, k int64) {
		r := rubrics[int(sel)%len(rubrics)]
		scores, sentinel, err := r.Parse(text)
		checkParse(t, r, text, scores, sentinel, err)

		// A reply built from the fuzzed values.
		prose := strings.ReplaceAll(text, "{", "")
		var obj map[string]any
		switch r {
		case rubrics[0], rubrics[1]:
			if math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(c) || math.IsInf(c, 0) {
				return
			}
			obj = map[string]any{"reasoning": reasoning, "aligned": a, "coherent": c}
		case rubrics[2]:
			obj = map[string]any{"score": k, "label": reasoning}
		default:
			obj = map[string]any{"reasoning": reasoning, "n": k}
		}
		b, jerr := json.Marshal(obj)
		if jerr != nil {
			t.Fatal(jerr)
		}
		var plainObj map[string]any // obj as JSON reads it back
		if err := json.Unmarshal(b, &plainObj); err != nil {
			t.Fatal(err)
		}
		reply := prose + "\n```json\n" + string(b) + "\n```\n" + text
		scores, sentinel, err = r.Parse(reply)
		checkParse(t, r, reply, scores, sentinel, err)
		var fe *FieldError
		switch r {
		case rubrics[0], rubrics[1]:
			switch {
			case a < 0 || a > 100:
				if !errors.As(err, &fe) || fe.Field != "aligned" || fe.Missing {
					t.Fatalf("Parse(%q) = %v, %v want aligned out of range", reply, scores, err)
				}
			case c < 0 || c > 100:
				if !errors.As(err, &fe) || fe.Field != "coherent" || fe.Missing {
					t.Fatalf("Parse(%q) = %v, %v want coherent out of range", reply, scores, err)
				}
			default:
				if err != nil || sentinel != "" || !reflect.DeepEqual(scores, plainObj) {
					t.Fatalf("Parse(%q) = %#v, %q, %v want %#v", reply, scores, sentinel, err, plainObj)
				}
			}
		case rubrics[2]:
			if k < 1 || k > 10 {
				if !errors.As(err, &fe) || fe.Field != "score" || fe.Missing {
					t.Fatalf("Parse(%q) = %v, %v want score out of range", reply, scores, err)
				}
				return
			}
			want := map[string]any{"score": k, "label": plainObj["label"]}
			if err != nil || !reflect.DeepEqual(scores, want) {
				t.Fatalf("Parse(%q) = %#v, %v want %#v", reply, scores, err, want)
			}
		default:
			if err != nil || !reflect.DeepEqual(scores, plainObj) {
				t.Fatalf("Parse(%q) = %#v, %v want %#v", reply, scores, err, plainObj)
			}
		}
	})
}

// checkParse checks the properties of one Parse result that hold for any
// reply text.
func checkParse(t *testing.T, r *Rubric, text string, scores map[string]any, sentinel string, err error) {
	t.Helper()
	s2, sent2, err2 := r.Parse(text)
	if !reflect.DeepEqual(scores, s2) || sentinel != sent2 || !sameErr(err, err2) {
		t.Fatalf("Parse(%q) is not deterministic: %#v, %q, %v then %#v, %q, %v", text, scores, sentinel, err, s2, sent2, err2)
	}
	set := 0
	for _, b := range []bool{scores != nil, sentinel != "", err != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		t.Fatalf("Parse(%q) = %#v, %q, %v: want exactly one of scores, sentinel and error", text, scores, sentinel, err)
	}
	trimmed := strings.TrimSpace(text)
	if sentinel != "" {
		var js string
		if !slices.Contains(r.Sentinels, sentinel) ||
			trimmed != sentinel && (json.Unmarshal([]byte(trimmed), &js) != nil || js != sentinel) {
			t.Fatalf("Parse(%q) = sentinel %q, not the whole reply or not one of %q", text, sentinel, r.Sentinels)
		}
		return
	}
	if err != nil {
		var fe *FieldError
		switch {
		case errors.Is(err, ErrNoObject):
			if i := strings.IndexByte(trimmed, '{'); i >= 0 {
				dec := json.NewDecoder(strings.NewReader(trimmed[i:]))
				var m map[string]any
				if dec.Decode(&m) == nil && m != nil {
					t.Fatalf("Parse(%q) = ErrNoObject, but an object decodes at its first '{'", text)
				}
			}
		case errors.As(err, &fe):
			i := slices.IndexFunc(r.Fields, func(f Field) bool { return f.Name == fe.Field })
			if i < 0 || fe.Missing && r.Fields[i].Optional || !fe.Missing && fe.Reason == "" || err.Error() == "" {
				t.Fatalf("Parse(%q): FieldError %+v does not fit the rubric", text, fe)
			}
		default:
			t.Fatalf("Parse(%q) error %v (%T) is neither ErrNoObject nor a *FieldError", text, err, err)
		}
		return
	}
	if len(r.Fields) == 0 {
		checkPlain(t, text, scores)
	}
	for name, v := range scores {
		i := slices.IndexFunc(r.Fields, func(f Field) bool { return f.Name == name })
		if len(r.Fields) > 0 && i < 0 {
			t.Fatalf("Parse(%q) scores hold %q, which the rubric does not declare", text, name)
		}
		if i < 0 {
			continue
		}
		f := r.Fields[i]
		if s, ok := v.(string); ok && slices.Contains(f.Sentinels, s) {
			continue
		}
		var x float64
		switch f.Type {
		case String:
			if _, ok := v.(string); !ok {
				t.Fatalf("Parse(%q): string field %q holds %#v", text, name, v)
			}
			continue
		case Number:
			n, ok := v.(float64)
			if !ok || math.IsNaN(n) || math.IsInf(n, 0) {
				t.Fatalf("Parse(%q): number field %q holds %#v", text, name, v)
			}
			x = n
		case Int:
			n, ok := v.(int64)
			if !ok || n > 1<<53 || n < -(1<<53) {
				t.Fatalf("Parse(%q): int field %q holds %#v", text, name, v)
			}
			x = float64(n)
		}
		if f.Min != nil && x < *f.Min || f.Max != nil && x > *f.Max {
			t.Fatalf("Parse(%q): field %q = %v, outside [%v, %v]", text, name, v, bound(f.Min, "-inf"), bound(f.Max, "+inf"))
		}
	}
	for _, f := range r.Fields {
		if _, ok := scores[f.Name]; !ok && !f.Optional {
			t.Fatalf("Parse(%q) is ok without the required field %q: %#v", text, f.Name, scores)
		}
	}
	// A reply that is one JSON object: its values as encoding/json reads them.
	var whole map[string]any
	if strings.HasPrefix(trimmed, "{") && json.Unmarshal([]byte(trimmed), &whole) == nil && whole != nil {
		for _, f := range r.Fields {
			got, want := scores[f.Name], whole[f.Name]
			if s, ok := want.(string); ok && slices.Contains(f.Sentinels, s) || f.Type == String {
				if got != want && want != nil {
					t.Fatalf("Parse(%q): %q = %#v, encoding/json reads %#v", text, f.Name, got, want)
				}
				continue
			}
			if want == nil {
				continue
			}
			var g float64
			switch x := got.(type) {
			case float64:
				g = x
			case int64:
				g = float64(x)
			}
			if w, _ := want.(float64); g != w {
				t.Fatalf("Parse(%q): %q = %#v, encoding/json reads %#v", text, f.Name, got, want)
			}
		}
	}
}

// checkPlain fails unless v holds only what encoding/json decodes into an
// any: maps, slices, strings, finite float64s, bools and nils.
func checkPlain(t *testing.T, text string, v any) {
	t.Helper()
	switch x := v.(type) {
	case nil, string, bool:
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("Parse(%q): scores hold %v", text, x)
		}
	case map[string]any:
		for _, e := range x {
			checkPlain(t, text, e)
		}
	case []any:
		for _, e := range x {
			checkPlain(t, text, e)
		}
	default:
		t.Fatalf("Parse(%q): scores hold %#v (%T), not a plain JSON value", text, v, v)
	}
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}
