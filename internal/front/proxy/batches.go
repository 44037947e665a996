package proxy

// Virtual batches: POST /v1/messages/batches is accepted as one batch of
// the proxy's own. The planner routes it (batchrun.go): its rows run on
// the sync dispatcher, on the Message Batches path (package batch), or
// split between the two; retrieve, list, cancel, delete and results
// answer in the API's shapes. See docs/proxy.md.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
)

var (
	errBatchCanceled = errors.New("proxy: batch canceled")
	errShutdown      = errors.New("proxy: shutting down")
)

// batchSet holds every virtual batch: the live ones (running or ended,
// in memory as a summary) and, for list order only, the archived ones,
// which live on disk.
type batchSet struct {
	p   *Proxy
	dir string // "" keeps batches in memory only

	mu       sync.Mutex
	list     []*vbatch // creation order; not archived
	byID     map[string]*vbatch
	archived []archivedRef // creation order; their meta files hold the rest
}

// archivedRef is what memory keeps of an archived batch: enough to list
// it in order.
type archivedRef struct {
	id      string
	created time.Time
}

// vbatch is one virtual batch. id, n, created, expires, ctx, cancel and
// collected never change after the batch is registered; rows is set while
// it runs and dropped when it ends. ids is read without a lock only by
// the batch's own goroutines while it runs; it is dropped once its results
// file is in request order (the only later use of it).
type vbatch struct {
	id               string
	n                int
	created, expires time.Time
	// ctx is the rows' context: it ends on a cancel (errBatchCanceled)
	// or when the proxy drains (errShutdown).
	ctx    context.Context
	cancel context.CancelCauseFunc
	// rows is the bookkeeping of a running batch's rows; nil once it has
	// ended (every row had its end) or before it runs.
	rows atomic.Pointer[rowRun]
	// version is the caller's anthropic-version ("": the proxy's own):
	// every row goes upstream with it (batchrun.go). Fixed at create.
	version string
	// collected tells the batch's driver how many rows the collector got
	// unresolved (0: the batch ends).
	collected chan int

	mu         sync.Mutex
	ids        []string // custom_ids in request order; nil once ordered or archived
	cancelAt   *time.Time
	endedAt    *time.Time
	archivedAt *time.Time
	counts     api.RequestCounts
	route      string // sync, batch or split, as the planner chose
	ordered    bool   // ended: the results file holds every line, in request order
	deleted    bool
	warned     bool // a persistence error was logged

	smu   sync.Mutex // guards store; held during its disk I/O (never mu)
	store rowStore   // nil once an ended batch's lines are in its ordered file
}

// rowRun is a running batch's per-row state.
type rowRun struct {
	// results carries the end of each row still to drive to the
	// collector; its capacity is their number, so a row's end never waits
	// (the dispatcher's loop delivers most of them).
	results chan rowDone
	// finished[i] is set once row i's end was delivered (exactly once).
	finished []atomic.Bool
}

// rowDone is the end of one row: its result line, or unresolved (the proxy
// stopped before the row had an answer; a restart drives it).
type rowDone struct {
	i          int
	line       []byte
	typ        string
	unresolved bool
}

// run gives b the state of a run with todo rows still to end.
func (b *vbatch) run(todo int) *rowRun {
	rr := &rowRun{results: make(chan rowDone, todo), finished: make([]atomic.Bool, b.n)}
	b.rows.Store(rr)
	return rr
}

// deliver hands the end of row d.i to the collector, once per row. Once
// the batch has ended every row has had its end: a late one is dropped.
func (b *vbatch) deliver(d rowDone) {
	rr := b.rows.Load()
	if rr != nil && rr.finished[d.i].CompareAndSwap(false, true) {
		rr.results <- d
	}
}

// finished reports whether row i has had its end.
func (b *vbatch) finished(i int) bool {
	rr := b.rows.Load()
	return rr == nil || rr.finished[i].Load()
}

