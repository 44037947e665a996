// Package cache is sluice's response cache: real answers to Messages
// requests, addressed by the hash of the canonical request, in one embedded
// bbolt file. It never stores a non-answer, and it re-checks every row it
// reads, so a row of a non-answer (written by an older version, or by hand)
// reads as a miss. See docs/judge.md.
package cache

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-dev/sluice/api"
)

// Mode is how a run uses the cache.
type Mode int

// Cache modes.
const (
	// Off: the cache is not opened; Get misses, Put does nothing.
	Off Mode = iota
	// On: Get reads, Put writes.
	On
	// ReadOnly: Get reads, Put returns ErrReadOnly. Several processes may
	// hold one file read-only at once, but not while another holds it On.
	ReadOnly
)

// ParseMode reads a mode as a flag gives it: "off", "on", "read-only"
// (or "ro", "readonly").
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "":
		return Off, nil
	case "on":
		return On, nil
	case "read-only", "readonly", "ro":
		return ReadOnly, nil
	}
	return Off, fmt.Errorf("cache: mode %q: want off, on or read-only", s)
}

func (m Mode) String() string {
	switch m {
	case On:
		return "on"
	case ReadOnly:
		return "read-only"
	}
	return "off"
}

var (
	// ErrNotAnswer is what Put refuses: anything but a finished message
	// with content. The error is a *NotAnswerError.
	ErrNotAnswer = errors.New("cache: not an answer")
	// ErrReadOnly is returned by Put and Prune on a read-only cache.
	ErrReadOnly = errors.New("cache: read-only")
	// ErrLocked is returned by Open when another process holds the file
	// (read-write, or read-only while this one asks for read-write).
	ErrLocked = errors.New("cache: locked by another process")
)

// NotAnswerError says why a message is not an answer. It matches
// ErrNotAnswer under errors.Is.
type NotAnswerError struct {
	Reason string // e.g. "stop_reason max_tokens"
}

func (e *NotAnswerError) Error() string { return "cache: not an answer: " + e.Reason }

// Is reports whether target is ErrNotAnswer.
func (e *NotAnswerError) Is(target error) bool { return target == ErrNotAnswer }

// answerStops are the stop reasons of a finished answer. max_tokens and
// model_context_window_exceeded are cut, refusal is a decline, pause_turn
// is unfinished, and an absent stop reason is not a final message.
var answerStops = []string{api.StopEndTurn, api.StopSequence, api.StopToolUse}

// Check reports whether message is an answer the cache may hold: a JSON
// Messages response (type "message") whose stop_reason is end_turn,
// stop_sequence or tool_use and whose content has a non-blank text block
// or a non-text block (tool_use). Anything else — an error body, a batch
// result that is not a message, a truncated, refused, paused or empty
// message — is a *NotAnswerError. Put and Get both apply it.
func Check(message []byte) error {
	var m struct {
		Type       string             `json:"type"`
		StopReason *string            `json:"stop_reason"`
		Content    []api.ContentBlock `json:"content"`
	}
	if err := json.Unmarshal(message, &m); err != nil {
		return &NotAnswerError{"not a JSON message"}
	}
	if m.Type != "message" {
		return &NotAnswerError{fmt.Sprintf("type %q, not a message", m.Type)}
	}
	if m.StopReason == nil {
		return &NotAnswerError{"no stop_reason"}
	}
	if !slices.Contains(answerStops, *m.StopReason) {
		return &NotAnswerError{"stop_reason " + *m.StopReason}
	}
	for _, b := range m.Content {
		if b.Type != "text" && b.Type != "" || strings.TrimSpace(b.Text) != "" {
			return nil
		}
	}
	return &NotAnswerError{"empty content"}
}

// Meta describes a stored answer; it is kept with the row for inspection.
type Meta struct {
	// At is when the answer was stored; zero means time.Now(). Prune ages
	// rows by it.
	At       time.Time
	CustomID string
	// Origin is where the answer came from, for example "sync" or "batch".
	Origin string
}

