package jsonl

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

type numbered struct {
	n    int
	line string
}

func readAll(t *testing.T, r *Reader) []numbered {
	t.Helper()
	var out []numbered
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next() error %v", err)
		}
		out = append(out, numbered{n, string(line)})
	}
}

func TestReaderLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []numbered
	}{
		{"empty stream", "", nil},
		{"one line with newline", "a\n", []numbered{{1, "a"}}},
		{"last line without newline", "a\nb", []numbered{{1, "a"}, {2, "b"}}},
		{"crlf trimmed", "a\r\nb\r\n", []numbered{{1, "a"}, {2, "b"}}},
		{"blank lines skipped but counted", "\na\n\n \t\r\nb\n\n", []numbered{{2, "a"}, {5, "b"}}},
		{"only blank lines", "\n\n  \n", nil},
		{"byte order mark on line 1 dropped", "\xEF\xBB\xBFa\nb\n", []numbered{{1, "a"}, {2, "b"}}},
		{"byte order mark alone is blank", "\xEF\xBB\xBF\nb", []numbered{{2, "b"}}},
		{"inner spaces kept", " a b \n", []numbered{{1, " a b "}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readAll(t, NewReader(strings.NewReader(tt.in)))
			if !equalLines(got, tt.want) {
				t.Errorf("lines = %+v want %+v", got, tt.want)
			}
		})
	}
}

func equalLines(a, b []numbered) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReaderEOFIsSticky(t *testing.T) {
	r := NewReader(strings.NewReader("a"))
	readAll(t, r)
	for range 2 {
		if _, _, err := r.Next(); err != io.EOF {
			t.Fatalf("Next() after end = %v want io.EOF", err)
		}
	}
}

func TestReaderOffset(t *testing.T) {
	r := NewReader(strings.NewReader("ab\n\ncd\r\nef"))
	for _, want := range []int64{3, 8, 10} {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		if got := r.Offset(); got != want {
			t.Errorf("Offset() = %d want %d", got, want)
		}
	}
}

// failingReader yields data, then err.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(&failingReader{data: []byte("a\npartial"), err: boom})
	if line, n, err := r.Next(); err != nil || string(line) != "a" || n != 1 {
		t.Fatalf("Next() = %q, %d, %v want \"a\", 1, nil", line, n, err)
	}
	for range 2 {
		line, n, err := r.Next()
		if !errors.Is(err, boom) || line != nil || n != 2 {
			t.Fatalf("Next() = %q, %d, %v want nil, 2, boom (partial line never returned)", line, n, err)
		}
	}
}

// TestReaderLongLines reads lines far longer than the read buffer,
// including one of 40 MB, and checks them byte for byte.
func TestReaderLongLines(t *testing.T) {
	sizes := []int{64<<10 - 1, 64 << 10, 64<<10 + 1, 1 << 20, 40 << 20}
	var parts []io.Reader
	for i, n := range sizes {
		parts = append(parts, bytes.NewReader(bytes.Repeat([]byte{byte('a' + i)}, n)), strings.NewReader("\r\nx\n"))
	}
	r := NewReader(io.MultiReader(parts...))
	for i, size := range sizes {
		line, n, err := r.Next()
		if err != nil || n != 2*i+1 || len(line) != size {
			t.Fatalf("line %d: Next() = %d bytes, line %d, %v want %d bytes", 2*i+1, len(line), n, err, size)
		}
		if c := byte('a' + i); line[0] != c || line[size-1] != c || bytes.Count(line, []byte{c}) != size {
			t.Fatalf("line %d: content corrupted", n)
		}
		if line, _, err := r.Next(); err != nil || string(line) != "x" {
			t.Fatalf("short line after a long one = %q, %v", line, err)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next() at end = %v want io.EOF", err)
	}
}
