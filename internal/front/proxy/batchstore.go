package proxy

// What a virtual batch keeps on disk (with a state dir), per batch:
//
//	<id>.json            the batch object, its custom_ids (while it runs) and route
//	                     (atomicfile: fsync, rename, directory fsync)
//	<id>.requests.jsonl  its requests as created, while it runs (so a restart can
//	                     finish it); read back row by row as they are sent (rowSource)
//	<id>.results.jsonl   result lines: in completion order while it runs, each
//	                     group fsynced before its rows count; rewritten in request
//	                     order when it ends
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

	"github.com/sluice-dev/sluice/internal/format/rawjson"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
)

// rowStore keeps one result line per row of a running batch. A line put
// is durable only after sync.
type rowStore interface {
	put(i int, line []byte) error
	sync() error
	get(i int) ([]byte, bool)
	close()
}

// memStore keeps lines in memory (no state dir).
type memStore struct{ lines [][]byte }

func (m *memStore) put(i int, line []byte) error { m.lines[i] = line; return nil }
func (m *memStore) sync() error                  { return nil }
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

// sync makes every line put so far durable.
func (s *fileStore) sync() error {
	if s.f == nil {
		return errors.New("proxy: results file closed")
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
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

// writeRequests writes a batch's requests to path, atomically and synced,
// so that a restart can finish the batch.
//
// A line is the API's own request object, {"custom_id":…,"params":…},
// on one line: custom_ids are checked at create ([a-zA-Z0-9_-], nothing
// to escape) and params are valid JSON, compacted onto the line by
// json.Compact (which, unlike json.Marshal, keeps <, > and & as they were
// sent).
func writeRequests(path string, ids []string, rows []json.RawMessage) error {
	var line bytes.Buffer
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		for i, id := range ids {
			line.Reset()
			line.WriteString(`{"custom_id":"`)
			line.WriteString(id)
			line.WriteString(`","params":`)
			if err := json.Compact(&line, rows[i]); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
			line.WriteString("}\n")
			if _, err := w.Write(line.Bytes()); err != nil {
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

// rowSource gives a running batch's requests to its driver, in request
// order: from its requests file (with a state dir), read as they are
// sent, so a batch never holds its prompts in memory; or from memory.
type rowSource interface {
	// each calls f with each row of want (ascending row numbers) and its
	// params, until f returns false (that row not taken). It returns how
	// many rows f took; the rest (want[taken:]) were not handed out,
	// because f stopped or, with err, the requests could not be read.
	each(want []int, f func(i int, params json.RawMessage) bool) (taken int, err error)
}

// memRows are a batch's requests in memory (no state dir).
type memRows []json.RawMessage

func (m memRows) each(want []int, f func(int, json.RawMessage) bool) (int, error) {
	for k, i := range want {
		if !f(i, m[i]) {
			return k, nil
		}
	}
	return len(want), nil
}

// fileRows are a batch's requests in its requests file, whose lines must
// be the batch's custom_ids in order. Each params handed out is a
// sub-slice of its own line (one allocation a row).
type fileRows struct {
	path string
	ids  []string
}

func (fr fileRows) each(want []int, f func(int, json.RawMessage) bool) (int, error) {
	if len(want) == 0 {
		return 0, nil
	}
	file, err := os.Open(fr.path)
	if err != nil {
		return 0, fmt.Errorf("proxy: %w", err)
	}
	defer file.Close()
	rd := bufio.NewReaderSize(file, 256<<10)
	k := 0
	for row := 0; k < len(want); row++ {
		if row != want[k] {
			if err := skipLine(rd); err != nil {
				return k, fmt.Errorf("proxy: %s: row %d: %w", fr.path, row, err)
			}
			continue
		}
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return k, fmt.Errorf("proxy: %s: row %d: %w", fr.path, row, err)
		}
		id, params, ok := requestOf(line)
		if !ok || row >= len(fr.ids) || id != fr.ids[row] {
			return k, fmt.Errorf("proxy: %s: row %d is not the batch's request %d", fr.path, row, row)
		}
		if !f(row, params) {
			return k, nil
		}
		k++
	}
	return k, nil
}

// skipLine reads past the next newline without keeping the line.
func skipLine(rd *bufio.Reader) error {
	for {
		_, err := rd.ReadSlice('\n')
		if err != bufio.ErrBufferFull {
			return err
		}
	}
}

// requestOf reads one line of a requests file: its custom_id and params
// (a sub-slice of line).
func requestOf(line []byte) (id string, params json.RawMessage, ok bool) {
	line = bytes.TrimRight(line, "\n")
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return "", nil, false
	}
	var buf [4]rawjson.Member
	ms := rawjson.AppendMembers(buf[:0], line)
	rawID, params := rawjson.Lookup(ms, "custom_id"), rawjson.Lookup(ms, "params")
	if len(rawID) == 0 || rawID[0] != '"' || len(params) == 0 || params[0] != '{' {
		return "", nil, false
	}
	return rawjson.String(rawID), params, true
}

// checkRequests checks that the requests file at path holds exactly ids,
// in order, reading it through without keeping it.
func checkRequests(path string, ids []string) error {
	all := make([]int, len(ids))
	for i := range all {
		all[i] = i
	}
	n, err := fileRows{path: path, ids: ids}.each(all, func(int, json.RawMessage) bool { return true })
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := bufio.NewReader(f)
	lines := 0
	for skipLine(rd) == nil {
		lines++
	}
	if n != len(ids) || lines != len(ids) {
		return fmt.Errorf("proxy: %s holds %d lines for the batch's %d requests", path, lines, len(ids))
	}
	return nil
}
