package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/store/atomicfile"
)

// Defaults of Options.
const (
	DefaultCompactEvery = 10 * time.Minute
	DefaultSyncEvery    = 30 * time.Second
	DefaultMaxEvents    = 20000
)

// Options configure a Writer.
type Options struct {
	// NoSync skips fsync (tests on a throwaway directory).
	NoSync bool
	// CompactEvery is how often the file is rewritten with the points the
	// retention keeps (default 10 minutes); SyncEvery how often appends
	// are fsynced (default 30 s).
	CompactEvery, SyncEvery time.Duration
	// MaxEvents bounds the events kept (default 20,000); later ones are
	// counted in Dropped, not written.
	MaxEvents int
	// Now reads the clock (default time.Now).
	Now func() time.Time
}

// Writer appends records to a history file and keeps it bounded: points
// are downsampled by age (Keep) at each compaction. It is safe for
// concurrent use. A write error is sticky: the history stops, the run
// does not (Err reports it).
type Writer struct {
	path string
	o    Options

	mu           sync.Mutex
	f            *os.File // nil once closed
	recs         []kept   // the records the file holds, in order
	seg          int
	events       int
	dropped      int
	lastCompact  time.Time
	lastSync     time.Time
	err          error
	compactions  int
	pointsAppend int
}

// kept is one record of the file: its kind, time, segment and line.
type kept struct {
	k   string
	t   int64
	seg int
	raw []byte // the line, newline included
}

// ErrFormat is returned by Open for a file that is not a history of this
// format.
var ErrFormat = errors.New("history: not a history file of a known version")

// Open opens the history at path (creating it), cuts a torn last line,
// and starts a new segment with run (its K, V, Seg, Cols and T are set
// here).
func Open(path string, run Run, o Options) (*Writer, error) {
	if o.CompactEvery <= 0 {
		o.CompactEvery = DefaultCompactEvery
	}
	if o.SyncEvery <= 0 {
		o.SyncEvery = DefaultSyncEvery
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Writer{path: path, o: o}
	recs, good, err := load(path)
	if err != nil {
		return nil, err
	}
	w.recs = recs
	for _, r := range recs {
		w.seg = max(w.seg, r.seg)
		if r.k == KindEvent {
			w.events++
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if err := f.Truncate(good); err != nil { // a torn last line was never whole
		f.Close()
		return nil, fmt.Errorf("history: cutting a torn last line: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("history: %w", err)
	}
	w.f = f
	now := o.Now()
	w.lastCompact, w.lastSync = now, now
	run.K, run.V, run.Seg, run.Cols = KindRun, Version, w.seg+1, Cols
	if run.T == 0 {
		run.T = Millis(now)
	}
	w.seg = run.Seg
	if err := w.Append(run); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// load reads the records of the file at path (none if it does not exist)
// and the length of its whole lines.
func load(path string) ([]kept, int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("history: %w", err)
	}
	var recs []kept
	seg := 0
	good := 0
	for good < len(b) {
		nl := bytes.IndexByte(b[good:], '\n')
		if nl < 0 {
			break // torn
		}
		line := b[good : good+nl+1]
		good += nl + 1
		var h head
		if json.Unmarshal(line, &h) != nil || h.K == "" {
			continue // a line this version does not read
		}
		if h.K == KindRun {
			var r Run
			if json.Unmarshal(line, &r) != nil || r.V != Version {
				return nil, 0, fmt.Errorf("%w: %s", ErrFormat, path)
			}
			seg = h.Seg
		}
		recs = append(recs, kept{k: h.K, t: h.T, seg: seg, raw: append([]byte(nil), line...)})
	}
	return recs, int64(good), nil
}

// Seg is the segment this writer records.
func (w *Writer) Seg() int { return w.seg }

// Append writes one record (Run, Lanes, Point, Event or Report) as a line.
// Points beyond the retention are dropped at the next compaction; events
// beyond Options.MaxEvents are counted and not written.
func (w *Writer) Append(rec any) error {
	var k string
	var t int64
	switch r := rec.(type) {
	case Run:
		r.K, k, t = KindRun, KindRun, r.T
		rec = r
	case Lanes:
		r.K, k, t = KindLanes, KindLanes, r.T
		rec = r
	case Point:
		r.K, k, t = KindPoint, KindPoint, r.T
		rec = r
	case Event:
		r.K, k, t = KindEvent, KindEvent, r.T
		rec = r
	case Report:
		r.K, k, t = KindReport, KindReport, r.T
		rec = r
	default:
		return fmt.Errorf("history: cannot record a %T", rec)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.f == nil {
		return errors.New("history: closed")
	}
	if k == KindEvent {
		if w.events >= w.o.MaxEvents {
			w.dropped++
			return nil
		}
		w.events++
	}
	if _, err := w.f.Write(line); err != nil {
		w.err = fmt.Errorf("history: writing %s: %w", w.path, err)
		return w.err
	}
	w.recs = append(w.recs, kept{k: k, t: t, seg: w.seg, raw: line})
	if k == KindPoint {
		w.pointsAppend++
	}
	now := w.o.Now()
	switch {
	case now.Sub(w.lastCompact) >= w.o.CompactEvery:
		w.compactLocked(now)
	case now.Sub(w.lastSync) >= w.o.SyncEvery:
		w.syncLocked(now)
	}
	return w.err
}

// Dropped is how many events were not written (past Options.MaxEvents).
func (w *Writer) Dropped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// Err is the sticky write error, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Lines returns the records the file holds, in order (each a line).
func (w *Writer) Lines() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([][]byte, len(w.recs))
	for i, r := range w.recs {
		out[i] = r.raw
	}
	return out
}

// PointTimes returns the times of the points the file holds, in order
// (after a compaction: the ones kept; Timeline.Retain applies them).
func (w *Writer) PointTimes() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ts []int64
	for _, r := range w.recs {
		if r.k == KindPoint {
			ts = append(ts, r.t)
		}
	}
	return ts
}

// Compactions is how many times the file was rewritten.
func (w *Writer) Compactions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.compactions
}

// Compact rewrites the file now with the points the retention keeps.
func (w *Writer) Compact() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return errors.New("history: closed")
	}
	w.compactLocked(w.o.Now())
	return w.err
}

func (w *Writer) syncLocked(now time.Time) {
	w.lastSync = now
	if w.o.NoSync {
		return
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("history: syncing %s: %w", w.path, err)
	}
}

// compactLocked rewrites the file with the records Keep retains: the
// whole file replaced at once (a kill leaves the old one or the new one),
// then reopened for appending. Requires w.mu.
func (w *Writer) compactLocked(now time.Time) {
	w.lastCompact, w.lastSync = now, now
	recs := Keep(w.recs, Millis(now))
	err := atomicfile.Write(w.path, 0o600, func(out io.Writer) error {
		bw := bufio.NewWriterSize(out, 64<<10)
		for _, r := range recs {
			bw.Write(r.raw)
		}
		return bw.Flush()
	})
	if err != nil {
		w.err = fmt.Errorf("history: compacting %s: %w", w.path, err)
		return
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		w.err = fmt.Errorf("history: %w", err)
		return
	}
	w.f.Close()
	w.f, w.recs = f, recs
	w.compactions++
}

// Close compacts the file, syncs it and closes it.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return w.err
	}
	if w.err == nil {
		w.compactLocked(w.o.Now())
	}
	if w.err == nil && !w.o.NoSync {
		if err := w.f.Sync(); err != nil {
			w.err = fmt.Errorf("history: syncing %s: %w", w.path, err)
		}
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("history: %w", err)
	}
	w.f = nil
	return w.err
}
