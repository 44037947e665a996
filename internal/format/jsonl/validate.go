package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/format/rawjson"
)

// Info describes one valid input line.
type Info struct {
	CustomID string
	// Params is a copy of the line's params, byte for byte: what is sent.
	Params json.RawMessage
	Model  string
	// MaxTokens is params.max_tokens.
	MaxTokens int64
	// ParamsHash is ParamsHash(Params).
	ParamsHash string
	// EstInputTokens is a cheap local estimate of the input tokens, made
	// without a tokenizer:
	//
	//	ceil(C/4) + 4·len(messages) + 7
	//
	// where C is the sum of len() (bytes of UTF-8) of params.system when it
	// is a string, of the text of its "text" blocks when it is an array, and
	// of each message's content when it is a string, or of the text of its
	// "text" blocks when it is an array. Images, documents, tools, tool_use
	// and tool_result blocks are not counted, so it undercounts such
	// requests; count_tokens gives the exact figure.
	EstInputTokens int64
	// Stream is params.stream. ValidateLine rejects true, so it is false
	// whenever the error is nil.
	Stream bool
}

// LineError is why one input line is invalid. Line is its 1-based number in
// the file (0 when ValidateLine was called without one); CustomID is the
// line's custom_id when it could be read and is valid, else "".
type LineError struct {
	Line     int
	CustomID string
	Reason   string
	// Duplicate is set by Validator when the only fault is a custom_id
	// already used on an earlier line: that id has a request already.
	Duplicate bool
}

// Error returns "line N: reason", or the reason alone when Line is 0. The
// caller adds the file name.
func (e LineError) Error() string {
	if e.Line == 0 {
		return e.Reason
	}
	return "line " + strconv.Itoa(e.Line) + ": " + e.Reason
}

// ValidateLine checks one input line and describes it. The rules:
//
//   - the line is valid UTF-8 and a JSON object with exactly the keys custom_id and params,
//     each once;
//   - custom_id is a string matching ^[a-zA-Z0-9_-]{1,64}$;
//   - params is an object of at most api.MaxMessagesBytes bytes, as written;
//   - params.model is a non-empty string;
//   - params.max_tokens is an integer ≥ 1;
//   - params.messages is a non-empty array of objects whose role is "user"
//     or "assistant" and whose content is a string or a non-empty array of
//     objects (content blocks);
//   - params.system, when present, is a string or an array of objects;
//   - params.stream, when present, is false: results are written in the
//     non-streaming format.
//
// A null value counts as absent. Keys inside params are matched exactly
// (case-sensitively), and when one repeats the last wins. Other fields of
// params are not checked; the API checks them.
//
// On failure the error is a LineError with Line 0, and the returned Info
// holds whatever was read before the failing rule. Info.Params is a copy: the
// caller may reuse line.
func ValidateLine(line []byte) (Info, error) {
	return validate(line, true)
}

