package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The journal is the batch path's write-ahead log: one JSON record per line,
// appended, never rewritten except to cut a torn last line. Every record
// that precedes a side effect (an intent before create, a cancel intent
// before cancel) is fsynced before the side effect happens. docs/batch.md
// lists the records and what a resume does with each state.

// Journal record operations.
const (
	opRun       = "run"       // a Runner opened the journal
	opIntent    = "intent"    // a chunk is about to be created (fsynced before create)
	opCreated   = "created"   // create returned (or a list found) the chunk's batch id
	opCancel    = "cancel"    // sluice is about to cancel the batch (fsynced before cancel)
	opCanceled  = "canceled"  // the cancel was accepted (or the batch had already ended)
	opHarvested = "harvested" // every row handed over is durable; the chunk is closed
	opAbandoned = "abandoned" // the chunk will not be harvested; its requests went elsewhere
	opDropped   = "dropped"   // no request of the chunk is wanted any more; closed
)

// journalVersion is written in every run record.
const journalVersion = 1

// record is one journal line. Fields unused by an op are omitted.
type record struct {
	Op    string    `json:"op"`
	V     int       `json:"v,omitempty"`
	Chunk string    `json:"chunk,omitempty"`
	At    time.Time `json:"at"`
	// intent
	Org      string   `json:"org,omitempty"` // organization id
	OrgLabel string   `json:"org_label,omitempty"`
	N        int      `json:"n,omitempty"`
	Bytes    int64    `json:"bytes,omitempty"`
	Hash     string   `json:"hash,omitempty"`
	IDs      []string `json:"ids,omitempty"`
	Params   []string `json:"params,omitempty"` // params hash per id
	Wire     string   `json:"wire,omitempty"`   // wire-id prefix of the chunk's custom_ids
	// Plain lists the indices (into IDs) of requests whose added
	// prompt-cache breakpoint was taken off before the create (seed.go),
	// so a resumed run records them as sent as written.
	Plain []int `json:"plain,omitempty"`
	// created, cancel
	Batch     string     `json:"batch,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Adopted   bool       `json:"adopted,omitempty"`
	// cancel, abandoned, dropped
	Why string `json:"why,omitempty"`
}

// entry is what the journal says about one chunk.
type entry struct {
	intent    record
	batch     string
	created   time.Time // local time the id was recorded
	expires   time.Time
	adopted   bool // the batch was found in a list, not created by sluice
	cancelAt  time.Time
	canceled  bool
	closed    bool
	closedWhy string
}

// journal appends records to the journal file. It is safe for concurrent
// use.
type journal struct {
	path   string
	noSync bool

	mu     sync.Mutex
	f      *os.File // nil after close
	err    error    // sticky: the first write or sync error
	frozen bool     // tests: a simulated crash; nothing more is written
	// hook, when set (tests), runs before each write, with the journal
	// locked: a slow disk.
	hook func(record)
	// notify, when set, is told each record written, with the journal
	// locked (Config.Events: events.go).
	notify func(record)
}

// ErrJournal wraps every journal failure. After one, the Runner stops: a
// side effect that could not be recorded must not happen.
var ErrJournal = errors.New("batch: journal")

// openJournal reads the journal at path (a missing file is empty), cuts a
// torn last line, and returns it ready for appending with every chunk it
// names, in first-intent order.
func openJournal(path string, noSync bool) (*journal, []string, map[string]*entry, error) {
	if path == "" {
		return nil, nil, nil, fmt.Errorf("%w: Config.Journal is required", ErrJournal)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	order, chunks, good, err := replay(f, path)
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	if st, err := f.Stat(); err == nil && st.Size() > good {
		// A torn last line was never fsynced whole: its side effect never
		// happened (an intent) or is recovered another way (a created
		// record: the list reconciliation).
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, nil, nil, fmt.Errorf("%w: cutting a torn last line: %v", ErrJournal, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	j := &journal{path: path, noSync: noSync, f: f}
	if created && !noSync {
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return j, order, chunks, nil
}

// HasJournal reports whether the journal at path leaves chunks open: batches
// that may be running or unharvested on the API, whose requests must go to
// a Runner (see Runner.Holds) and nowhere else, or they may be paid twice.
// A missing file is no journal. It only reads: a torn last line is ignored,
// not cut. A corrupt journal is an error wrapping ErrJournal.
//
// A run routed to sync uses it to decide whether to open a Runner anyway
// (with Config.HarvestOnly).
func HasJournal(path string) (open bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrJournal, err)
	}
	defer f.Close()
	_, chunks, _, err := replay(f, path)
	if err != nil {
		return false, err
	}
	for _, e := range chunks {
		if !e.closed {
			return true, nil
		}
	}
	return false, nil
}

// replay reads every record and returns the chunks and the length of the
// complete, valid lines. Only the last line may be torn; a bad line before
// it is corruption.
func replay(f *os.File, path string) ([]string, map[string]*entry, int64, error) {
	chunks := map[string]*entry{}
	var order []string
	br := bufio.NewReaderSize(f, 64<<10)
	var off int64
	var pendingErr error
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return nil, nil, 0, fmt.Errorf("%w: reading %s: %v", ErrJournal, path, err)
		}
		if pendingErr != nil {
			// A bad line followed by more lines: not a torn tail.
			return nil, nil, 0, pendingErr
		}
		if err == io.EOF {
			break // no newline: a torn last line
		}
		if len(bytes.TrimSpace(b)) == 0 {
			off += int64(len(b))
			continue
		}
		var r record
		if jerr := json.Unmarshal(b, &r); jerr != nil {
			pendingErr = fmt.Errorf("%w: %s line %d is not a record: %v", ErrJournal, path, line, jerr)
			continue
		}
		if aerr := apply(chunks, &order, r); aerr != nil {
			return nil, nil, 0, fmt.Errorf("%w: %s line %d: %v", ErrJournal, path, line, aerr)
		}
		off += int64(len(b))
	}
	return order, chunks, off, nil
}

// apply folds one record into the chunk states.
func apply(chunks map[string]*entry, order *[]string, r record) error {
	if r.Op == opRun {
		if r.V > journalVersion {
			return fmt.Errorf("journal version %d is newer than this sluice (%d)", r.V, journalVersion)
		}
		return nil
	}
	if r.Chunk == "" {
		return fmt.Errorf("%q record without a chunk", r.Op)
	}
	e := chunks[r.Chunk]
	if r.Op == opIntent {
		if len(r.IDs) != r.N || len(r.Params) != r.N || r.N == 0 {
			return fmt.Errorf("intent of chunk %s: %d ids, %d params hashes, n = %d", r.Chunk, len(r.IDs), len(r.Params), r.N)
		}
		if h := chunkHash(r.IDs, r.Params); h != r.Hash {
			return fmt.Errorf("intent of chunk %s: hash %s does not match its ids (%s)", r.Chunk, r.Hash, h)
		}
		if e == nil {
			e = &entry{}
			chunks[r.Chunk] = e
			*order = append(*order, r.Chunk)
		}
		e.intent = r
		return nil
	}
	if e == nil {
		return fmt.Errorf("%q record for chunk %s before its intent", r.Op, r.Chunk)
	}
	switch r.Op {
	case opCreated:
		e.batch, e.created, e.adopted = r.Batch, r.At, r.Adopted
		if r.ExpiresAt != nil {
			e.expires = *r.ExpiresAt
		}
	case opCancel:
		e.cancelAt = r.At
	case opCanceled:
		e.canceled = true
	case opHarvested, opAbandoned, opDropped:
		e.closed, e.closedWhy = true, r.Op
	default:
		return fmt.Errorf("unknown op %q", r.Op)
	}
	return nil
}

// append writes r as one line; with sync it is fsynced before append
// returns. After the first failure every append fails.
func (j *journal) append(r record, sync bool) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrJournal, err)
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.frozen {
		return errCrash
	}
	if j.err != nil {
		return j.err
	}
	if j.f == nil {
		return fmt.Errorf("%w: closed", ErrJournal)
	}
	if j.hook != nil {
		j.hook(r)
	}
	if _, err := j.f.Write(b); err != nil {
		j.err = fmt.Errorf("%w: writing %s: %v", ErrJournal, j.path, err)
		return j.err
	}
	if sync && !j.noSync {
		if err := j.f.Sync(); err != nil {
			j.err = fmt.Errorf("%w: syncing %s: %v", ErrJournal, j.path, err)
			return j.err
		}
	}
	if j.notify != nil {
		j.notify(r)
	}
	return nil
}

// freeze makes every later append fail, as if the process had died.
func (j *journal) freeze() {
	j.mu.Lock()
	j.frozen = true
	j.mu.Unlock()
}

// close syncs and closes the file.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	var err error
	if !j.noSync && !j.frozen {
		err = j.f.Sync()
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	if err != nil && j.err == nil {
		return fmt.Errorf("%w: closing %s: %v", ErrJournal, j.path, err)
	}
	return j.err
}
