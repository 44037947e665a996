package batch

import (
	"errors"
	"log/slog"
	"sync"
)

// flusher writes the journal records that follow no side effect
// (harvested, dropped) on a goroutine of its own, so neither the loop nor
// the results writer (through Durable) ever waits on the journal's disk
// for them. They are not synced: a lost one costs one more download on
// resume, whose rows of done ids are skipped. Records that precede or
// record a side effect are written, and synced, by whoever does the side
// effect, before it.
type flusher struct {
	j   *journal
	log *slog.Logger

	mu   sync.Mutex
	recs []record
	kick chan struct{}
	// one serializes flushes: the goroutine's and Close's.
	one sync.Mutex
}

func newFlusher(j *journal, log *slog.Logger) *flusher {
	return &flusher{j: j, log: log, kick: make(chan struct{}, 1)}
}

// queue queues rec for the flusher's goroutine (or Close). Never waits on
// the journal.
func (f *flusher) queue(rec record) {
	f.mu.Lock()
	f.recs = append(f.recs, rec)
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// start runs the flusher's goroutine until the returned stop is called;
// stop flushes once more and waits for it to end.
func (f *flusher) start() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-f.kick:
				f.flush()
			case <-quit:
				f.flush()
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// flush writes every queued record.
func (f *flusher) flush() {
	f.one.Lock()
	defer f.one.Unlock()
	for {
		f.mu.Lock()
		recs := f.recs
		f.recs = nil
		f.mu.Unlock()
		if len(recs) == 0 {
			return
		}
		for _, rec := range recs {
			if err := f.j.append(rec, false); err != nil && !errors.Is(err, errCrash) {
				f.log.Warn("batch: journal", "err", err)
			}
		}
	}
}