// batchMeta is a batch's file <id>.json.
type batchMeta struct {
	ID                string            `json:"id"`
	CreatedAt         time.Time         `json:"created_at"`
	ExpiresAt         time.Time         `json:"expires_at"`
	CancelInitiatedAt *time.Time        `json:"cancel_initiated_at"`
	EndedAt           *time.Time        `json:"ended_at"`
	ArchivedAt        *time.Time        `json:"archived_at,omitempty"`
	Counts            api.RequestCounts `json:"request_counts"`
	N                 int               `json:"n"`
	Route             string            `json:"route,omitempty"`
	ResultsOrdered    bool              `json:"results_ordered,omitempty"`
	CustomIDs         []string          `json:"custom_ids,omitempty"`
	// Version is the caller's anthropic-version: the batch's rows are
	// sent with it, as the API would apply it.
	Version string `json:"anthropic_version,omitempty"`
}

func (s *batchSet) metaPath(id string) string     { return filepath.Join(s.dir, id+".json") }
func (s *batchSet) resultsPath(id string) string  { return filepath.Join(s.dir, id+".results.jsonl") }
func (s *batchSet) requestsPath(id string) string { return filepath.Join(s.dir, id+".requests.jsonl") }
func (s *batchSet) journalPath(id string) string  { return filepath.Join(s.dir, id+".batch-journal") }

// newVbatch returns a batch of the given ids, not yet registered.
func (s *batchSet) newVbatch(id string, ids []string, created, expires time.Time) *vbatch {
	b := &vbatch{id: id, n: len(ids), ids: ids, created: created, expires: expires, collected: make(chan int, 1)}
	b.ctx, b.cancel = context.WithCancelCause(s.p.life)
	return b
}

// errUnreadableMeta marks a meta file that cannot be parsed: it is set
// aside, never a reason to refuse to start.
var errUnreadableMeta = errors.New("unreadable meta file")

// init loads the batches kept in dir; the ones that had not ended are
// driven to their end again (in the background). A batch that cannot be
// loaded is set aside or skipped, with a warning: only the state dir
// itself can make init fail. The caller holds the state dir's lock.
func (s *batchSet) init(p *Proxy, dir string) error {
	s.p, s.dir, s.byID = p, dir, map[string]*vbatch{}
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("proxy: state dir: %w", err)
	}
	// Temporary files of a rewrite a crash cut short (internal/store/atomicfile).
	if tmps, err := filepath.Glob(filepath.Join(dir, ".msgbatch_*.tmp-*")); err == nil {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	metas, err := filepath.Glob(filepath.Join(dir, "msgbatch_*.json"))
	if err != nil {
		return err
	}
	var resume []func()
	for _, path := range metas {
		b, run, err := s.load(path)
		id := strings.TrimSuffix(filepath.Base(path), ".json")
		switch {
		case errors.Is(err, errUnreadableMeta):
			// Its content is wrong: set aside for good.
			aside := path + ".unreadable"
			if rerr := os.Rename(path, aside); rerr != nil {
				p.log.Warn("virtual batch: its meta file cannot be read, nor set aside; the batch is not served",
					"batch", id, "err", err, "rename_err", rerr, "files", filepath.Join(dir, id+".*"))
				continue
			}
			p.log.Warn("virtual batch: its meta file cannot be read; set aside, the batch is no longer served (its other files are left for you)",
				"batch", id, "moved_to", aside, "err", err, "files", filepath.Join(dir, id+".*"))
			continue
		case err != nil:
			// A file that cannot be opened, read or written (permissions,
			// a disk error): the batch is left as it is on disk, not
			// served by this process, never a reason not to start.
			p.log.Warn("virtual batch: cannot be loaded; left in place and not served until the error is fixed and the proxy restarted",
				"batch", id, "err", err, "files", filepath.Join(dir, id+".*"))
			continue
		case b == nil: // archived: on disk only
			continue
		}
		s.list = append(s.list, b)
		s.byID[b.id] = b
		if run != nil {
			resume = append(resume, run...)
		}
	}
	// Creation order, as list pages are newest first.
	sortBatches(s.list)
	slices.SortFunc(s.archived, func(a, b archivedRef) int { return a.created.Compare(b.created) })
	if len(resume) > 0 {
		p.goBackground(nil, resume...)
	}
	return nil
}

