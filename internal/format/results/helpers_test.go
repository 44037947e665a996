package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// resultJSON is a typical succeeded result, about 450 bytes.
const resultJSON = `{"type":"succeeded","message":{"id":"msg_01","type":"message","role":"assistant",` +
	`"model":"claude-haiku-4-5","content":[{"type":"text","text":"The answer is 42. It follows from the question, ` +
	`as the question was posed; a longer answer would add nothing a reader needs."}],"stop_reason":"end_turn",` +
	`"stop_sequence":null,"usage":{"input_tokens":120,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,` +
	`"output_tokens":31,"service_tier":"standard"}}}`

// rec returns a record for id with the given class and params hash.
func rec(id, class, hash string) api.ResultRecord {
	return api.ResultRecord{
		CustomID: id,
		Result:   json.RawMessage(resultJSON),
		Sluice:   &api.RunMeta{ParamsHash: hash, Class: class, Route: "sync", Attempts: 1, LatencyMs: 812},
	}
}

// line returns rec(id, class, hash) as a results line.
func line(id, class, hash string) string {
	b, err := encode(rec(id, class, hash))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func tempPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "results.jsonl")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recorder collects what OnDurable reports.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
}

func (r *recorder) onDurable(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, ids)
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []string
	for _, b := range r.batches {
		all = append(all, b...)
	}
	return all
}

// fileIDs reads the results file at path and returns the custom_id of each
// line, failing unless every line is a complete record.
func fileIDs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", path)
	}
	var ids []string
	for i, l := range bytes.SplitAfter(data, []byte{'\n'}) {
		if len(l) == 0 {
			continue
		}
		var r api.ResultRecord
		if err := json.Unmarshal(l, &r); err != nil || r.CustomID == "" || r.Sluice == nil {
			t.Fatalf("line %d is not a complete record (%v): %q", i+1, err, l)
		}
		ids = append(ids, r.CustomID)
	}
	return ids
}

// writeAll opens path, writes records id-0 … id-(n-1) of class ok and
// closes it.
func writeAll(t *testing.T, path string, n int) {
	t.Helper()
	w, err := Open(path, nil, nil, Options{NoSync: true, FlushInterval: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Write(rec(fmt.Sprintf("id-%d", i), api.ClassOK, "h")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func sortedKeys(m map[string]Entry) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
