package proxy

// What a virtual batch keeps on disk (with a state dir), per batch:
//
//	<id>.json            the batch object, its custom_ids and route (atomic rewrite)
//	<id>.requests.jsonl  its requests as created, while it runs (so a restart can finish it)
//	<id>.results.jsonl   result lines: in completion order while it runs, rewritten
//	                     in request order when it ends
//	<id>.batch-journal   the batch path's journal, while the batch part runs
//
// A running batch holds its results file open (rowStore); an ended one
// holds no file: results are streamed from the file when asked for.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/internal/atomicfile"
)

// rowStore keeps one result line per row of a running batch.
type rowStore interface {
	put(i int, line []byte) error
	get(i int) ([]byte, bool)
	close()
}

// memStore keeps lines in memory (no state dir).
type memStore struct{ lines [][]byte }

func (m *memStore) put(i int, line []byte) error { m.lines[i] = line; return nil }
func (m *memStore) get(i int) ([]byte, bool)     { return m.lines[i], m.lines[i] != nil }
func (m *memStore) close()                       {}

// fileStore appends lines to a file and reads them back by offset. A line
// the file refused (a disk error) is kept in memory instead, so results
// still have one line per row; only a restart loses it.
type fileStore struct {
	f      *os.File
	end    int64
	off    []int64 // per row, -1 without a line
	size   []int32
	failed map[int][]byte
}

// newFileStore creates (truncating) the results file of a batch of n rows.
func newFileStore(path string, n int) (*fileStore, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	fs := &fileStore{f: f, off: make([]int64, n), size: make([]int32, n)}
	for i := range fs.off {
		fs.off[i] = -1
	}
	return fs, nil
}

// openFileStore opens (creating) the results file at path and indexes the
// lines already in it by custom_id (a torn last line is cut).
func openFileStore(path string, ids []string) (*fileStore, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	fs := &fileStore{f: f, off: make([]int64, len(ids)), size: make([]int32, len(ids))}
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		fs.off[i] = -1
		index[id] = i
	}
	rd := bufio.NewReaderSize(f, 64<<10)
	var pos int64
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil { // EOF: a line without its newline was torn
			break
		}
		var l struct {
			CustomID string `json:"custom_id"`
		}
		if json.Unmarshal(line, &l) == nil {
			if i, ok := index[l.CustomID]; ok {
				fs.off[i], fs.size[i] = pos, int32(len(line)-1)
			}
		}
		pos += int64(len(line))
	}
	if err := f.Truncate(pos); err != nil {
		f.Close()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	fs.end = pos
	return fs, nil
}

func (s *fileStore) put(i int, line []byte) error {
	if s.f == nil {
		return errors.New("proxy: results file closed")
	}
	buf := append(bytes.Clone(line), '\n')
	if _, err := s.f.WriteAt(buf, s.end); err != nil {
		if s.failed == nil {
			s.failed = map[int][]byte{}
		}
		s.failed[i] = buf[:len(line)]
		return fmt.Errorf("proxy: %w", err)
	}
	s.off[i], s.size[i] = s.end, int32(len(line))
	s.end += int64(len(buf))
	return nil
}

func (s *fileStore) get(i int) ([]byte, bool) {
	if line, ok := s.failed[i]; ok {
		return line, true
	}
	if s.f == nil || s.off[i] < 0 {
		return nil, false
	}
	buf := make([]byte, s.size[i])
	if _, err := s.f.ReadAt(buf, s.off[i]); err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	return buf, true
}

func (s *fileStore) close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// writeOrdered writes the n lines of st to path in request order,
// atomically and synced: the results file of an ended batch.
func writeOrdered(path string, st rowStore, n int) error {
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		for i := range n {
			line, ok := st.get(i)
			if !ok {
				return fmt.Errorf("no result line for row %d", i)
			}
			if _, err := w.Write(append(line[:len(line):len(line)], '\n')); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// requestLine is one line of a batch's requests file: the API's own
// request object.
type requestLine struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

// writeRequests writes a batch's requests to path, atomically and synced,
// so that a restart can finish the batch.
func writeRequests(path string, ids []string, rows []json.RawMessage) error {
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		for i, id := range ids {
			line, _ := json.Marshal(requestLine{CustomID: id, Params: rows[i]})
			if _, err := w.Write(append(line, '\n')); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// readRequests reads the requests file at path back, checking it holds
// exactly ids in order.
func readRequests(path string, ids []string) ([]json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows := make([]json.RawMessage, 0, len(ids))
	rd := bufio.NewReaderSize(f, 256<<10)
	for {
		line, err := rd.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var l requestLine
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return nil, fmt.Errorf("proxy: %s: %w", path, jerr)
			}
			if len(rows) >= len(ids) || l.CustomID != ids[len(rows)] {
				return nil, fmt.Errorf("proxy: %s does not match the batch's custom_ids", path)
			}
			rows = append(rows, l.Params)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	if len(rows) != len(ids) {
		return nil, fmt.Errorf("proxy: %s holds %d of the batch's %d requests", path, len(rows), len(ids))
	}
	return rows, nil
}