// Stats describes a cache: what the file holds, and what this Cache value
// did since Open.
type Stats struct {
	Path string `json:"path"`
	Mode string `json:"mode"`
	// Entries counts stored rows and Bytes their key and value bytes.
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// FileBytes is the file's size: deleted rows free pages that later
	// writes reuse, but the file does not shrink.
	FileBytes int64 `json:"file_bytes"`
	// Hits and Misses count Gets; BadReads counts the misses that found a
	// row failing Check. Puts counts rows written, RefusedPuts the
	// non-answers Put refused.
	Hits        int64 `json:"hits"`
	Misses      int64 `json:"misses"`
	BadReads    int64 `json:"bad_reads"`
	Puts        int64 `json:"puts"`
	RefusedPuts int64 `json:"refused_puts"`
}

// Cache is an open response cache. It is safe for concurrent use. A nil
// *Cache, like one opened Off, misses every Get and ignores every Put.
type Cache struct {
	db   *bolt.DB // nil when Off
	path string
	mode Mode

	hits, misses, badReads, puts, refused atomic.Int64
}

const (
	// format is the value of meta/format in every cache file.
	format = "sluice-cache-v1"
	// lockTimeout is how long Open waits for another process's lock.
	lockTimeout = 2 * time.Second
)

var (
	bucketRows = []byte("rows")
	bucketMeta = []byte("meta")
	keyFormat  = []byte("format")
)

// Open opens the cache file at path in mode. On creates the file (and its
// directory) if needed; ReadOnly needs an existing file; Off touches
// nothing. A file another process holds gives ErrLocked after 2 s; a file
// that is not a sluice cache, or is corrupt, is an error (never silently
// replaced: it may be something else the user pointed at by mistake).
func Open(path string, mode Mode) (*Cache, error) {
	return open(path, mode, lockTimeout)
}

func open(path string, mode Mode, timeout time.Duration) (*Cache, error) {
	c := &Cache{path: path, mode: mode}
	if mode == Off {
		return c, nil
	}
	if mode != On && mode != ReadOnly {
		return nil, fmt.Errorf("cache: unknown mode %d", mode)
	}
	if mode == On {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("cache: read-only: %w", err)
	}
	db, err := bolt.Open(path, 0o644, &bolt.Options{
		Timeout: timeout, ReadOnly: mode == ReadOnly, FreelistType: bolt.FreelistMapType,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, fmt.Errorf("cache: %s is not a sluice cache, or is corrupt (%v); move it away to start a new one", path, err)
	case err != nil:
		return nil, fmt.Errorf("cache: %w", err)
	}
	check := func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || tx.Bucket(bucketRows) == nil {
			return fmt.Errorf("cache: %s is a bbolt file but not a sluice cache", path)
		}
		if f := meta.Get(keyFormat); string(f) != format {
			return fmt.Errorf("cache: %s has format %q, this sluice reads %q", path, f, format)
		}
		return nil
	}
	if mode == On {
		err = db.Update(func(tx *bolt.Tx) error {
			if isEmpty(tx) {
				meta, err := tx.CreateBucket(bucketMeta)
				if err != nil {
					return err
				}
				if err := meta.Put(keyFormat, []byte(format)); err != nil {
					return err
				}
				if _, err := tx.CreateBucket(bucketRows); err != nil {
					return err
				}
			}
			return check(tx)
		})
	} else {
		err = db.View(check)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	c.db = db
	return c, nil
}

// isEmpty reports whether the file has no bucket at all (a new file).
func isEmpty(tx *bolt.Tx) bool {
	empty := true
	tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
	return empty
}

// Mode returns the cache's mode.
func (c *Cache) Mode() Mode {
	if c == nil {
		return Off
	}
	return c.mode
}

// row is the stored form of an answer: a one-line JSON header, a newline,
// then the message exactly as the API sent it.
type rowHeader struct {
	At       int64  `json:"at"` // Unix milliseconds
	CustomID string `json:"custom_id,omitempty"`
	Origin   string `json:"origin,omitempty"`
}

func encodeRow(message []byte, meta Meta) []byte {
	at := meta.At
	if at.IsZero() {
		at = time.Now()
	}
	h, _ := json.Marshal(rowHeader{At: at.UnixMilli(), CustomID: meta.CustomID, Origin: meta.Origin})
	out := make([]byte, 0, len(h)+1+len(message))
	return append(append(append(out, h...), '\n'), message...)
}

// decodeRow splits a stored row; ok is false for a row that is not one.
func decodeRow(v []byte) (h rowHeader, message []byte, ok bool) {
	i := bytes.IndexByte(v, '\n')
	if i < 0 || json.Unmarshal(v[:i], &h) != nil {
		return h, nil, false
	}
	return h, v[i+1:], true
}

// Get returns the stored answer to the request with key k. A row that does
// not decode or fails Check is a miss (and counts in BadReads), whatever
// wrote it. The returned bytes are the caller's.
func (c *Cache) Get(k Key) (message []byte, ok bool) {
	if c == nil || c.db == nil {
		return nil, false
	}
	var bad bool
	err := c.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRows).Get(k[:])
		if v == nil {
			return nil
		}
		_, m, rowOK := decodeRow(v)
		if !rowOK || Check(m) != nil {
			bad = true
			return nil
		}
		message = bytes.Clone(m)
		return nil
	})
	if err != nil || message == nil {
		if bad {
			c.badReads.Add(1)
		}
		c.misses.Add(1)
		return nil, false
	}
	c.hits.Add(1)
	return message, true
}

