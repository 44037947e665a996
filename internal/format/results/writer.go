package results

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Options configures a Writer. The zero value is the production setting.
type Options struct {
	// FlushInterval is the longest a record waits for its commit: a commit
	// starts at most this long after the first record queued for it.
	// Default 20ms.
	FlushInterval time.Duration
	// MaxBatch is the most records one commit holds; a full batch commits
	// at once. Default 4096.
	MaxBatch int
	// NoSync skips every fsync, of the file and its directory, in Open and
	// in the Writer. For tests only: nothing is durable.
	NoSync bool
	// OnDurable, when not nil, is called after each commit with the
	// custom_ids it made durable, in file order. Only then is a result
	// done. Calls come one at a time from the Writer's goroutine, which
	// waits for each: OnDurable must be quick and must not call Write or
	// Close. The slice is the callee's to keep.
	OnDurable func(ids []string)
}

const (
	defaultFlushInterval = 20 * time.Millisecond
	defaultMaxBatch      = 4096
	// queueLen bounds the records queued for the Writer's goroutine; when
	// the disk falls behind, Write blocks.
	queueLen = 8192
	// bufSize is the write buffer: a commit whose records fit is one write.
	bufSize = 1 << 20
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("results: writer closed")

// Writer appends records to a results file with group commit. One goroutine
// owns the file: it takes the records queued by Write, writes a batch,
// fsyncs, then reports the batch's ids to Options.OnDurable.
//
// Write is safe for concurrent use; records of one goroutine are written in
// the order it wrote them. After a write or fsync error the state of the
// file is unknown, so the Writer stops: the error is sticky (Err), Write
// returns it, and records still queued are dropped without being reported.
type Writer struct {
	f    *os.File
	opts Options
	q    chan item
	done chan struct{} // closed when run returns

	mu     sync.RWMutex // held for reading while a Write sends on q
	closed bool         // guarded by mu; q is closed once it is set

	errMu sync.Mutex
	err   error // the first write, fsync or close error

	closeOnce sync.Once
}

// item is one encoded record.
type item struct {
	id   string
	line []byte // ends in '\n'
}

func newWriter(f *os.File, opts Options) *Writer {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = defaultFlushInterval
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	w := &Writer{f: f, opts: opts, q: make(chan item, queueLen), done: make(chan struct{})}
	go w.run()
	return w
}

// Write queues rec to be appended as one line. It blocks while the queue is
// full. A nil error means queued, not durable: rec is done when OnDurable
// names it.
//
// rec.CustomID must not be empty and rec.Result must be valid JSON (nil is
// written as null). Result is written compacted, otherwise byte for byte
// (HTML characters are not escaped).
func (w *Writer) Write(rec api.ResultRecord) error {
	if rec.CustomID == "" {
		return errors.New("results: record without a custom_id")
	}
	line, err := encode(rec)
	if err != nil {
		return fmt.Errorf("results: record %q: %w", rec.CustomID, err)
	}
	if err := w.Err(); err != nil {
		return err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	w.q <- item{rec.CustomID, line}
	return nil
}

// Err returns the Writer's sticky error: the first write, fsync or close
// error, or nil.
func (w *Writer) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *Writer) setErr(err error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("results: %w", err)
	}
}

// Close commits every record queued before it, closes the file and returns
// the sticky error. Writes that race with Close either make it into the
// last commit or return ErrClosed. Calling Close again returns the same.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		close(w.q)
		w.mu.Unlock()
		<-w.done
		if err := w.f.Close(); err != nil {
			w.setErr(err)
		}
	})
	return w.Err()
}

// run is the Writer's goroutine: it owns w.f until q is closed and drained.
func (w *Writer) run() {
	defer close(w.done)
	bw := bufio.NewWriterSize(w.f, bufSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		it, ok := <-w.q
		if !ok {
			return
		}
		ids := w.add(bw, nil, it)
		timer.Reset(w.opts.FlushInterval)
	collect:
		for n := 1; n < w.opts.MaxBatch; n++ {
			select {
			case it, ok = <-w.q:
				if !ok {
					break collect
				}
				ids = w.add(bw, ids, it)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		w.commit(bw, ids)
		if !ok {
			return
		}
	}
}

// add buffers one record and returns ids with its id appended; after an
// error it drops the record.
func (w *Writer) add(bw *bufio.Writer, ids []string, it item) []string {
	if w.Err() != nil {
		return ids
	}
	if _, err := bw.Write(it.line); err != nil {
		w.setErr(err)
		return ids
	}
	return append(ids, it.id)
}

// commit writes what is buffered, fsyncs and reports ids durable.
func (w *Writer) commit(bw *bufio.Writer, ids []string) {
	if w.Err() != nil || len(ids) == 0 {
		return
	}
	if err := bw.Flush(); err != nil {
		w.setErr(err)
		return
	}
	if !w.opts.NoSync {
		if err := w.f.Sync(); err != nil {
			w.setErr(err)
			return
		}
	}
	if w.opts.OnDurable != nil {
		w.opts.OnDurable(ids)
	}
}