// validate is ValidateLine; copyParams false leaves Info.Params aliasing
// line.
func validate(line []byte, copyParams bool) (Info, error) {
	var info Info
	fail := func(format string, args ...any) (Info, error) {
		return info, LineError{CustomID: info.CustomID, Reason: fmt.Sprintf(format, args...)}
	}
	if !json.Valid(line) {
		return fail("%s", syntaxReason(line))
	}
	if !utf8.Valid(line) {
		return fail("invalid UTF-8 at byte %d", invalidUTF8(line))
	}
	line = bytes.TrimSpace(line)
	if line[0] != '{' {
		return fail("a line must be a JSON object, got %s", kindName(line))
	}
	var topBuf [8]rawjson.Member // on the stack (rawjson.AppendMembers)
	top := rawjson.AppendMembers(topBuf[:0], line)
	idRaw := rawjson.Lookup(top, "custom_id")
	if idRaw != nil && idRaw[0] == '"' {
		if id := rawjson.String(idRaw); api.ValidCustomID(id) {
			info.CustomID = id
		}
	}
	// Each key once, and none but these two. They are matched in place;
	// only a line with another key, which fails anyway, pays for a map of
	// decoded keys (docs/overhead.md, item 10).
	var haveID, haveParams bool
	var others map[string]bool
	var unknown []string
	for _, m := range top {
		var dup bool
		switch {
		case m.Is("custom_id"):
			dup, haveID = haveID, true
		case m.Is("params"):
			dup, haveParams = haveParams, true
		default:
			k := m.Key()
			if others == nil {
				others = map[string]bool{}
			}
			dup, others[k] = others[k], true
			if !dup {
				unknown = append(unknown, strconv.Quote(k))
			}
		}
		if dup {
			return fail("key %q appears twice", m.Key())
		}
	}
	if len(unknown) > 0 {
		return fail("unknown key %s: a line has only custom_id and params", strings.Join(unknown, ", "))
	}
	switch {
	case idRaw == nil:
		return fail("custom_id is required")
	case idRaw[0] != '"':
		return fail("custom_id must be a string, got %s", show(idRaw))
	case info.CustomID == "":
		return fail("custom_id %s does not match ^[a-zA-Z0-9_-]{1,64}$", show(idRaw))
	}

	params := rawjson.Lookup(top, "params")
	switch {
	case params == nil:
		return fail("params is required")
	case params[0] != '{':
		return fail("params must be a JSON object, got %s", kindName(params))
	case len(params) > api.MaxMessagesBytes:
		return fail("params is %d bytes, over the %d-byte limit of a Messages request", len(params), api.MaxMessagesBytes)
	}
	if reason := readParams(params, &info, false); reason != "" {
		return fail("%s", reason)
	}
	info.ParamsHash = validParamsHash(params) // a member of the valid line
	info.Params = params
	if copyParams {
		info.Params = bytes.Clone(params)
	}
	return info, nil
}

// readParams applies the params rules of ValidateLine to params (an object)
// and fills info's Model, MaxTokens, Stream and EstInputTokens; the
// returned reason is "" when they hold. allowStream lifts the rule that
// stream is false.
func readParams(params []byte, info *Info, allowStream bool) (reason string) {
	fail := func(format string, args ...any) string { return fmt.Sprintf(format, args...) }
	// Each object and array read into an array on the stack
	// (rawjson.AppendMembers), reused from one message to the next.
	var pmBuf, mmBuf [16]rawjson.Member
	var elBuf, blockBuf [16][]byte
	pm := rawjson.AppendMembers(pmBuf[:0], params)

	model := rawjson.Lookup(pm, "model")
	if model == nil {
		return fail("params.model is required")
	}
	if model[0] != '"' || len(model) == 2 {
		return fail("params.model must be a non-empty string, got %s", show(model))
	}
	info.Model = rawjson.String(model)

	maxTok := rawjson.Lookup(pm, "max_tokens")
	if maxTok == nil {
		return fail("params.max_tokens is required")
	}
	n, err := strconv.ParseInt(string(maxTok), 10, 64)
	if err != nil || n < 1 {
		return fail("params.max_tokens must be an integer ≥ 1, got %s", show(maxTok))
	}
	info.MaxTokens = n

	if s := rawjson.Lookup(pm, "stream"); s != nil {
		switch s[0] {
		case 't':
			info.Stream = true
			if !allowStream {
				return fail("params.stream is true: sluice writes results in the non-streaming format; remove it or set it to false")
			}
		case 'f':
		default:
			return fail("params.stream must be a boolean, got %s", show(s))
		}
	}

	chars := 0
	if sys := rawjson.Lookup(pm, "system"); sys != nil {
		switch sys[0] {
		case '"':
			chars += rawjson.StringLen(sys)
		case '[':
			for i, b := range rawjson.AppendElements(blockBuf[:0], sys) {
				if b[0] != '{' {
					return fail("params.system[%d] must be a content block object, got %s", i, kindName(b))
				}
				chars += textLen(b)
			}
		default:
			return fail("params.system must be a string or an array of content blocks, got %s", kindName(sys))
		}
	}

	msgs := rawjson.Lookup(pm, "messages")
	if msgs == nil {
		return fail("params.messages is required")
	}
	if msgs[0] != '[' {
		return fail("params.messages must be a non-empty array, got %s", kindName(msgs))
	}
	list := rawjson.AppendElements(elBuf[:0], msgs)
	if len(list) == 0 {
		return fail("params.messages must be a non-empty array, got []")
	}
	for i, m := range list {
		if m[0] != '{' {
			return fail("params.messages[%d] must be an object, got %s", i, kindName(m))
		}
		mm := rawjson.AppendMembers(mmBuf[:0], m)
		role := rawjson.Lookup(mm, "role")
		switch {
		case role == nil:
			return fail("params.messages[%d].role is required", i)
		case bytes.Equal(role, []byte(`"user"`)), bytes.Equal(role, []byte(`"assistant"`)):
		case bytes.Equal(role, []byte(`"system"`)):
			return fail(`params.messages[%d].role is "system": the Messages API takes a system prompt in the top-level params.system field`, i)
		default:
			return fail(`params.messages[%d].role must be "user" or "assistant", got %s`, i, show(role))
		}
		content := rawjson.Lookup(mm, "content")
		if content == nil {
			return fail("params.messages[%d].content is required", i)
		}
		switch content[0] {
		case '"':
			chars += rawjson.StringLen(content)
		case '[':
			blocks := rawjson.AppendElements(blockBuf[:0], content)
			if len(blocks) == 0 {
				return fail("params.messages[%d].content must be a string or a non-empty array, got []", i)
			}
			for j, b := range blocks {
				if b[0] != '{' {
					return fail("params.messages[%d].content[%d] must be a content block object, got %s", i, j, kindName(b))
				}
				chars += textLen(b)
			}
		default:
			return fail("params.messages[%d].content must be a string or a non-empty array, got %s", i, kindName(content))
		}
	}
	info.EstInputTokens = int64((chars+3)/4 + 4*len(list) + 7)
	return ""
}