// Lookup is Get without counting a hit or a miss: a run looks up what it
// will serve from the cache before it plans, then serves it with Get.
func (c *Cache) Lookup(k Key) (message []byte, ok bool) {
	if c == nil || c.db == nil {
		return nil, false
	}
	c.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketRows).Get(k[:]); v != nil {
			if _, m, rowOK := decodeRow(v); rowOK && Check(m) == nil {
				message = bytes.Clone(m)
			}
		}
		return nil
	})
	return message, message != nil
}

// Contains reports whether Get would hit, without counting.
func (c *Cache) Contains(k Key) bool {
	_, ok := c.Lookup(k)
	return ok
}

// Put stores message, a Messages response body, as the answer to the
// request with key k, replacing any row there. It refuses a message that
// fails Check with a *NotAnswerError, and returns ErrReadOnly on a
// read-only cache; Off does nothing. It returns once the row is durable:
// concurrent Puts share one fsynced commit (bbolt's Batch, which waits up
// to 10 ms to gather them), so call it off latency-critical paths.
func (c *Cache) Put(k Key, message []byte, meta Meta) error {
	if c == nil || c.mode == Off {
		return nil
	}
	if c.mode == ReadOnly {
		return ErrReadOnly
	}
	if err := Check(message); err != nil {
		c.refused.Add(1)
		return err
	}
	row := encodeRow(message, meta)
	err := c.db.Batch(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRows).Put(k[:], row)
	})
	if err != nil {
		return fmt.Errorf("cache: put: %w", err)
	}
	c.puts.Add(1)
	return nil
}

// PutResult is Put for a Message Batches result object
// ({"type":"succeeded","message":…} or an errored, expired or canceled
// one): only a succeeded result's message can be stored; every other type
// is a *NotAnswerError.
func (c *Cache) PutResult(k Key, result []byte, meta Meta) error {
	if c == nil || c.mode == Off {
		return nil
	}
	if c.mode == ReadOnly {
		return ErrReadOnly
	}
	var r struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(result, &r); err != nil || r.Type != api.ResultSucceeded {
		c.refused.Add(1)
		if err != nil {
			return &NotAnswerError{"not a JSON result"}
		}
		return &NotAnswerError{fmt.Sprintf("result type %q", r.Type)}
	}
	return c.Put(k, r.Message, meta)
}

