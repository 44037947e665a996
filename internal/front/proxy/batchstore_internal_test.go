package proxy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRequestsFileRoundTrip: rows written to a requests file come back
// from fileRows as the same JSON values, each on its own line — params
// with newlines, escapes and <&> included — and only the rows asked for;
// a file that is not the batch's is refused.
func TestRequestsFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.requests.jsonl")
	ids := []string{"a", "b-2", "c_3", "d"}
	rows := []json.RawMessage{
		json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"x"}]}`),
		json.RawMessage("{\n  \"model\": \"m\",\n  \"messages\": [ {\"role\":\"user\",\"content\":\"line\\nbreak \\\"q\\\" <b>&amp;</b> \\u00e9\"} ]\n}"),
		json.RawMessage(`{"model":"m","max_tokens":5}`),
		json.RawMessage(`{"model":"m","stream":true}`),
	}
	if err := writeRequests(path, ids, rows); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if n := bytes.Count(raw, []byte("\n")); n != len(ids) {
		t.Fatalf("%d lines for %d rows:\n%s", n, len(ids), raw)
	}
	if err := checkRequests(path, ids); err != nil {
		t.Fatal(err)
	}
	fr := fileRows{path: path, ids: ids}
	var got []int
	taken, err := fr.each([]int{1, 3}, func(i int, params json.RawMessage) bool {
		got = append(got, i)
		var want, have any
		json.Unmarshal(rows[i], &want)
		if err := json.Unmarshal(params, &have); err != nil {
			t.Fatalf("row %d: %v: %s", i, err, params)
		}
		if a, b := mustJSON(want), mustJSON(have); a != b {
			t.Errorf("row %d: %s, want %s", i, b, a)
		}
		return true
	})
	if err != nil || taken != 2 || len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("each: taken %d, rows %v, err %v", taken, got, err)
	}
	if taken, err := fr.each([]int{0, 1, 2}, func(i int, _ json.RawMessage) bool { return i < 1 }); err != nil || taken != 1 {
		t.Errorf("a stop at row 1: taken %d, err %v; want 1", taken, err)
	}
	if err := checkRequests(path, []string{"a", "b-2", "c_3"}); err == nil {
		t.Error("a file with a row more than the batch was accepted")
	}
	if err := checkRequests(path, []string{"a", "x", "c_3", "d"}); err == nil {
		t.Error("a file of other custom_ids was accepted")
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