func sortBatches(l []*vbatch) {
	slices.SortStableFunc(l, func(a, b *vbatch) int { return a.created.Compare(b.created) })
}

// readMeta reads the meta file at path; a file that does not parse,
// names another batch, or does not hold what its batch needs (a custom_id
// per row), is errUnreadableMeta.
func readMeta(path string) (batchMeta, error) {
	var m batchMeta
	raw, err := os.ReadFile(path)
	if err != nil {
		return m, fmt.Errorf("proxy: %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %v", errUnreadableMeta, path, err)
	}
	if m.ID+".json" != filepath.Base(path) {
		return m, fmt.Errorf("%w: %s holds batch %q", errUnreadableMeta, path, m.ID)
	}
	if m.N == 0 {
		m.N = len(m.CustomIDs)
	}
	// A batch whose rows are still looked up by number (running, or ended
	// with its results not yet in request order) must have one custom_id
	// per row.
	if m.N < 0 || m.ArchivedAt == nil && (m.EndedAt == nil || !m.ResultsOrdered) && m.N != len(m.CustomIDs) {
		return m, fmt.Errorf("%w: %s: %d requests but %d custom_ids", errUnreadableMeta, path, m.N, len(m.CustomIDs))
	}
	return m, nil
}

// load reads one batch from the state dir. An archived batch is only
// listed (b nil: s.archived has it). A batch that had not ended is
// resumed: run holds its driver and collector. Rows with a result keep
// it; the rest are driven again — the ones the batch path's journal holds
// by the batch path, which adopts and harvests the batches it created
// (never paying twice), the others as the planner routes them now. A
// batch kept without its requests (an older proxy) ends at once, its
// missing rows errored.
func (s *batchSet) load(path string) (b *vbatch, run []func(), err error) {
	m, err := readMeta(path)
	if err != nil {
		return nil, nil, err
	}
	var (
		made   *vbatch
		opened *fileStore
	)
	defer func() {
		if err != nil && made != nil { // a batch not loaded holds no file, no context
			made.cancel(nil)
			if opened != nil {
				opened.close()
			}
		}
	}()
	if m.ArchivedAt != nil {
		s.archived = append(s.archived, archivedRef{id: m.ID, created: m.CreatedAt})
		return nil, nil, nil
	}
	b = s.newVbatch(m.ID, m.CustomIDs, m.CreatedAt, m.ExpiresAt)
	made = b
	b.n = m.N
	b.cancelAt, b.endedAt, b.counts, b.route, b.ordered = m.CancelInitiatedAt, m.EndedAt, m.Counts, m.Route, m.ResultsOrdered
	b.version = m.Version
	if b.endedAt != nil {
		b.cancel(nil)
		// Left by a stop between the end and the clean-up.
		os.Remove(s.requestsPath(b.id))
		os.Remove(s.journalPath(b.id))
		if b.ordered {
			b.ids = nil
			return b, nil, nil
		}
		fs, err := openFileStore(s.resultsPath(b.id), b.ids)
		if err != nil {
			return nil, nil, err
		}
		opened, b.store = fs, fs
		b.ordered = s.order(b)
		if b.ordered {
			b.ids = nil
			s.save(b)
		}
		return b, nil, nil
	}
	fs, err := openFileStore(s.resultsPath(b.id), b.ids)
	if err != nil {
		return nil, nil, err
	}
	opened, b.store = fs, fs
	b.counts = api.RequestCounts{}
	rr := b.run(0)
	var todo []int
	for i := range b.ids {
		if line, ok := fs.get(i); ok {
			addCount(&b.counts, resultType(line))
			rr.finished[i].Store(true)
			continue
		}
		todo = append(todo, i)
	}
	var rerr error
	if len(todo) > 0 {
		rerr = checkRequests(s.requestsPath(b.id), b.ids)
	}
	if rerr != nil {
		// Nothing left to send them with.
		if !errors.Is(rerr, os.ErrNotExist) {
			s.p.log.Warn("virtual batch: its requests cannot be read; its unfinished rows end errored", "batch", b.id, "err", rerr)
		}
		for _, i := range todo {
			r := api.BatchResult{Type: api.ResultErrored}
			if b.cancelAt != nil {
				r.Type = api.ResultCanceled
			} else {
				e := api.NewErrorBody(api.ErrAPI, "", "sluice: the proxy stopped before this request was sent")
				r.Error = &e
			}
			if err := fs.put(i, lineOf(b.ids[i], r)); err != nil {
				return nil, nil, err
			}
			addCount(&b.counts, r.Type)
		}
		if err := fs.sync(); err != nil {
			return nil, nil, err
		}
		todo = nil
	}
	if len(todo) == 0 {
		now := s.p.now().UTC()
		b.endedAt = &now
		b.cancel(nil)
		b.rows.Store(nil)
		b.ordered = s.order(b)
		if b.ordered {
			b.ids = nil
		}
		os.Remove(s.requestsPath(b.id))
		os.Remove(s.journalPath(b.id))
		return b, nil, s.save(b)
	}
	if b.cancelAt != nil {
		b.cancel(errBatchCanceled)
	}
	rr.results = make(chan rowDone, len(todo))
	s.p.log.Info("virtual batch resumed", "batch", b.id, "requests", b.n, "to_do", len(todo))
	rows := fileRows{path: s.requestsPath(b.id), ids: b.ids}
	return b, []func(){
		func() { s.p.driveBatch(b, rows, todo, nil) },
		func() { s.p.collectBatch(b, len(todo)) },
	}, nil
}

