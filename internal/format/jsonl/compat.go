package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/api"
)

// What an API version and a model refuse (api.Rules, from the model table:
// docs/models.md), checked before anything is sent: a line the API would
// refuse line by line is an invalid line like any other.

// CheckCompat returns why the API refuses params under rules, naming the
// field, or "" when it does not. params is a valid request body (ValidateLine
// or DescribeParams accepted it). A body is decoded whenever a rule is
// active and it names a field a rule is about — or holds a backslash, so a
// key written with escapes ("temp\u0065rature") is caught as the API,
// which decodes it, reads it. Keys are matched exactly, as decoded. A
// field present with null is present: a version that refuses the field
// is taken to refuse null too (docs/models.md).
func CheckCompat(params []byte, r api.Rules) string {
	sampling := r.Sampling == api.SamplingRefused || r.Sampling == api.SamplingDefaultOnly
	if !sampling && !r.NoAssistantDocuments && !r.NoUserCitations {
		return ""
	}
	escaped := bytes.IndexByte(params, '\\') >= 0
	hasSampling := sampling && (escaped || bytes.Contains(params, []byte(`"temperature"`)) || bytes.Contains(params, []byte(`"top_p"`)) || bytes.Contains(params, []byte(`"top_k"`)))
	hasDocs := r.NoAssistantDocuments && (escaped || bytes.Contains(params, []byte(`"document"`)))
	hasCitations := r.NoUserCitations && (escaped || bytes.Contains(params, []byte(`"citations"`)))
	if !hasSampling && !hasDocs && !hasCitations {
		return ""
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(params, &top) != nil {
		return "" // not this check's business: the API answers it
	}
	var msgs []map[string]json.RawMessage
	if m, ok := top["messages"]; ok && json.Unmarshal(m, &msgs) != nil {
		msgs = nil
	}
	if hasSampling {
		for _, f := range []struct {
			name string
			def  string // the default value, "" for none
		}{{"temperature", "1"}, {"top_p", "1"}, {"top_k", ""}} {
			value, present := top[f.name]
			if !present {
				continue
			}
			switch {
			case r.Sampling == api.SamplingRefused:
				return fmt.Sprintf("params.%s: %s refuses %s, even at its default; remove it%s", f.name, by(r), f.name, versionHint(r))
			case !isDefault(value, f.def):
				return fmt.Sprintf("params.%s: %s refuses %s at %s (only the defaults: temperature 1, top_p 1, no top_k); remove it%s",
					f.name, by(r), f.name, show(value), versionHint(r))
			}
		}
	}
	for i, m := range msgs {
		var role string
		_ = json.Unmarshal(m["role"], &role)
		content := bytes.TrimSpace(m["content"])
		if role != "assistant" && role != "user" || len(content) == 0 || content[0] != '[' {
			continue
		}
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(content, &blocks) != nil {
			continue
		}
		for j, b := range blocks {
			var typ string
			_ = json.Unmarshal(b["type"], &typ)
			switch {
			case hasDocs && role == "assistant" && typ == "document":
				return fmt.Sprintf("params.messages[%d].content[%d]: API version %s refuses a document block in an assistant message; remove it%s", i, j, r.Version, versionHint(r))
			case hasCitations && role == "user" && typ == "text" && !isEmptyList(b["citations"]):
				return fmt.Sprintf("params.messages[%d].content[%d].citations: API version %s refuses citations on a text block of a user message; remove them%s", i, j, r.Version, versionHint(r))
			}
		}
	}
	return ""
}

// by names what set the sampling rule.
func by(r api.Rules) string {
	if r.SamplingBy == "" {
		return "the API"
	}
	return r.SamplingBy
}

// versionHint suggests the older version when the version, not the model,
// refuses.
func versionHint(r api.Rules) string {
	if r.Version != api.Version20230601 && (r.SamplingBy == "API version "+r.Version || r.NoAssistantDocuments || r.NoUserCitations) {
		return " or send --anthropic-version " + api.Version20230601
	}
	return ""
}

func isAbsent(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

// isDefault reports whether the number v equals def ("" : no default).
func isDefault(v json.RawMessage, def string) bool {
	if def == "" {
		return false
	}
	var x, d float64
	return json.Unmarshal(v, &x) == nil && json.Unmarshal([]byte(def), &d) == nil && x == d
}

func isEmptyList(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return isAbsent(v) || string(bytes.Join(bytes.Fields(v), nil)) == "[]"
}

// compat is the Validator's check of a line validate accepted (err nil)
// against what v.Version and the line's model refuse.
func (v *Validator) compat(info Info, err error) error {
	if err != nil || v.Version == "" {
		return err
	}
	if reason := CheckCompat(info.Params, api.Current().Rules(v.Version, info.Model)); reason != "" {
		return LineError{CustomID: info.CustomID, Reason: reason}
	}
	return nil
}
