package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// fuzzRows returns the results lines FuzzScan starts from: n%7 records of
// ids r0…r3 (so five or more repeat one), classes and hashes varying;
// with n&0x80 the first is over the 64 KiB line buffer.
func fuzzRows(n uint8) []string {
	classes := []string{api.ClassOK, api.ClassTransport, api.ClassFinal}
	rows := make([]string, int(n&0x7f)%7)
	for i := range rows {
		hash := "h" + strconv.Itoa(i)
		if i == 0 && n&0x80 != 0 {
			hash = strings.Repeat("h", 70<<10)
		}
		rows[i] = line(fmt.Sprintf("r%d", i%4), classes[i%3], hash)
	}
	return rows
}

// fuzzRecord is what a results line says, read by encoding/json alone.
type fuzzRecord struct {
	CustomID *string `json:"custom_id"`
	Sluice   *struct {
		ParamsHash string `json:"params_hash"`
		Class      string `json:"class"`
	} `json:"sluice"`
}

var scanLineRE = regexp.MustCompile(`^results: .*: line ([0-9]+): .+: refusing to touch the file$`)

// FuzzScan writes a results file — whole records cut at a fuzzed byte,
// followed by fuzzed bytes (a torn or corrupt tail, or more lines) — and
// scans it. It checks:
//
//   - Size+TornBytes is the file's length, Size ends a line, and the torn
//     tail is one line, without a newline or not JSON;
//   - every id in Done is the custom_id of its Line, a complete record
//     inside Size whose sluice metadata is the Entry's, and no later line
//     has it; every record line inside Size is in Done; Lines counts them
//     and Duplicates lists, once each, the ids with more than one;
//   - a file of whole records cut anywhere, with any tail that has no
//     newline (zeroes, half a line, nothing), scans without error to
//     exactly the records before the cut;
//   - an error names a line that is newline-terminated, not blank and no
//     record, and not a torn last line; the file up to that line scans
//     cleanly;
//   - Open repairs the file to what its State says: a rescan after Open
//     and Close shows no torn tail, no duplicates and the same ids.
func FuzzScan(f *testing.F) {
	f.Add(uint8(3), uint16(0xffff), []byte(nil))
	f.Add(uint8(3), uint16(700), []byte(nil))
	f.Add(uint8(2), uint16(0xffff), []byte("\x00\x00\x00\x00"))
	f.Add(uint8(6), uint16(0xffff), []byte(`{"custom_id":"r1","result":{}}`+"\n"))
	f.Add(uint8(1), uint16(0xffff), []byte("{\"custom_id\":\"x\"\n"))
	f.Add(uint8(1), uint16(300), []byte("\n{\"custom_id\":\"y\"}\n"))
	f.Add(uint8(2), uint16(0xffff), []byte("[1,2]\n"))
	f.Add(uint8(2), uint16(0xffff), []byte("\r\n  \n\t"))
	f.Add(uint8(0), uint16(0), []byte("{\"custom_id\":\"\xff\xfe\"}\n"))
	f.Add(uint8(0x82), uint16(0xffff), []byte(nil))
	f.Add(uint8(0x82), uint16(40000), []byte("\n"))
	f.Add(uint8(5), uint16(0xffff), []byte(`{"custom_id":"a","sluice":{"class":7}}`+"\n"))
	f.Add(uint8(1), uint16(0xffff), []byte(`{"custom_id":"9223372036854775808","sluice":null,"result":1e400}`+"\n"))
	dir := f.TempDir()
	seq := 0
	f.Fuzz(func(t *testing.T, n uint8, cut uint16, tail []byte) {
		rows := fuzzRows(n)
		prefix := strings.Join(rows, "")
		c := min(int(cut), len(prefix))
		if n&0x80 != 0 && int(cut) < len(prefix) {
			c = int(cut) * 2 // reach into the long line
			c = min(c, len(prefix))
		}
		content := append([]byte(prefix[:c]), tail...)
		seq++
		path := filepath.Join(dir, fmt.Sprintf("results-%d.jsonl", seq))
		defer os.Remove(path)
		defer os.Remove(path + ".tmp")
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := Scan(path)

		// Whole records cut anywhere, then a tail without a newline.
		if !bytes.Contains(tail, []byte{'\n'}) {
			if err != nil {
				t.Fatalf("Scan of records cut at %d + %q: %v", c, tail, err)
			}
			want := map[string]Entry{}
			size := 0
			for i, r := range rows {
				if size+len(r) > c {
					break
				}
				size += len(r)
				var rec api.ResultRecord
				if err := json.Unmarshal([]byte(r), &rec); err != nil {
					t.Fatal(err)
				}
				want[rec.CustomID] = Entry{ParamsHash: rec.Sluice.ParamsHash, Class: rec.Sluice.Class, Line: i + 1}
			}
			if !reflect.DeepEqual(st.Done, want) || st.Size != int64(size) || st.TornBytes != int64(len(content)-size) {
				t.Fatalf("Scan of records cut at %d + %q: Done %v, Size %d, Torn %d want %v, %d, %d",
					c, tail, st.Done, st.Size, st.TornBytes, want, size, len(content)-size)
			}
		}

		if err != nil {
			checkScanError(t, dir, content, err)
			return
		}
		checkState(t, content, st)

		// Open repairs the file to what st says.
		ids := sortedKeys(st.Done)
		w, err := Open(path, st, nil, Options{NoSync: true, FlushInterval: 1})
		if err != nil {
			t.Fatalf("Open after a clean Scan: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		after, err := Scan(path)
		if err != nil {
			t.Fatalf("Scan after Open: %v", err)
		}
		if after.TornBytes != 0 || len(after.Duplicates) != 0 || !slices.Equal(sortedKeys(after.Done), ids) ||
			after.Size != st.Size || after.Lines != st.Lines {
			t.Fatalf("after Open the file scans as %+v, Open said %+v", after, st)
		}
		for id, e := range after.Done {
			if st.Done[id] != e {
				t.Fatalf("after Open %q is %+v, Open said %+v", id, e, st.Done[id])
			}
		}
	})
}

// checkState checks a clean Scan of content against the file itself.
func checkState(t *testing.T, content []byte, st *State) {
	t.Helper()
	if st.Size < 0 || st.TornBytes < 0 || st.Size+st.TornBytes != int64(len(content)) {
		t.Fatalf("Size %d + TornBytes %d != file length %d", st.Size, st.TornBytes, len(content))
	}
	if st.Size > 0 && content[st.Size-1] != '\n' {
		t.Fatalf("Size %d does not end a line", st.Size)
	}
	if torn := content[st.Size:]; len(torn) > 0 {
		if i := bytes.IndexByte(torn, '\n'); i >= 0 && i != len(torn)-1 {
			t.Fatalf("torn tail %q is more than one line", torn)
		}
		if torn[len(torn)-1] == '\n' && json.Valid(torn) {
			t.Fatalf("torn tail %q is a whole line of JSON", torn)
		}
	}
	lines := bytes.SplitAfter(content[:st.Size], []byte{'\n'})
	count := map[string]int{}
	last := map[string]int{} // id → its last line
	records := 0
	for i, l := range lines {
		if len(bytes.TrimLeft(l, " \t\r\n")) == 0 {
			continue
		}
		var r fuzzRecord
		if err := json.Unmarshal(l, &r); err != nil || r.CustomID == nil || *r.CustomID == "" {
			t.Fatalf("line %d inside Size is no record (%v): %q", i+1, err, l)
		}
		records++
		count[*r.CustomID]++
		last[*r.CustomID] = i + 1
	}
	if st.Lines != records || len(st.Done) != len(count) {
		t.Fatalf("Lines %d, %d ids done; the file has %d records of %d ids", st.Lines, len(st.Done), records, len(count))
	}
	for id, e := range st.Done {
		if e.Line < 1 || e.Line > len(lines) || last[id] != e.Line {
			t.Fatalf("%q done on line %d; its last record is on line %d", id, e.Line, last[id])
		}
		l := lines[e.Line-1]
		var r fuzzRecord
		if l[len(l)-1] != '\n' || json.Unmarshal(l, &r) != nil || *r.CustomID != id {
			t.Fatalf("%q done on line %d, which is %q", id, e.Line, l)
		}
		var want Entry
		if r.Sluice != nil {
			want = Entry{ParamsHash: r.Sluice.ParamsHash, Class: r.Sluice.Class}
		}
		want.Line = e.Line
		if e != want {
			t.Fatalf("%q: Entry %+v, line %d says %+v", id, e, e.Line, want)
		}
	}
	var dups []string
	for id, k := range count {
		if k > 1 {
			dups = append(dups, id)
		}
	}
	got := slices.Clone(st.Duplicates)
	slices.Sort(got)
	slices.Sort(dups)
	if !slices.Equal(got, dups) {
		t.Fatalf("Duplicates %q want %q (once each)", st.Duplicates, dups)
	}
}

// checkScanError checks the error of Scan over content.
func checkScanError(t *testing.T, dir string, content []byte, err error) {
	t.Helper()
	m := scanLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("Scan error %q does not name a line", err)
	}
	n, _ := strconv.Atoi(m[1])
	lines := bytes.SplitAfter(content, []byte{'\n'})
	if n < 1 || n > len(lines) {
		t.Fatalf("Scan error names line %d of %d", n, len(lines))
	}
	l := lines[n-1]
	var r fuzzRecord
	switch {
	case len(l) == 0 || l[len(l)-1] != '\n':
		t.Fatalf("Scan error names line %d, the torn last line %q", n, l)
	case len(bytes.TrimLeft(l, " \t\r\n")) == 0:
		t.Fatalf("Scan error names line %d, a blank line", n)
	case json.Unmarshal(l, &r) == nil && r.CustomID != nil && *r.CustomID != "":
		t.Fatalf("Scan error names line %d, a record: %q", n, l)
	case !json.Valid(l) && n == len(lines)-1 && len(lines[n]) == 0:
		t.Fatalf("Scan error names line %d, a last line that is not JSON: it is torn", n)
	}
	before := bytes.Join(lines[:n-1], nil)
	path := filepath.Join(dir, "before.jsonl")
	defer os.Remove(path)
	if err := os.WriteFile(path, before, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Scan(path)
	if err != nil || st.Size != int64(len(before)) || st.TornBytes != 0 {
		t.Fatalf("the %d bytes before the corrupt line %d scan as %+v, %v", len(before), n, st, err)
	}
}