// order rewrites an ended batch's results file in request order and
// closes it, and reports whether it did: results are then streamed from
// the file. On failure the batch keeps its store (and its open file).
// Every row must have its line.
func (s *batchSet) order(b *vbatch) bool {
	b.smu.Lock()
	defer b.smu.Unlock()
	if s.dir == "" || b.store == nil {
		return false
	}
	if err := writeOrdered(s.resultsPath(b.id), b.store, b.n); err != nil {
		s.p.log.Warn("virtual batch: results kept in completion order", "batch", b.id, "err", err)
		return false
	}
	b.store.close()
	b.store = nil
	return true
}

// addCount counts one row of result type typ.
func addCount(c *api.RequestCounts, typ string) {
	switch typ {
	case api.ResultSucceeded:
		c.Succeeded++
	case api.ResultErrored:
		c.Errored++
	case api.ResultCanceled:
		c.Canceled++
	case api.ResultExpired:
		c.Expired++
	}
}

// resultType reads result.type of a result line.
func resultType(line []byte) string {
	var l struct {
		Result struct {
			Type string `json:"type"`
		} `json:"result"`
	}
	json.Unmarshal(line, &l)
	return l.Result.Type
}

// save writes b's meta file through internal/store/atomicfile (temp file,
// fsync, rename, directory fsync): a crash leaves the old file or the new
// one. No-op without a state dir. Requires b.mu or exclusive use of b.
func (s *batchSet) save(b *vbatch) error {
	if s.dir == "" || b.deleted {
		return nil
	}
	m := batchMeta{ID: b.id, CreatedAt: b.created, ExpiresAt: b.expires, CancelInitiatedAt: b.cancelAt,
		EndedAt: b.endedAt, ArchivedAt: b.archivedAt, Counts: b.counts, N: b.n, Route: b.route,
		ResultsOrdered: b.ordered, CustomIDs: b.ids, Version: b.version}
	err := atomicfile.Write(s.metaPath(b.id), 0o600, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(m)
	})
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// saveLogged saves b, logging the first failure. Requires b.mu.
func (s *batchSet) saveLogged(b *vbatch) {
	if err := s.save(b); err != nil && !b.warned {
		b.warned = true
		s.p.log.Warn("virtual batch not persisted", "batch", b.id, "err", err)
	}
}

