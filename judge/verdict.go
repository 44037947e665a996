package judge

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/api"
)

// Class says what happened to one judge request. Every verdict has exactly
// one.
type Class string

// Verdict classes, in the order summaries list them.
const (
	// OK: a reply that parsed, with every declared field valid (or a whole
	// reply equal to a rubric sentinel).
	OK Class = "ok"
	// ParseError: the model answered in full, but the reply has no JSON
	// object, or its first object misses or mistypes a declared field, or
	// a value is out of range. A content problem: re-asking the same
	// request gets the same kind of reply.
	ParseError Class = "parse_error"
	// Truncated: stop_reason max_tokens (or the context window) and no
	// usable object, or one missing declared fields. A budget problem:
	// re-ask with a larger max_tokens.
	Truncated Class = "truncated"
	// Refused: stop_reason refusal (a safety decline, usually with empty
	// content). Often fixed by re-issuing the identical request on sync.
	Refused Class = "refused"
	// InvalidRequest: the API refused the request itself (400, 404, 413);
	// retrying the same request cannot help.
	InvalidRequest Class = "invalid_request"
	// Transport: no verdict was produced: rate limits, overload, 5xx,
	// dropped connections, auth, expired or canceled batch rows, an
	// unreadable result. A re-run drives it again; never cached.
	Transport Class = api.ClassTransport // the result class of the same rows
)

// Classes lists every class in summary order.
var Classes = []Class{OK, ParseError, Truncated, Refused, InvalidRequest, Transport}

// ParseClasses reads a comma-separated list of class names, as a
// --redrive flag takes it ("parse_error,truncated").
func ParseClasses(list string) ([]Class, error) {
	var out []Class
	for name := range strings.SplitSeq(list, ",") {
		c := Class(strings.TrimSpace(name))
		if c == "" {
			continue
		}
		if !slices.Contains(Classes, c) {
			return nil, fmt.Errorf("judge: unknown class %q (want one of ok, parse_error, truncated, refused, invalid_request, transport)", c)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Verdict is the judged outcome of one item: one row of a verdicts file.
type Verdict struct {
	ID    string `json:"id"`
	Class Class  `json:"class"`
	// Scores holds the declared fields of an ok reply (the whole object
	// when the rubric declares none): float64 for number fields, int64 for
	// int fields, string for string fields and sentinel values. Decoded
	// from JSON, every number is a float64.
	Scores map[string]any `json:"scores,omitempty"`
	// Sentinel is set when the whole reply was one of the rubric's reply
	// sentinels (Scores is then empty).
	Sentinel string `json:"sentinel,omitempty"`
	// Raw is the reply text: always for parse_error and truncated, for
	// every class when asked (Classify's keepRaw).
	Raw        string `json:"raw,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	// Error says why a verdict is not ok: the parse failure, or the API
	// error's type and message.
	Error  string   `json:"error,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Rubric is the rubric's Fingerprint; Classify leaves it to the caller.
	Rubric string `json:"rubric,omitempty"`
}

// ErrNoObject is the parse error of a reply with no JSON object in it.
var ErrNoObject = errors.New("judge: no JSON object in the reply")

// FieldError is the parse error of a reply whose object does not fit a
// declared field.
type FieldError struct {
	Field string
	// Missing: the field is absent or null (a cut reply looks like this).
	Missing bool
	Reason  string
}

func (e *FieldError) Error() string {
	if e.Missing {
		return fmt.Sprintf("judge: field %q is missing", e.Field)
	}
	return fmt.Sprintf("judge: field %q %s", e.Field, e.Reason)
}

// maxScan bounds how many '{' positions Parse tries, so a pathological
// reply cannot cost quadratic time.
const maxScan = 256

// Parse reads a judge reply under r. In order:
//
//  1. a whole reply (trimmed, or as a bare JSON string) equal to one of
//     r.Sentinels is a sentinel verdict;
//  2. a whole reply that is one JSON object is that object;
//  3. otherwise the first '{' at which a JSON object decodes gives the
//     object: prose around it, ```json fences and {{double braces}} all
//     work. Only objects count: a bare JSON string, number or array is not
//     a parse (an object inside an array is found by step 3).
//
// The object is then checked against r.Fields (see Rubric); scores holds
// the declared fields. The error is ErrNoObject or a *FieldError.
func (r *Rubric) Parse(text string) (scores map[string]any, sentinel string, err error) {
	t := strings.TrimSpace(text)
	for _, s := range r.Sentinels {
		var js string
		if t == s || json.Unmarshal([]byte(t), &js) == nil && js == s {
			return nil, s, nil
		}
	}
	if obj, ok := decodeObject(t, true); ok {
		scores, err := r.check(obj)
		return scores, "", err
	}
	from, tried := 0, 0
	for tried < maxScan {
		i := strings.IndexByte(t[from:], '{')
		if i < 0 {
			break
		}
		from += i
		if obj, ok := decodeObject(t[from:], false); ok {
			scores, err := r.check(obj)
			return scores, "", err
		}
		from++
		tried++
	}
	return nil, "", ErrNoObject
}

// decodeObject decodes the JSON object s starts with; whole requires that
// nothing but whitespace follows it.
func decodeObject(s string, whole bool) (map[string]any, bool) {
	if !strings.HasPrefix(s, "{") {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var obj map[string]any
	if dec.Decode(&obj) != nil || obj == nil {
		return nil, false
	}
	if whole && strings.TrimSpace(s[dec.InputOffset():]) != "" {
		return nil, false
	}
	return obj, true
}

// check validates obj against the declared fields and returns the scores.
func (r *Rubric) check(obj map[string]any) (map[string]any, error) {
	if len(r.Fields) == 0 {
		return plain(obj).(map[string]any), nil
	}
	scores := make(map[string]any, len(r.Fields))
	for _, f := range r.Fields {
		v, ok := obj[f.Name]
		if !ok || v == nil {
			if f.Optional {
				continue
			}
			return nil, &FieldError{Field: f.Name, Missing: true}
		}
		val, err := f.value(v)
		if err != nil {
			return nil, err
		}
		scores[f.Name] = val
	}
	return scores, nil
}

// value checks one decoded value against f.
func (f Field) value(v any) (any, error) {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: f.Name, Reason: fmt.Sprintf(format, args...)}
	}
	if s, ok := v.(string); ok && slices.Contains(f.Sentinels, s) {
		return s, nil
	}
	switch f.Type {
	case String:
		if s, ok := v.(string); ok {
			return s, nil
		}
		return nil, bad("must be a string, got %s", jsonText(v))
	case Number, Int:
		n, ok := v.(json.Number)
		if !ok {
			return nil, bad("must be a %s, got %s", f.Type, jsonText(v))
		}
		x, err := n.Float64()
		if err != nil || math.IsInf(x, 0) {
			return nil, bad("must be a finite number, got %s", n)
		}
		if f.Min != nil && x < *f.Min || f.Max != nil && x > *f.Max {
			return nil, bad("is %s, outside [%s, %s]", n, bound(f.Min, "-inf"), bound(f.Max, "+inf"))
		}
		if f.Type == Number {
			return x, nil
		}
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return nil, bad("must be an integer, got %s", n)
		}
		return int64(x), nil
	}
	return nil, bad("has unknown type %q", f.Type)
}

func bound(p *float64, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// plain turns the json.Numbers of a decoded value into float64s.
func plain(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return x.String()
		}
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = plain(e)
		}
	case []any:
		for i, e := range x {
			x[i] = plain(e)
		}
	}
	return v
}