// Stats scans the file and returns its size and row count with this
// Cache's counters. Off (or nil) returns the counters alone.
func (c *Cache) Stats() (Stats, error) {
	if c == nil {
		return Stats{Mode: Off.String()}, nil
	}
	s := Stats{Path: c.path, Mode: c.mode.String(),
		Hits: c.hits.Load(), Misses: c.misses.Load(), BadReads: c.badReads.Load(),
		Puts: c.puts.Load(), RefusedPuts: c.refused.Load()}
	if c.db == nil {
		return s, nil
	}
	err := c.db.View(func(tx *bolt.Tx) error {
		s.FileBytes = tx.Size()
		return tx.Bucket(bucketRows).ForEach(func(k, v []byte) error {
			s.Entries++
			s.Bytes += int64(len(k) + len(v))
			return nil
		})
	})
	if err != nil {
		return s, fmt.Errorf("cache: stats: %w", err)
	}
	return s, nil
}

// PruneOptions says what Prune removes. Bad rows (failing Check, or under
// a key Get cannot ask for) are always removed.
type PruneOptions struct {
	// OlderThan removes rows stored more than this long before Now; 0
	// keeps rows of any age.
	OlderThan time.Duration
	// MaxBytes then removes the oldest rows until the rows' bytes (as
	// Stats counts them) are at most MaxBytes; 0 is no limit.
	MaxBytes int64
	// Now is the time OlderThan counts back from; zero means time.Now().
	Now time.Time
}

// PruneResult is what Prune did.
type PruneResult struct {
	Removed    int64 `json:"removed"`     // rows removed, bad ones included
	RemovedBad int64 `json:"removed_bad"` // rows removed because they failed Check
	Entries    int64 `json:"entries"`     // rows left
	Bytes      int64 `json:"bytes"`       // their bytes
}

// pruneChunk bounds the rows one delete transaction removes.
const pruneChunk = 10_000

// Prune removes bad rows, rows older than opt.OlderThan, and then the
// oldest rows until the cache fits opt.MaxBytes. It reads every row once
// and holds about 50 bytes per row while it decides, then deletes in
// transactions of at most 10,000 rows. Puts may run meanwhile; a row
// rewritten after the scan may be removed with its old age.
func (c *Cache) Prune(opt PruneOptions) (PruneResult, error) {
	var res PruneResult
	if c == nil || c.db == nil {
		return res, nil
	}
	if c.mode == ReadOnly {
		return res, ErrReadOnly
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	type entry struct {
		key  []byte
		at   int64
		size int64
	}
	var keep []entry
	var drop [][]byte
	err := c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRows).ForEach(func(k, v []byte) error {
			e := entry{key: bytes.Clone(k), size: int64(len(k) + len(v))}
			h, m, ok := decodeRow(v)
			if len(k) != len(Key{}) || !ok || Check(m) != nil { // unreachable or not an answer
				res.RemovedBad++
				drop = append(drop, e.key)
				return nil
			}
			e.at = h.At
			if opt.OlderThan > 0 && now.Sub(time.UnixMilli(e.at)) > opt.OlderThan {
				drop = append(drop, e.key)
				return nil
			}
			keep = append(keep, e)
			res.Bytes += e.size
			return nil
		})
	})
	if err != nil {
		return res, fmt.Errorf("cache: prune: %w", err)
	}
	if opt.MaxBytes > 0 && res.Bytes > opt.MaxBytes {
		slices.SortStableFunc(keep, func(a, b entry) int { return cmp.Compare(a.at, b.at) })
		i := 0
		for ; i < len(keep) && res.Bytes > opt.MaxBytes; i++ {
			res.Bytes -= keep[i].size
			drop = append(drop, keep[i].key)
		}
		keep = keep[i:]
	}
	for len(drop) > 0 {
		n := min(len(drop), pruneChunk)
		chunk := drop[:n]
		drop = drop[n:]
		err := c.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketRows)
			for _, k := range chunk {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("cache: prune: %w", err)
		}
		res.Removed += int64(n)
	}
	res.Entries = int64(len(keep))
	return res, nil
}

// Close closes the file. Gets after Close miss; Puts fail.
func (c *Cache) Close() error {
	if c == nil || c.db == nil {
		return nil
	}
	if err := c.db.Close(); err != nil {
		return fmt.Errorf("cache: close: %w", err)
	}
	return nil
}