// counts returns the number of batches by processing status.
func (s *batchSet) counts() map[string]int {
	s.mu.Lock()
	l := append([]*vbatch(nil), s.list...)
	archived := len(s.archived)
	s.mu.Unlock()
	out := map[string]int{api.BatchEnded: archived}
	for _, b := range l {
		b.mu.Lock()
		out[b.statusLocked()]++
		b.mu.Unlock()
	}
	return out
}

// get returns the batch id: a live one, or an archived one read from its
// meta file (not registered: retrieve, cancel and delete work on it as on
// any ended batch). nil: no such batch.
func (s *batchSet) get(id string) *vbatch {
	s.mu.Lock()
	b := s.byID[id]
	isArchived := b == nil && slices.ContainsFunc(s.archived, func(a archivedRef) bool { return a.id == id })
	s.mu.Unlock()
	if b != nil || !isArchived {
		return b
	}
	return s.readArchived(id)
}

// readArchived is the archived batch id, from its meta file (an id
// s.archived holds: never a path a caller made up).
func (s *batchSet) readArchived(id string) *vbatch {
	m, err := readMeta(s.metaPath(id))
	if err != nil {
		s.p.log.Warn("archived virtual batch: its meta file cannot be read", "batch", id, "err", err)
		return &vbatch{id: id, created: time.Time{}, endedAt: new(time.Time), archivedAt: new(time.Time)}
	}
	return &vbatch{id: m.ID, n: m.N, created: m.CreatedAt, expires: m.ExpiresAt, cancelAt: m.CancelInitiatedAt,
		endedAt: m.EndedAt, archivedAt: m.ArchivedAt, counts: m.Counts, route: m.Route}
}

// forget drops the batch id from the set (a delete).
func (s *batchSet) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
	s.list = slices.DeleteFunc(s.list, func(b *vbatch) bool { return b.id == id })
	s.archived = slices.DeleteFunc(s.archived, func(a archivedRef) bool { return a.id == id })
}

// archive applies the API's retention: an ended batch's results are
// available for api.ResultsRetention (29 days) after its creation; then
// they are deleted and the batch, still listed, shows archived_at. An
// archived batch leaves memory: its meta file keeps it, and s.archived
// its place in the list.
func (s *batchSet) archive(now time.Time) {
	s.mu.Lock()
	var due []*vbatch
	for _, b := range s.list {
		if b.created.After(now.Add(-api.ResultsRetention)) {
			break // creation order: the rest are younger
		}
		due = append(due, b)
	}
	s.mu.Unlock()
	for _, b := range due {
		at := b.created.Add(api.ResultsRetention)
		b.mu.Lock()
		done := b.endedAt != nil && b.archivedAt == nil && !b.deleted
		if done {
			b.archivedAt = &at
			b.ids = nil
			b.smu.Lock()
			if b.store != nil {
				b.store.close()
				b.store = nil
			}
			b.smu.Unlock()
			if s.dir != "" {
				os.Remove(s.resultsPath(b.id))
			}
			s.saveLogged(b)
		}
		b.mu.Unlock()
		if !done || s.dir == "" {
			continue // without a state dir an archived batch stays in memory: nowhere else to list it from
		}
		s.mu.Lock()
		if s.byID[b.id] == b {
			delete(s.byID, b.id)
			s.list = slices.DeleteFunc(s.list, func(x *vbatch) bool { return x == b })
			i, _ := slices.BinarySearchFunc(s.archived, b.created, func(a archivedRef, t time.Time) int { return a.created.Compare(t) })
			s.archived = slices.Insert(s.archived, i, archivedRef{id: b.id, created: b.created})
		}
		s.mu.Unlock()
	}
}