// Classify turns one results line (as sluice writes it, or as the Message
// Batches API returns it) into a verdict under r:
//
//	succeeded, stop_reason refusal                        → refused
//	succeeded, reply parses (Rubric.Parse)                → ok
//	succeeded, max_tokens or context window, and no
//	  object or a declared field missing                  → truncated
//	succeeded, any other parse failure                    → parse_error
//	errored, sluice class transport, or error type
//	  rate_limit, overloaded, api, timeout,
//	  authentication, permission, billing, conflict       → transport
//	errored, invalid_request_error, not_found_error,
//	  request_too_large, or sluice class final or
//	  invalid_input                                       → invalid_request
//	expired, canceled, unknown, unreadable, or errored
//	  with an unknown type and no sluice class            → transport
//
// keepRaw keeps the reply text of every class; parse_error and truncated
// keep it regardless. The caller sets Groups and Rubric.
func Classify(rec api.ResultRecord, r *Rubric, keepRaw bool) Verdict {
	v := Verdict{ID: rec.CustomID}
	var res struct {
		Type    string          `json:"type"`
		Message *api.Message    `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(rec.Result, &res); err != nil {
		v.Class, v.Error = Transport, "unreadable result: "+err.Error()
		return v
	}
	metaClass := ""
	if rec.Sluice != nil {
		metaClass = rec.Sluice.Class
	}
	switch res.Type {
	case api.ResultSucceeded:
		if res.Message == nil {
			v.Class, v.Error = Transport, "a succeeded result without a message"
			return v
		}
		m := res.Message
		v.StopReason = m.StopReason
		var text strings.Builder
		for _, b := range m.Content {
			if b.Type == "text" {
				text.WriteString(b.Text)
			}
		}
		if keepRaw {
			v.Raw = text.String()
		}
		if m.StopReason == api.StopRefusal {
			v.Class, v.Error = Refused, "stop_reason refusal"
			return v
		}
		scores, sentinel, err := r.Parse(text.String())
		if err == nil {
			v.Class, v.Scores, v.Sentinel = OK, scores, sentinel
			return v
		}
		v.Raw, v.Error = text.String(), err.Error()
		var fe *FieldError
		cut := m.StopReason == api.StopMaxTokens || m.StopReason == api.StopContextLimit
		if cut && (errors.Is(err, ErrNoObject) || errors.As(err, &fe) && fe.Missing) {
			v.Class = Truncated
			return v
		}
		v.Class = ParseError
		return v
	case api.ResultErrored:
		typ, msg := errorOf(res.Error)
		v.Error = string(typ) + ": " + msg
		v.Class = errorClass(typ, metaClass)
		return v
	case api.ResultExpired, api.ResultCanceled:
		v.Class, v.Error = Transport, "batch row "+res.Type
		return v
	default:
		v.Class, v.Error = Transport, fmt.Sprintf("unknown result type %q", res.Type)
		return v
	}
}

// errorClass maps an errored row to invalid_request or transport by the
// error type's class (api.ClassOfError). Transport wins any doubt: a
// transport row is driven again, never cached; a type the docs do not list
// is invalid_request only when the result itself was final.
func errorClass(typ api.ErrorType, metaClass string) Class {
	if metaClass == api.ClassTransport {
		return Transport
	}
	if c, known := api.ClassOfError(typ); known {
		if c.Final() {
			return InvalidRequest
		}
		return Transport
	}
	if metaClass == api.ClassFinal || metaClass == api.ClassInvalidInput {
		return InvalidRequest
	}
	return Transport
}

// errorOf reads the type and message of an error, given as an error body
// ({"type":"error","error":{…}}) or as the inner object.
func errorOf(raw json.RawMessage) (api.ErrorType, string) {
	var e struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "", "unreadable error"
	}
	if e.Type == "error" && len(e.Error) > 0 {
		return errorOf(e.Error)
	}
	return api.ErrorType(e.Type), e.Message
}
