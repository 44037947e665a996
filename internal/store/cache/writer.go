package cache

import (
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// Entry is one answer queued on a Writer: the request's params (the key is
// computed by the Writer, off the caller's path), the extra key parts, and
// the Messages response body.
type Entry struct {
	Params  []byte
	Extra   []string
	Message []byte
	Meta    Meta
}

// Writer stores answers in the background: one goroutine takes whatever
// has queued and commits it in one transaction (one fsync for many rows),
// so the engine's result path never waits for the disk. Non-answers are
// refused as by Put and counted in RefusedPuts; they never reach the file.
//
// Use it when answers arrive faster than one commit per answer would keep
// up with (a run writes thousands a second); Put is for one-off stores.
type Writer struct {
	c     *Cache
	queue chan Entry
	done  chan struct{}

	mu  sync.Mutex
	err error // the first commit error; later entries are dropped

	stored, refused atomic.Int64
}

// Stored counts the rows this Writer committed; Refused the non-answers it
// turned away.
func (w *Writer) Stored() int64  { return w.stored.Load() }
func (w *Writer) Refused() int64 { return w.refused.Load() }

// maxRowsPerCommit bounds a transaction, so one commit never holds
// megabytes of dirty pages.
const maxRowsPerCommit = 2048

// NewWriter starts a Writer on c. A nil, Off or read-only c gives a Writer
// that drops everything (a read-only cache is used for lookups only).
// Close it to flush.
func (c *Cache) NewWriter() *Writer {
	w := &Writer{c: c, queue: make(chan Entry, 4096), done: make(chan struct{})}
	go w.loop()
	return w
}

// Add queues e. It blocks only while the queue is full (the disk is behind),
// which is the back-pressure a run needs. Safe for concurrent use; not
// after Close.
func (w *Writer) Add(e Entry) { w.queue <- e }

// Close stores everything queued and returns the first error a commit
// met (rows after it were not stored: a cache miss costs a call, never a
// wrong answer).
func (w *Writer) Close() error {
	close(w.queue)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) loop() {
	defer close(w.done)
	writable := w.c != nil && w.c.db != nil && w.c.mode == On
	var rows []preparedRow
	for e := range w.queue {
		if !writable {
			continue
		}
		rows = append(rows[:0], w.prepare(e)...)
	drain:
		for len(rows) < maxRowsPerCommit {
			select {
			case e, ok := <-w.queue:
				if !ok {
					break drain
				}
				rows = append(rows, w.prepare(e)...)
			default:
				break drain
			}
		}
		w.commit(rows)
	}
}

type preparedRow struct {
	key Key
	row []byte
}

// prepare checks and encodes e; nothing for a non-answer or a request
// whose key cannot be computed.
func (w *Writer) prepare(e Entry) []preparedRow {
	if err := Check(e.Message); err != nil {
		w.c.refused.Add(1)
		w.refused.Add(1)
		return nil
	}
	k, err := KeyOf(e.Params, e.Extra...)
	if err != nil {
		w.c.refused.Add(1)
		w.refused.Add(1)
		return nil
	}
	return []preparedRow{{k, encodeRow(e.Message, e.Meta)}}
}

func (w *Writer) commit(rows []preparedRow) {
	if len(rows) == 0 {
		return
	}
	w.mu.Lock()
	failed := w.err != nil
	w.mu.Unlock()
	if failed {
		return
	}
	err := w.c.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRows)
		for _, r := range rows {
			if err := b.Put(r.key[:], r.row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		return
	}
	w.c.puts.Add(int64(len(rows)))
	w.stored.Add(int64(len(rows)))
}