// statusLocked requires b.mu.
func (b *vbatch) statusLocked() string {
	switch {
	case b.endedAt != nil:
		return api.BatchEnded
	case b.cancelAt != nil:
		return api.BatchCanceling
	}
	return api.BatchInProgress
}

// object renders b as the API's MessageBatch; the results URL is the
// proxy's own, as the caller reached it.
func (b *vbatch) object(r *http.Request) api.MessageBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := api.MessageBatch{
		ID: b.id, Type: "message_batch", ProcessingStatus: b.statusLocked(),
		CreatedAt: b.created, ExpiresAt: b.expires, CancelInitiatedAt: b.cancelAt,
		RequestCounts: api.RequestCounts{Processing: int64(b.n)},
	}
	if b.endedAt != nil {
		m.EndedAt, m.RequestCounts, m.ArchivedAt = b.endedAt, b.counts, b.archivedAt
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u := fmt.Sprintf("%s://%s/v1/messages/batches/%s/results", scheme, r.Host, b.id)
		m.ResultsURL = &u
	}
	return m
}

// newBatchID returns a fresh msgbatch_ id.
func newBatchID() string {
	var b [12]byte
	rand.Read(b[:])
	return "msgbatch_sluice" + hex.EncodeToString(b[:])
}

// handleBatchCreate serves POST /v1/messages/batches: the body is checked
// as the API checks it at create, kept (with a state dir: on disk, and
// the body's memory is given back), answered at once, and the batch
// starts in the background.
func (p *Proxy) handleBatchCreate(w http.ResponseWriter, r *http.Request) {
	// Twice the body: the parsed rows are a copy until they are on disk.
	body, held, ok := p.readBody(w, r, api.MaxBatchBytes, 2)
	if !ok {
		return
	}
	defer held.Release() // unless the driver holds it (no state dir)
	reqs, err := api.ParseBatchCreate(body)
	if err != nil {
		p.fail(w, 400, api.ErrInvalidRequest, err.Error())
		return
	}
	body = nil
	n := len(reqs)
	ids := make([]string, n)
	rows := make([]json.RawMessage, n)
	for i, rq := range reqs {
		ids[i], rows[i] = rq.CustomID, rq.Params
	}
	reqs = nil

	s := &p.batches
	now := p.now().UTC()
	s.archive(now)
	b := s.newVbatch(newBatchID(), ids, now, now.Add(api.BatchLifetime))
	b.version = r.Header.Get(api.HeaderVersion)
	b.run(n)
	refuse := func(err error) {
		b.cancel(nil)
		if b.store != nil {
			b.store.close()
		}
		if s.dir != "" {
			os.Remove(s.metaPath(b.id))
			os.Remove(s.resultsPath(b.id))
			os.Remove(s.requestsPath(b.id))
		}
		if err != nil {
			p.fail(w, 500, api.ErrAPI, "sluice: cannot store the batch")
			p.log.Warn("virtual batch refused", "err", err)
		}
	}
	var src rowSource
	release := func() {}
	if s.dir == "" {
		b.store = &memStore{lines: make([][]byte, n)}
		// The rows stay in memory while they are sent: so does their room.
		src = memRows(rows)
		release = held.handOff()
	} else {
		// Requests first: a meta file always has them.
		if err := writeRequests(s.requestsPath(b.id), ids, rows); err != nil {
			refuse(err)
			return
		}
		rows = nil
		src = fileRows{path: s.requestsPath(b.id), ids: ids}
		fs, err := newFileStore(s.resultsPath(b.id), n)
		if err != nil {
			refuse(err)
			return
		}
		b.store = fs
		if err := s.save(b); err != nil {
			refuse(err)
			return
		}
	}
	todo := make([]int, n)
	for i := range todo {
		todo[i] = i
	}
	register := func() {
		s.mu.Lock()
		s.list = append(s.list, b)
		s.byID[b.id] = b
		s.mu.Unlock()
	}
	if !p.goBackground(register, func() { p.driveBatch(b, src, todo, release) }, func() { p.collectBatch(b, n) }) {
		release()
		refuse(nil)
		p.unavailable(w, errShutdown)
		return
	}
	p.log.Info("virtual batch created", "batch", b.id, "requests", n)
	writeJSON(w, 200, b.object(r))
}

