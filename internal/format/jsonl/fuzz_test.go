package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// FuzzValidateLine checks that ValidateLine never panics on any input and
// that what it accepts encoding/json reads the same way.
func FuzzValidateLine(f *testing.F) {
	f.Add([]byte(req("a", params(hi, ""))))
	f.Add([]byte(req("a", params(`[{"role":"user","content":[{"type":"text","text":"x\"]}"}]}]`, `,"system":" {[\\"`))))
	f.Add([]byte(`{"custom_id":"\u0061","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"]"}]}}`))
	f.Add([]byte(`{"custom_id" : "a" , "params" : { "model" : "m" , "max_tokens" : 1 , "messages" : [ { "role" : "user" , "content" : [ { } ] } ] } }`))
	f.Fuzz(func(t *testing.T, line []byte) {
		info, err := ValidateLine(line)
		if err != nil {
			return
		}
		var r api.BatchRequest
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("accepted a line encoding/json rejects: %v", err)
		}
		if r.CustomID != info.CustomID || string(r.Params) != string(info.Params) {
			t.Fatalf("read custom_id %q, params %s; encoding/json reads %q, %s", info.CustomID, info.Params, r.CustomID, r.Params)
		}
		var m api.MessageRequest
		if err := json.Unmarshal(info.Params, &m); err != nil {
			return // encoding/json is stricter on fields ValidateLine does not check
		}
		if m.Model != info.Model || m.MaxTokens == nil || int64(*m.MaxTokens) != info.MaxTokens || len(m.Messages) == 0 {
			t.Fatalf("Info %+v disagrees with encoding/json %+v", info, m)
		}
	})
}

// FuzzValidatorCheck checks what ValidateLine and Validator say about any
// line, and that ScanFile agrees with them over a whole file. For each
// line: the result is deterministic; a failure is a LineError (Line 0 from
// ValidateLine, its number from Check) with a reason that is its Error(),
// naming the custom_id only when it is valid; an accepted line's custom_id
// is what encoding/json reads; Info.Params is a copy the caller's buffer does not reach, hashed
// as ParamsHash says; an accepted line is not streamed, asks for at least
// one token and is estimated at least 11 input tokens. Check agrees with
// ValidateLine except for duplicates, which name the first line carrying
// the id; CheckShared agrees with Check. Over the file (the fuzzed bytes,
// and the same lines behind a byte order mark with CRLF endings),
// ScanFile's Summary and errors are those of a Validator fed the
// non-blank lines by hand.
func FuzzValidatorCheck(f *testing.F) {
	ok := req("a", params(hi, ""))
	f.Add([]byte(ok + "\n" + ok + "\n"))
	f.Add([]byte(ok + "\n\n  \t\r\n" + req("b", params(hi, `,"system":[{"type":"text","text":"sys"}]`))))
	f.Add([]byte(req("a", `{"model":"m"}`) + "\n" + ok))
	f.Add([]byte(req("a", params(hi, `,"stream":true`)) + "\n" + `{"custom_id":"a","custom_id":"b","params":{}}`))
	f.Add([]byte(req(strings.Repeat("x", 65), params(hi, "")) + "\n" + req("é", params(hi, ""))))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"m","max_tokens":9223372036854775808,"messages":[{"role":"user","content":"x"}]}}`))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"m","max_tokens":1e3,"messages":[{"role":"user","content":"x"}]}}`))
	f.Add([]byte("\xEF\xBB\xBF" + ok + "\r\n\xff\n"))
	f.Add([]byte(`{"CUSTOM_ID":"a","params":{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}}`))
	f.Add([]byte(` {"params":{"model":"m\u00e9","max_tokens":5000000000,"messages":[{"role":"user","content":"x"}]} , "custom_id":"\u0061b"}` + "\n" + ok))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"m","max_tokens":1,"max_tokens":2,"model":"n","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}}`))
	f.Add([]byte(`{"custom_id":"a\u0000","params":{}}` + "\n" + `[]` + "\n" + `null` + "\n" + `"x"`))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":1,"temp\u0065rature":0.5,"messages":[{"role":"user","content":"x"}]}}`))
	f.Add([]byte(`{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":1,"temperature":null,"messages":[{"role":"user","content":"x"}]}}`))
	dir := f.TempDir()
	seq := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		var v, shared Validator
		var wantErrs []LineError
		lines := bytes.SplitAfter(data, []byte{'\n'})
		firstSeen := map[string]int{}
		for i, raw := range lines {
			n := i + 1
			l := bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte{'\n'}), []byte{'\r'})
			if n == 1 {
				l = bytes.TrimPrefix(l, []byte("\xEF\xBB\xBF"))
			}
			if len(bytes.Trim(l, " \t\r")) == 0 {
				continue
			}
			info, err := checkLine(t, l)
			vinfo, verr := v.Check(n, bytes.Clone(l))
			sinfo, serr := shared.CheckShared(n, l)
			if !reflect.DeepEqual(vinfo, info) || !reflect.DeepEqual(sinfo, info) || !reflect.DeepEqual(verr, serr) {
				t.Fatalf("line %d: Check %+v, %v; CheckShared %+v, %v; ValidateLine %+v, %v", n, vinfo, verr, sinfo, serr, info, err)
			}
			if verr != nil {
				le, isLE := errors.AsType[LineError](verr)
				if !isLE || le.Line != n || le.Reason == "" {
					t.Fatalf("line %d: Check error %#v", n, verr)
				}
				wantErrs = append(wantErrs, le)
			}
			id := info.CustomID
			first, dup := firstSeen[id]
			if id != "" && !dup {
				firstSeen[id] = n
			}
			le, _ := errors.AsType[LineError](verr)
			switch {
			case id != "" && dup:
				want := fmt.Sprintf("duplicate custom_id %q, first on line %d", id, first)
				if verr == nil || !le.Duplicate || le.CustomID != id || !strings.HasPrefix(le.Reason, want) {
					t.Fatalf("line %d reuses %q of line %d: Check error %#v", n, id, first, verr)
				}
			case err == nil:
				if verr != nil {
					t.Fatalf("line %d: ValidateLine accepts it, Check says %v", n, verr)
				}
			default:
				vle, _ := errors.AsType[LineError](err)
				if verr == nil || le.Duplicate || le.Reason != vle.Reason || le.CustomID != vle.CustomID {
					t.Fatalf("line %d: ValidateLine says %v, Check %#v", n, err, verr)
				}
			}
		}
		sum := v.Summary()
		if sum.Valid+sum.Invalid != sum.Lines || sum.Invalid != len(wantErrs) {
			t.Fatalf("Summary %+v with %d invalid lines", sum, len(wantErrs))
		}
		models := 0
		for _, c := range sum.Models {
			models += c
		}
		if models != sum.Valid {
			t.Fatalf("Summary %+v: models count %d valid lines", sum, models)
		}
		// ScanFile reads the same file to the same verdicts, and the
		// same lines behind a byte order mark with CRLF endings too.
		crlf := bytes.ReplaceAll(data, []byte{'\n'}, []byte("\r\n"))
		for _, content := range [][]byte{data, append([]byte("\xEF\xBB\xBF"), crlf...)} {
			if bytes.HasPrefix(data, []byte("\xEF\xBB\xBF")) && len(content) != len(data) {
				continue // two byte order marks: only the first is dropped
			}
			if bytes.Contains(data, []byte("\r\r")) || bytes.Contains(data, []byte("\r\n")) && len(content) != len(data) {
				continue // CRLF over CR would strip one CR more
			}
			seq++
			path := filepath.Join(dir, fmt.Sprintf("in-%d.jsonl", seq))
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			got, errs, err := ScanFile(path, -1)
			os.Remove(path)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, sum) || !reflect.DeepEqual(errs, wantErrs) && (len(errs) > 0 || len(wantErrs) > 0) {
				t.Fatalf("ScanFile of %q: %+v, %v\nValidator: %+v, %v", content, got, errs, sum, wantErrs)
			}
		}
	})
}

