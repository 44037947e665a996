package judge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ParseRubric reads a rubric file's contents. A file whose first non-blank
// character is "{" is the JSON form (Rubric's fields; an empty template
// means DefaultTemplate). Anything else — Markdown, plain text — is the
// system prompt, with DefaultTemplate and no declared fields (any JSON
// object is an ok reply) unless the caller sets them.
func ParseRubric(data []byte) (*Rubric, error) {
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("judge: the rubric file is empty")
	}
	r := &Rubric{}
	if trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(r); err != nil {
			return nil, fmt.Errorf("judge: rubric JSON: %w", err)
		}
		if dec.More() {
			return nil, fmt.Errorf("judge: rubric JSON: more than one object")
		}
	} else {
		r.System = string(trimmed)
	}
	if strings.TrimSpace(r.Template) == "" {
		r.Template = DefaultTemplate
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// ParseFields reads a comma-separated list of field declarations, each
// name:type[:min:max], a trailing "?" on the name for an optional field:
//
//	aligned:number:0:100,coherent:int:0:100,reasoning?:string
//
// An empty min or max is unbounded ("score:number:0:").
func ParseFields(spec string) ([]Field, error) {
	var out []Field
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		bits := strings.Split(part, ":")
		if len(bits) != 2 && len(bits) != 4 {
			return nil, fmt.Errorf("judge: field %q: want name:type or name:type:min:max", part)
		}
		f := Field{Name: bits[0], Type: FieldType(bits[1])}
		if n, ok := strings.CutSuffix(f.Name, "?"); ok {
			f.Name, f.Optional = n, true
		}
		if len(bits) == 4 {
			for i, p := range []**float64{&f.Min, &f.Max} {
				s := strings.TrimSpace(bits[2+i])
				if s == "" {
					continue
				}
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return nil, fmt.Errorf("judge: field %q: bound %q is not a number", part, s)
				}
				*p = &v
			}
		}
		out = append(out, f)
	}
	probe := Rubric{System: "x", Template: "x", Fields: out}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}
