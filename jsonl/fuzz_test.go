package jsonl

import (
	"encoding/json"
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
