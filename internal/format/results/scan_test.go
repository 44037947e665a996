package results

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

func TestScanMissingFile(t *testing.T) {
	st, err := Scan(filepath.Join(t.TempDir(), "none.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Done == nil || len(st.Done) != 0 || st.Lines != 0 || st.Size != 0 || st.TornBytes != 0 {
		t.Errorf("Scan(missing) = %+v want an empty State with a Done map", st)
	}
}

func TestScan(t *testing.T) {
	a := line("a", api.ClassOK, "ha")
	b := line("b", api.ClassTransport, "hb")
	c := line("c", api.ClassFinal, "hc")
	half := b[:len(b)/2]
	tests := []struct {
		name    string
		content string
		done    map[string]Entry
		dups    []string
		size    int
		torn    int
		err     string // substring of the error; "" means none
	}{
		{name: "empty file", content: "", done: map[string]Entry{}},
		{name: "records", content: a + b,
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}, "b": {"hb", api.ClassTransport, 2}}, size: len(a + b)},
		{name: "blank lines skipped but counted", content: "\n" + a + "  \n" + c,
			done: map[string]Entry{"a": {"ha", api.ClassOK, 2}, "c": {"hc", api.ClassFinal, 4}}, size: len(a+c) + 4},
		{name: "record without sluice metadata", content: `{"custom_id":"x","result":{"type":"expired"}}` + "\n",
			done: map[string]Entry{"x": {"", "", 1}}, size: 46},
		{name: "crlf line", content: strings.TrimSuffix(a, "\n") + "\r\n",
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a) + 1},
		{name: "duplicates keep the last", content: a + b + line("a", api.ClassFinal, "ha2") + line("a", api.ClassOK, "ha3"),
			done: map[string]Entry{"a": {"ha3", api.ClassOK, 4}, "b": {"hb", api.ClassTransport, 2}}, dups: []string{"a"},
			size: len(a+b) + len(line("a", api.ClassFinal, "ha2")) + len(line("a", api.ClassOK, "ha3"))},

		{name: "torn: half a line", content: a + half,
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a), torn: len(half)},
		{name: "torn: whole record without its newline", content: a + strings.TrimSuffix(b, "\n"),
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a), torn: len(b) - 1},
		{name: "torn: only line", content: half, done: map[string]Entry{}, torn: len(half)},
		{name: "torn: invalid JSON with a newline", content: a + half + "\n",
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a), torn: len(half) + 1},
		{name: "torn: zeroed tail", content: a + "\x00\x00\x00\x00",
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a), torn: 4},
		{name: "torn: blank tail without newline", content: a + "  ",
			done: map[string]Entry{"a": {"ha", api.ClassOK, 1}}, size: len(a), torn: 2},

		{name: "corrupt middle line", content: a + half + "\n" + c, err: "line 2: not a result record"},
		{name: "record without custom_id", content: a + `{"result":{}}` + "\n" + c, err: "line 2: result record without a custom_id"},
		{name: "empty custom_id", content: `{"custom_id":"","result":{}}` + "\n", err: "line 1: result record without a custom_id"},
		{name: "valid JSON last line that is no record", content: a + "[1,2]\n", err: "line 2: not a result record"},
		{name: "sluice of the wrong type", content: `{"custom_id":"a","sluice":"x"}` + "\n", err: "line 1: not a result record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tempPath(t)
			writeFile(t, path, tt.content)
			st, err := Scan(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "results: ") {
					t.Fatalf("Scan() error %v want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan() error %v", err)
			}
			if len(st.Done) != len(tt.done) {
				t.Errorf("Done = %v want %v", st.Done, tt.done)
			}
			for id, want := range tt.done {
				if got, ok := st.Done[id]; !ok || got != want {
					t.Errorf("Done[%q] = %+v, %v want %+v", id, got, ok, want)
				}
			}
			lines := len(tt.done) + 2*len(tt.dups) // each duplicate here appears three times
			if st.Lines != lines {
				t.Errorf("Lines = %d want %d", st.Lines, lines)
			}
			if strings.Join(st.Duplicates, ",") != strings.Join(tt.dups, ",") {
				t.Errorf("Duplicates = %v want %v", st.Duplicates, tt.dups)
			}
			if st.Size != int64(tt.size) || st.TornBytes != int64(tt.torn) {
				t.Errorf("Size, TornBytes = %d, %d want %d, %d", st.Size, st.TornBytes, tt.size, tt.torn)
			}
		})
	}
}

// TestScanLongLine reads a record far longer than the read buffer.
func TestScanLongLine(t *testing.T) {
	path := tempPath(t)
	long := `{"custom_id":"big","result":{"type":"succeeded","pad":"` + strings.Repeat("x", 3<<20) + `"}}` + "\n"
	writeFile(t, path, long+line("a", api.ClassOK, "h"))
	st, err := Scan(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Done["big"].Line != 1 || st.Done["a"].Line != 2 || st.TornBytes != 0 {
		t.Errorf("Scan() = %+v", st)
	}
}
