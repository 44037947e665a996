package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Entry is what a results file says about one custom_id.
type Entry struct {
	// ParamsHash and Class are the line's sluice.params_hash and
	// sluice.class; both are "" when the line has no sluice metadata.
	ParamsHash string
	Class      string
	// Line is the 1-based line number of the record in the file.
	Line int
}

// State is what Scan found in a results file: a snapshot, which a Writer
// does not update.
type State struct {
	// Done maps each custom_id with a record to its last record.
	Done map[string]Entry
	// Lines counts record lines, duplicates included.
	Lines int
	// Duplicates lists, once each, the custom_ids that have more than one
	// record. A correct run never writes one; Done keeps the last, and Open
	// rewrites the file without the others.
	Duplicates []string
	// Size is the length in bytes of the file's complete lines: where
	// appending resumes.
	Size int64
	// TornBytes is the length of the torn tail after Size (a last line
	// without a newline, or a newline-terminated last line that is not
	// JSON), which Open cuts off. Such a line was never reported durable.
	TornBytes int64
}

// record is the part of a results line Scan reads.
type record struct {
	CustomID *string `json:"custom_id"`
	Sluice   *struct {
		ParamsHash string `json:"params_hash"`
		Class      string `json:"class"`
	} `json:"sluice"`
}

// Scan reads the results file at path. A missing file is an empty State.
//
// Lines holding only whitespace are skipped (but counted in line numbers).
// The last line is torn, and reported in TornBytes rather than read, when it
// has no trailing newline or is not valid JSON. Any other line that is not a
// JSON object with a non-empty string custom_id is corruption: Scan returns
// an error naming the line, and the file must be repaired by hand.
func Scan(path string) (*State, error) {
	st := &State{Done: make(map[string]Entry)}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	defer f.Close()
	lr := newLineReader(f)
	for n := 1; ; n++ {
		raw, err := lr.next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return nil, fmt.Errorf("results: %w", err)
		}
		if raw[len(raw)-1] != '\n' {
			st.TornBytes = int64(len(raw))
			return st, nil
		}
		if blank(raw) {
			st.Size += int64(len(raw))
			continue
		}
		id, e, err := parse(raw)
		if err != nil {
			if !json.Valid(raw) && lr.atEOF() {
				st.TornBytes = int64(len(raw))
				return st, nil
			}
			return nil, fmt.Errorf("results: %s: line %d: %v: refusing to touch the file", path, n, err)
		}
		e.Line = n
		if _, dup := st.Done[id]; dup && !contains(st.Duplicates, id) {
			st.Duplicates = append(st.Duplicates, id)
		}
		st.Done[id] = e
		st.Lines++
		st.Size += int64(len(raw))
	}
}

// parse reads the custom_id and metadata of one results line.
func parse(raw []byte) (string, Entry, error) {
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", Entry{}, fmt.Errorf("not a result record: %w", err)
	}
	if r.CustomID == nil || *r.CustomID == "" {
		return "", Entry{}, errors.New("result record without a custom_id")
	}
	var e Entry
	if r.Sluice != nil {
		e.ParamsHash, e.Class = r.Sluice.ParamsHash, r.Sluice.Class
	}
	return *r.CustomID, e, nil
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// blank reports whether the line b holds only JSON whitespace.
func blank(b []byte) bool {
	return len(bytes.TrimLeft(b, " \t\r\n")) == 0
}

// lineReader returns the lines of a file with their newlines, any length.
type lineReader struct {
	br   *bufio.Reader
	long []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line including its newline, or the bytes before
// the end of the file; io.EOF when there are none. The slice is valid until
// the next call.
func (l *lineReader) next() ([]byte, error) {
	frag, err := l.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		l.long = append(l.long[:0], frag...)
		for errors.Is(err, bufio.ErrBufferFull) {
			frag, err = l.br.ReadSlice('\n')
			l.long = append(l.long, frag...)
		}
		frag = l.long
	}
	if err == io.EOF && len(frag) > 0 {
		err = nil
	}
	return frag, err
}

// atEOF reports whether no bytes follow the last line returned.
func (l *lineReader) atEOF() bool {
	_, err := l.br.Peek(1)
	return err == io.EOF
}
