package results

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

func TestOpenCreates(t *testing.T) {
	path := tempPath(t)
	w, err := Open(path, nil, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("Open did not create the file: %v", err)
	}
	if fi.Size() != 0 || fi.Mode().Perm()&^0o644 != 0 {
		t.Errorf("new file: size %d, mode %v want 0, at most 0644", fi.Size(), fi.Mode())
	}
}

func TestOpenRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) (path string, st *State)
		err   string
	}{
		{"missing directory", func(t *testing.T) (string, *State) {
			return filepath.Join(t.TempDir(), "no", "results.jsonl"), nil
		}, "no such file or directory"},
		{"file grew since Scan", func(t *testing.T) (string, *State) {
			path := tempPath(t)
			writeFile(t, path, line("a", api.ClassOK, "h"))
			st, err := Scan(path)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, line("a", api.ClassOK, "h")+line("b", api.ClassOK, "h"))
			return path, st
		}, "changed since"},
		{"file appeared since Scan", func(t *testing.T) (string, *State) {
			path := tempPath(t)
			st, err := Scan(path)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, line("a", api.ClassOK, "h"))
			return path, st
		}, "changed since"},
		{"corrupt file", func(t *testing.T) (string, *State) {
			path := tempPath(t)
			writeFile(t, path, "garbage\n"+line("a", api.ClassOK, "h"))
			return path, nil
		}, "line 1: not a result record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, st := tt.setup(t)
			w, err := Open(path, st, nil, Options{NoSync: true})
			if err == nil {
				w.Close()
				t.Fatalf("Open() succeeded want an error containing %q", tt.err)
			}
			if !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "results: ") {
				t.Errorf("Open() error %q want it to contain %q", err, tt.err)
			}
		})
	}
}

// TestOpenRewrite drops ids the caller selects and duplicate records, then
// appends after the kept lines.
func TestOpenRewrite(t *testing.T) {
	path := tempPath(t)
	writeFile(t, path, line("ok1", api.ClassOK, "h1")+
		line("tr", api.ClassTransport, "h2")+
		line("dup", api.ClassTransport, "h3")+
		line("changed", api.ClassOK, "old")+
		"\n"+
		line("fin", api.ClassFinal, "h5")+
		line("dup", api.ClassOK, "h3")+
		`{"custom_id":"torn","res`)
	st, err := Scan(path)
	if err != nil {
		t.Fatal(err)
	}
	newHash := map[string]string{"changed": "new"}
	var asked []string
	drop := func(id string, e Entry) bool {
		asked = append(asked, id)
		h, ok := newHash[id]
		return e.Class == api.ClassTransport || ok && h != e.ParamsHash
	}
	w, err := Open(path, st, drop, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 5 {
		t.Errorf("drop called for %v want each of the 5 done ids once", asked)
	}
	if err := w.Write(rec("tr", api.ClassOK, "h2")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	if got, want := strings.Join(fileIDs(t, path), " "), "ok1 fin dup tr"; got != want {
		t.Errorf("file ids = %q want %q", got, want)
	}
	want := map[string]Entry{"ok1": {"h1", api.ClassOK, 1}, "fin": {"h5", api.ClassFinal, 2}, "dup": {"h3", api.ClassOK, 3}}
	if len(st.Done) != len(want) {
		t.Errorf("st.Done ids = %v want %v", sortedKeys(st.Done), sortedKeys(want))
	}
	for id, e := range want {
		if st.Done[id] != e {
			t.Errorf("st.Done[%q] = %+v want %+v", id, st.Done[id], e)
		}
	}
	if st.Lines != 3 || st.TornBytes != 0 || st.Duplicates != nil {
		t.Errorf("st = Lines %d, TornBytes %d, Duplicates %v want 3, 0, nil", st.Lines, st.TornBytes, st.Duplicates)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp left behind: %v", path, err)
	}
	again, err := Scan(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.Done["tr"].Line != 4 || again.Done["dup"] != want["dup"] || again.Size-st.Size != int64(len(line("tr", api.ClassOK, "h2"))) {
		t.Errorf("Scan after Open = %+v, st after Open = %+v: they disagree", again, st)
	}
}

// TestOpenNothingToDrop leaves the file alone: no rewrite when drop selects
// nothing and there are no duplicates.
func TestOpenNothingToDrop(t *testing.T) {
	path := tempPath(t)
	writeAll(t, path, 3)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(path, nil, func(string, Entry) bool { return false }, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("Open rewrote the file though nothing was dropped")
	}
}

// TestCrashRepair simulates crashes: the file is cut at every kind of place
// inside its last line, or garbage is appended, and Scan+Open must keep
// every complete record, cut the rest, and append cleanly after it.
func TestCrashRepair(t *testing.T) {
	const n = 20
	clean := tempPath(t)
	writeAll(t, clean, n)
	data, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	lastStart := strings.LastIndexByte(string(data[:len(data)-1]), '\n') + 1
	rng := rand.New(rand.NewPCG(1, 2))

	type crash struct {
		name string
		file string
		keep int // complete records that must survive
	}
	crashes := []crash{
		{"clean", string(data), n},
		{"newline lost", string(data[:len(data)-1]), n - 1},
		{"one byte of the last line", string(data[:lastStart+1]), n - 1},
		{"garbage appended", string(data) + `{"custom_id":"id-99","resu`, n},
		{"zeros appended", string(data) + strings.Repeat("\x00", 4096), n},
		{"garbage line with newline appended", string(data) + "\x00\x00}\n", n},
	}
	for range 20 {
		cut := lastStart + 1 + rng.IntN(len(data)-lastStart-1)
		crashes = append(crashes, crash{fmt.Sprintf("cut at byte %d", cut), string(data[:cut]), n - 1})
	}
	for _, c := range crashes {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			writeFile(t, path, c.file)
			st, err := Scan(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Done) != c.keep || st.Size+st.TornBytes != int64(len(c.file)) {
				t.Fatalf("Scan() = %d done, Size %d + TornBytes %d want %d done, %d bytes", len(st.Done), st.Size, st.TornBytes, c.keep, len(c.file))
			}
			w, err := Open(path, st, nil, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			for i := c.keep; i < n; i++ { // drive again what was lost
				if err := w.Write(rec(fmt.Sprintf("id-%d", i), api.ClassOK, "h")); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			ids := fileIDs(t, path)
			if len(ids) != n {
				t.Fatalf("after repair the file has %d records want %d", len(ids), n)
			}
			for i, id := range ids {
				if id != fmt.Sprintf("id-%d", i) {
					t.Fatalf("record %d is %q want id-%d", i+1, id, i)
				}
			}
			again, err := Scan(path)
			if err != nil || again.TornBytes != 0 || len(again.Duplicates) != 0 || len(again.Done) != n {
				t.Fatalf("Scan after repair = %+v, %v", again, err)
			}
		})
	}
}
