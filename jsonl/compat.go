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
// or DescribeParams accepted it). Only bodies that mention a field a rule
// is about are decoded.
func CheckCompat(params []byte, r api.Rules) string {
	sampling := r.Sampling == api.SamplingRefused || r.Sampling == api.SamplingDefaultOnly
	if !sampling && !r.NoAssistantDocuments && !r.NoUserCitations {
		return ""
	}
	hasSampling := sampling && (bytes.Contains(params, []byte(`"temperature"`)) || bytes.Contains(params, []byte(`"top_p"`)) || bytes.Contains(params, []byte(`"top_k"`)))
	hasDocs := r.NoAssistantDocuments && bytes.Contains(params, []byte(`"document"`))
	hasCitations := r.NoUserCitations && bytes.Contains(params, []byte(`"citations"`))
	if !hasSampling && !hasDocs && !hasCitations {
		return ""
	}
	var p struct {
		Temperature json.RawMessage `json:"temperature"`
		TopP        json.RawMessage `json:"top_p"`
		TopK        json.RawMessage `json:"top_k"`
		Messages    []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(params, &p) != nil {
		return "" // not this check's business: the API answers it
	}
	if hasSampling {
		for _, f := range []struct {
			name  string
			value json.RawMessage
			def   string // the default value, "" for none
		}{{"temperature", p.Temperature, "1"}, {"top_p", p.TopP, "1"}, {"top_k", p.TopK, ""}} {
			if isAbsent(f.value) {
				continue
			}
			switch {
			case r.Sampling == api.SamplingRefused:
				return fmt.Sprintf("params.%s: %s refuses %s, even at its default; remove it%s", f.name, by(r), f.name, versionHint(r))
			case !isDefault(f.value, f.def):
				return fmt.Sprintf("params.%s: %s refuses %s at %s (only the defaults: temperature 1, top_p 1, no top_k); remove it%s",
					f.name, by(r), f.name, show(f.value), versionHint(r))
			}
		}
	}
	for i, m := range p.Messages {
		if m.Role != "assistant" && m.Role != "user" || len(m.Content) == 0 || m.Content[0] != '[' {
			continue
		}
		var blocks []struct {
			Type      string          `json:"type"`
			Citations json.RawMessage `json:"citations"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for j, b := range blocks {
			switch {
			case hasDocs && m.Role == "assistant" && b.Type == "document":
				return fmt.Sprintf("params.messages[%d].content[%d]: API version %s refuses a document block in an assistant message%s", i, j, r.Version, versionHint(r))
			case hasCitations && m.Role == "user" && b.Type == "text" && !isEmptyList(b.Citations):
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