// checkLine checks ValidateLine on one line and returns its result.
func checkLine(t *testing.T, line []byte) (Info, error) {
	t.Helper()
	buf := bytes.Clone(line)
	info, err := ValidateLine(buf)
	again, err2 := ValidateLine(line)
	if !reflect.DeepEqual(info, again) || !reflect.DeepEqual(err, err2) {
		t.Fatalf("ValidateLine(%q) is not deterministic: %+v, %v then %+v, %v", line, info, err, again, err2)
	}
	for i := range buf {
		buf[i] = 'x' // the caller reuses its buffer
	}
	if !reflect.DeepEqual(info, again) {
		t.Fatalf("ValidateLine(%q): Info changes with the caller's buffer: %+v", line, info)
	}
	if info.CustomID != "" && !api.ValidCustomID(info.CustomID) {
		t.Fatalf("ValidateLine(%q) names the invalid custom_id %q", line, info.CustomID)
	}
	if err != nil {
		le, ok := errors.AsType[LineError](err)
		if !ok || le.Line != 0 || le.Reason == "" || le.Error() != le.Reason || le.Duplicate || le.CustomID != info.CustomID {
			t.Fatalf("ValidateLine(%q) error %#v, Info %+v", line, err, info)
		}
		return info, err
	}
	var top struct {
		CustomID string `json:"custom_id"`
	}
	if err := json.Unmarshal(line, &top); err != nil || top.CustomID != info.CustomID {
		t.Fatalf("ValidateLine(%q) reads custom_id %q, encoding/json %q (%v)", line, info.CustomID, top.CustomID, err)
	}
	if info.Stream || info.MaxTokens < 1 || info.EstInputTokens < 11 || info.Model == "" ||
		info.ParamsHash != ParamsHash(info.Params) || !json.Valid(info.Params) {
		t.Fatalf("ValidateLine(%q) accepts it as %+v", line, info)
	}
	return info, nil
}

// FuzzCheckCompat: what a version and model refuse does not depend on how
// the body is spelled: a body and the same body re-encoded (escapes
// decoded, keys in Go's order) get the same verdict on the same field
// under every rule set.
func FuzzCheckCompat(f *testing.F) {
	f.Add([]byte(`{"temp\u0065rature":0.5,"messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"temperature":null,"messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"docum\u0065nt"}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a","cit\u0061tions":[{}]}]}]}`))
	f.Add([]byte(`{"top_k":1,"top_p":1,"temperature":1,"messages":[]}`))
	rules := []api.Rules{
		api.Current().Rules(api.Version20261021, "claude-sonnet-4-5"),
		api.Current().Rules(api.Version20230601, "claude-sonnet-5"),
		api.Current().Rules(api.Version20230601, "claude-sonnet-4-5"),
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // CheckCompat reads bodies validation accepted
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		canon, err := json.Marshal(v)
		if err != nil {
			return
		}
		for _, r := range rules {
			// The same verdict on the same field (the message quotes the
			// value as written).
			field := func(s string) string { f, _, _ := strings.Cut(s, ":"); return f }
			if a, b := CheckCompat(body, r), CheckCompat(canon, r); (a == "") != (b == "") || field(a) != field(b) {
				t.Fatalf("%+v:\n%s → %q\n%s → %q", r, body, a, canon, b)
			}
		}
	})
}