// DescribeParams reads a Messages request body as ValidateLine reads a
// line's params, except that stream may be true: the proxy learns the
// model, max_tokens, stream and the input estimate of what it forwards in
// one validation pass and one walk, and both paths estimate input alike.
// The body is not copied (Info.Params aliases it) and ParamsHash is not
// computed. On failure the error says which rule failed and Info holds
// what was read before it, with EstInputTokens from the body's size
// (len/4 + 7) when the rules broke before the estimate: the API answers
// such a body with its own 400, and the request still needs a budget.
func DescribeParams(body []byte) (Info, error) {
	info, err := describeParams(body)
	if err != nil && info.EstInputTokens == 0 {
		info.EstInputTokens = int64(len(body)/4 + 7)
	}
	return info, err
}

func describeParams(body []byte) (Info, error) {
	var info Info
	if !json.Valid(body) {
		return info, LineError{Reason: syntaxReason(body)}
	}
	body = bytes.TrimSpace(body)
	if body[0] != '{' {
		return info, LineError{Reason: "a Messages request must be a JSON object, got " + kindName(body)}
	}
	info.Params = body
	if reason := readParams(body, &info, true); reason != "" {
		return info, LineError{Reason: reason}
	}
	return info, nil
}

// textLen returns the length of the text of block when it is a text block
// with a string text, else 0.
func textLen(block []byte) int {
	var bmBuf [8]rawjson.Member
	bm := rawjson.AppendMembers(bmBuf[:0], block)
	if !bytes.Equal(rawjson.Lookup(bm, "type"), []byte(`"text"`)) {
		return 0
	}
	if t := rawjson.Lookup(bm, "text"); t != nil && t[0] == '"' {
		return rawjson.StringLen(t)
	}
	return 0
}

// syntaxReason explains why line is not valid JSON.
func syntaxReason(line []byte) string {
	if len(bytes.TrimSpace(line)) == 0 {
		return "empty line"
	}
	var v struct{}
	err := json.Unmarshal(line, &v)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return fmt.Sprintf("invalid JSON: %v", err)
}

// invalidUTF8 returns the offset of the first invalid UTF-8 sequence in b.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// kindName names the JSON type of the value b.
func kindName(b []byte) string {
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		if len(bytes.TrimSpace(b[1:])) == 1 {
			return "[]"
		}
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// show returns the JSON value b for an error message, cut to 40 bytes.
func show(b []byte) string {
	const limit = 40
	if len(b) <= limit {
		return string(b)
	}
	n := limit
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}