// rowType is the result type of a finished row.
func rowType(res dispatch.Result) string {
	if res.Class == api.ClassOK {
		return api.ResultSucceeded
	}
	return api.ResultErrored
}

// rowLine renders a finished row as a result line: the message as the API
// sent it, or its error body with any key value in its message redacted
// (an upstream gateway may echo the key it was sent).
func rowLine(customID string, res dispatch.Result, redact func(string) string) []byte {
	if res.Class == api.ClassOK {
		line, err := json.Marshal(struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type    string          `json:"type"`
				Message json.RawMessage `json:"message"`
			} `json:"result"`
		}{CustomID: customID, Result: struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
		}{api.ResultSucceeded, res.Body}})
		if err == nil {
			return line
		}
	}
	var e api.ErrorBody
	if json.Unmarshal(res.Body, &e) != nil || e.Err.Type == "" {
		e = api.NewErrorBody(api.ErrAPI, "", "sluice: no usable answer after %d attempts", res.Attempts)
	}
	e.Err.Message = redact(e.Err.Message)
	return lineOf(customID, api.BatchResult{Type: api.ResultErrored, Error: &e})
}

func lineOf(customID string, r api.BatchResult) []byte {
	line, _ := json.Marshal(api.BatchResultLine{CustomID: customID, Result: r})
	return line
}

// withBatch runs f on the batch named in the path, or answers 404.
func (p *Proxy) withBatch(w http.ResponseWriter, r *http.Request, f func(b *vbatch)) {
	p.batches.archive(p.now())
	id := r.PathValue("id")
	b := p.batches.get(id)
	if b == nil {
		p.fail(w, 404, api.ErrNotFound, fmt.Sprintf("message_batch_id: no batch %q", id))
		return
	}
	f(b)
}

func (p *Proxy) handleBatchRetrieve(w http.ResponseWriter, r *http.Request) {
	p.withBatch(w, r, func(b *vbatch) { writeJSON(w, 200, b.object(r)) })
}

// handleBatchCancel starts a cancel: rows not yet sent become canceled,
// rows in flight finish, and the Message Batches holding its rows are
// cancelled upstream (see driveBatch). The cancel is saved before it
// takes effect, so a restart in between still treats the batch as
// cancelled. Cancelling a batch already canceling or ended returns it
// unchanged.
func (p *Proxy) handleBatchCancel(w http.ResponseWriter, r *http.Request) {
	p.withBatch(w, r, func(b *vbatch) {
		b.mu.Lock()
		if b.endedAt == nil && b.cancelAt == nil {
			now := p.now().UTC()
			b.cancelAt = &now
			p.batches.saveLogged(b)
			b.cancel(errBatchCanceled)
		}
		b.mu.Unlock()
		writeJSON(w, 200, b.object(r))
	})
}

func (p *Proxy) handleBatchDelete(w http.ResponseWriter, r *http.Request) {
	p.withBatch(w, r, func(b *vbatch) {
		b.mu.Lock()
		if b.endedAt == nil {
			status := b.statusLocked()
			b.mu.Unlock()
			p.fail(w, 400, api.ErrInvalidRequest, fmt.Sprintf("Batch %s cannot be deleted while it is %s; cancel it and wait until it has ended", b.id, status))
			return
		}
		b.deleted = true
		b.smu.Lock()
		if b.store != nil {
			b.store.close()
			b.store = nil
		}
		b.smu.Unlock()
		b.mu.Unlock()
		s := &p.batches
		s.forget(b.id)
		if s.dir != "" {
			os.Remove(s.metaPath(b.id))
			os.Remove(s.resultsPath(b.id))
			os.Remove(s.requestsPath(b.id))
			os.Remove(s.journalPath(b.id))
		}
		writeJSON(w, 200, api.DeletedBatch{ID: b.id, Type: "message_batch_deleted"})
	})
}

// handleBatchList serves GET /v1/messages/batches: newest first, with the
// API's cursor pagination. Only the page's batches are rendered (an
// archived one is read from its meta file).
func (p *Proxy) handleBatchList(w http.ResponseWriter, r *http.Request) {
	s := &p.batches
	s.archive(p.now())
	type ref struct {
		id      string
		created time.Time
		b       *vbatch // nil: archived
	}
	s.mu.Lock()
	refs := make([]ref, 0, len(s.list)+len(s.archived))
	li, ai := len(s.list)-1, len(s.archived)-1
	for li >= 0 || ai >= 0 { // both in creation order: merged, newest first
		if ai < 0 || (li >= 0 && !s.list[li].created.Before(s.archived[ai].created)) {
			refs = append(refs, ref{id: s.list[li].id, created: s.list[li].created, b: s.list[li]})
			li--
		} else {
			refs = append(refs, ref{id: s.archived[ai].id, created: s.archived[ai].created})
			ai--
		}
	}
	s.mu.Unlock()
	page, msg := paginate(r, refs, func(x ref) string { return x.id })
	if msg != "" {
		p.fail(w, 400, api.ErrInvalidRequest, msg)
		return
	}
	out := api.Page[api.MessageBatch]{Data: make([]api.MessageBatch, 0, len(page.Data)), HasMore: page.HasMore, FirstID: page.FirstID, LastID: page.LastID}
	for _, x := range page.Data {
		b := x.b
		if b == nil {
			b = s.readArchived(x.id)
		}
		out.Data = append(out.Data, b.object(r))
	}
	writeJSON(w, 200, out)
}

// handleBatchResults streams the results of an ended batch as JSONL, one
// line per request, in request order: from its results file, opened for
// the call (or, without a state dir, from memory).
func (p *Proxy) handleBatchResults(w http.ResponseWriter, r *http.Request) {
	p.withBatch(w, r, func(b *vbatch) {
		b.mu.Lock()
		ended, archived, ordered, n := b.endedAt != nil, b.archivedAt != nil, b.ordered, b.n
		b.mu.Unlock()
		switch {
		case archived:
			p.fail(w, 404, api.ErrNotFound, fmt.Sprintf("Results for batch %s were archived", b.id))
			return
		case !ended:
			p.fail(w, 400, api.ErrInvalidRequest, fmt.Sprintf("Results for batch %s are not available until processing has ended", b.id))
			return
		}
		if ordered {
			f, err := os.Open(p.batches.resultsPath(b.id))
			if err != nil {
				p.fail(w, 500, api.ErrAPI, "sluice: the batch's results cannot be read")
				p.log.Warn("virtual batch results not readable", "batch", b.id, "err", err)
				return
			}
			defer f.Close()
			w.Header().Set("Content-Type", "application/x-jsonl")
			w.Header().Set(api.HeaderRequestID, newRequestID())
			io.Copy(w, f)
			return
		}
		w.Header().Set("Content-Type", "application/x-jsonl")
		w.Header().Set(api.HeaderRequestID, newRequestID())
		bw := bufio.NewWriterSize(w, 64<<10)
		for i := range n {
			b.smu.Lock()
			var line []byte
			ok := false
			if b.store != nil {
				line, ok = b.store.get(i)
			}
			b.smu.Unlock()
			if !ok {
				continue
			}
			bw.Write(line)
			if err := bw.WriteByte('\n'); err != nil {
				return
			}
		}
		bw.Flush()
	})
}

// paginate cuts items (in list order) by the API's cursor parameters:
// limit (1-1000, default 20), after_id, before_id. msg is a 400's message.
func paginate[T any](r *http.Request, items []T, id func(T) string) (api.Page[T], string) {
	page, err := api.Paginate(r.URL.Query(), items, id)
	if err != nil {
		return page, err.Error()
	}
	return page, ""
}
