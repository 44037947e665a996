package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// The Message Batches model, per organization, as a discrete-event
// simulation advanced lazily to "now" on every access:
//
//   - a batch of n requests starts AdmissionBase + AdmissionPerRequest·n
//     after create, plus StarveFor when n > StarveAbove;
//   - the org processes ProcessingRate requests per second, all to the
//     oldest started batch first (FIFO, work-conserving);
//   - a batch ends when every request is processed, when it expires
//     (Expiry after create: the rest are "expired"), or CancelDelay after a
//     cancel (the rest are "canceled");
//   - request_counts show every request as processing until the batch ends;
//   - for ReadAfterWrite after create the batch answers 404 and is not
//     listed, like an eventually consistent store.
//
// Params are validated at create but, as the API documents, their errors
// surface only as "errored" rows once the batch ends.

type batchRow struct {
	customID  string
	hash      uint64
	model     string
	in        int64 // input tokens
	maxTokens int64
	verdict   bool // answered with a JSON verdict (prompt.verdict)
	invalid   *requestError
	// The row's prompt-cache prefix (prompt.cachePrefix, cacheKey,
	// cacheTTL) and, once its batch ended, what it read or wrote.
	cachePrefix, cacheRead, cacheWrite int64
	cacheKey                           uint64
	cacheTTL                           time.Duration
}

type simBatch struct {
	id        string
	rows      []batchRow
	created   time.Time
	start     time.Time // processing may begin
	began     time.Time // processing began (zero: not yet)
	expires   time.Time
	visible   time.Time // read-after-write window ends
	done      float64   // requests processed so far
	cancelAt  *time.Time
	endedAt   *time.Time
	deleted   bool
	processed int    // rows processed when it ended
	outcome   string // "canceled" or "expired" for the unprocessed rest
	counts    api.RequestCounts
}

func (b *simBatch) ended() bool { return b.endedAt != nil }

// batchQueue is one org's batches. All fields are guarded by mu.
type batchQueue struct {
	mu       sync.Mutex
	org      *org
	last     time.Time
	list     []*simBatch // creation order
	byID     map[string]*simBatch
	counters BatchCounters
}

func (q *batchQueue) init(o *org, now time.Time) {
	q.org, q.last, q.byID = o, now, map[string]*simBatch{}
}

// scaled converts a simulated duration into real time.
func (q *batchQueue) scaled(d Duration) time.Duration {
	return time.Duration(float64(d) / q.org.w.cfg.TimeScale)
}

// rate is the org's processing rate in requests per real second.
func (q *batchQueue) rate() float64 { return q.org.batch.ProcessingRate * q.org.w.cfg.TimeScale }

// advance runs the queue forward to now. Requires q.mu.
func (q *batchQueue) advance(now time.Time) {
	for t := q.last; t.Before(now); {
		next := now
		for _, b := range q.list {
			if b.ended() {
				continue
			}
			for _, e := range []time.Time{b.start, b.expires, q.cancelEnd(b)} {
				if !e.IsZero() && e.After(t) && e.Before(next) {
					next = e
				}
			}
		}
		// Process [t, next) oldest-first.
		r := q.rate()
		budget := r * next.Sub(t).Seconds()
		used := 0.0
		for _, b := range q.list {
			if budget <= 0 {
				break
			}
			if b.ended() || b.start.After(t) {
				continue
			}
			use := math.Min(float64(len(b.rows))-b.done, budget)
			if b.began.IsZero() && use > 0 {
				b.began = t
			}
			b.done += use
			budget -= use
			used += use
			if float64(len(b.rows))-b.done < 1e-9 {
				b.done = float64(len(b.rows))
				q.end(b, t.Add(time.Duration(math.Round(used/r*float64(time.Second)))), "")
			}
		}
		t = next
		for _, b := range q.list {
			switch {
			case b.ended():
			case !b.expires.After(t):
				q.end(b, b.expires, api.ResultExpired)
			case b.cancelAt != nil && !q.cancelEnd(b).After(t):
				q.end(b, q.cancelEnd(b), api.ResultCanceled)
			}
		}
	}
	if now.After(q.last) {
		q.last = now
	}
}

func (q *batchQueue) cancelEnd(b *simBatch) time.Time {
	if b.cancelAt == nil {
		return time.Time{}
	}
	return b.cancelAt.Add(q.scaled(q.org.batch.CancelDelay))
}

// end closes a batch at t; rows not processed become rest ("canceled" or
// "expired"). Requires q.mu.
func (q *batchQueue) end(b *simBatch, t time.Time, rest string) {
	b.endedAt = &t
	b.processed = int(math.Floor(b.done + 1e-9))
	b.outcome = rest
	w := q.org.w
	var c api.RequestCounts
	q.cacheRows(b, t)
	for i := range b.rows {
		switch q.rowResult(b, i) {
		case api.ResultSucceeded:
			c.Succeeded++
			row := &b.rows[i]
			ans := w.cfg.answer(row.hash, row.verdict, row.maxTokens)
			q.counters.InputTokens += row.in - row.cacheRead - row.cacheWrite
			q.counters.CacheReadTokens += row.cacheRead
			q.counters.CacheWriteTokens += row.cacheWrite
			q.counters.OutputTokens += ans.outputTokens
			q.counters.Billed.add(row.model, row.in-row.cacheRead-row.cacheWrite, row.cacheWrite, row.cacheTTL, row.cacheRead, ans.outputTokens)
			w.bodies.answered(row.hash)
		case api.ResultErrored:
			c.Errored++
		case api.ResultCanceled:
			c.Canceled++
		case api.ResultExpired:
			c.Expired++
		}
	}
	b.counts = c
	q.counters.Ended++
	q.counters.Succeeded += c.Succeeded
	q.counters.Errored += c.Errored
	q.counters.Canceled += c.Canceled
	q.counters.Expired += c.Expired
}

// cacheRows applies the prompt-cache model to the succeeded rows of b,
// ended at t: a row whose prefix was warm on the org when b began
// processing reads it with probability CacheHit if a batch warmed it,
// PrimeHit if only sync requests did (best effort, drawn from the row's
// hash so a results file reads the same twice); every other row writes
// it. Rows of one batch run together, so none reads what another
// row of b wrote: a cold batch reads nothing. At t the entries b read are
// refreshed and those it wrote become visible, each for its TTL. Requires
// q.mu.
func (q *batchQueue) cacheRows(b *simBatch, t time.Time) {
	o := q.org
	if b.began.IsZero() {
		return
	}
	touched := map[uint64]time.Duration{} // prefix → the longest TTL its rows asked for
	o.cacheMu.Lock()
	defer o.cacheMu.Unlock()
	for i := range b.rows {
		row := &b.rows[i]
		if row.cachePrefix == 0 || q.rowResult(b, i) != api.ResultSucceeded {
			continue
		}
		e, ok := o.cache[row.cacheKey]
		warm := ok && !b.began.Before(e.visible) && b.began.Before(e.expires)
		hit := o.batch.PrimeHit
		if !e.batchAt.IsZero() && !e.batchAt.After(b.began) { // a batch had warmed it when b began
			hit = o.batch.CacheHit
		}
		if warm && float64(mix(row.hash^0xcac4e)>>11)/(1<<53) < hit {
			row.cacheRead = row.cachePrefix
		} else {
			row.cacheWrite = row.cachePrefix
		}
		touched[row.cacheKey] = max(touched[row.cacheKey], row.cacheTTL)
	}
	for key, rowTTL := range touched {
		ttl := time.Duration(float64(rowTTL) / o.w.cfg.TimeScale)
		e, ok := o.cache[key]
		if !ok || !t.Before(e.expires) || t.Before(e.visible) {
			e.visible, e.batchAt = t, t // written anew by b
		} else if e.batchAt.IsZero() {
			e.batchAt = t // the first batch to read or write a live entry
		}
		if exp := t.Add(ttl); exp.After(e.expires) {
			e.expires = exp
		}
		o.cache[key] = e
	}
}

// rowResult is the result type of row i of an ended batch.
func (q *batchQueue) rowResult(b *simBatch, i int) string {
	if i >= b.processed {
		return b.outcome
	}
	if b.rows[i].invalid != nil {
		return api.ResultErrored
	}
	if er := q.org.batch.ErrorRate; er > 0 && float64(mix(b.rows[i].hash^0x5eed)>>11)/(1<<53) < er {
		return api.ResultErrored
	}
	return api.ResultSucceeded
}

// queued is the number of requests not yet processed in unended batches:
// what counts against the processing-queue cap. Requires q.mu.
func (q *batchQueue) queued() int64 {
	var n int64
	for _, b := range q.list {
		if !b.ended() {
			n += int64(len(b.rows)) - int64(b.done)
		}
	}
	return n
}

// find returns a batch the caller's org may see now. Requires q.mu.
func (q *batchQueue) find(id string, now time.Time) *simBatch {
	b, ok := q.byID[id]
	if !ok || b.deleted || now.Before(b.visible) {
		return nil
	}
	return b
}

// object renders b as the API's MessageBatch.
func (q *batchQueue) object(b *simBatch, r *http.Request) api.MessageBatch {
	m := api.MessageBatch{
		ID: b.id, Type: "message_batch", ProcessingStatus: api.BatchInProgress,
		CreatedAt: b.created.UTC(), ExpiresAt: b.expires.UTC(),
		RequestCounts: api.RequestCounts{Processing: int64(len(b.rows))},
	}
	if b.cancelAt != nil {
		t := b.cancelAt.UTC()
		m.CancelInitiatedAt = &t
		m.ProcessingStatus = api.BatchCanceling
	}
	if b.ended() {
		t := b.endedAt.UTC()
		m.EndedAt = &t
		m.ProcessingStatus = api.BatchEnded
		m.RequestCounts = b.counts
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u := fmt.Sprintf("%s://%s/v1/messages/batches/%s/results", scheme, r.Host, b.id)
		m.ResultsURL = &u
		if arch := b.created.Add(time.Duration(float64(api.ResultsRetention) / q.org.w.cfg.TimeScale)); !q.last.Before(arch) {
			m.ArchivedAt = &arch
		}
	}
	return m
}

// batchCall starts a batch endpoint call: auth, then the org's batch RPM.
func (s *Server) batchCall(rw http.ResponseWriter, r *http.Request) *call {
	c := s.begin(rw, r)
	if c == nil {
		return nil
	}
	o := c.org
	wait, ok := o.takeSurface(&o.batchRPM, c.now)
	o.surfaceHeaders(rw.Header(), &o.batchRPM, c.now)
	if !ok {
		o.batches.mu.Lock()
		o.batches.counters.RateLimited++
		o.batches.mu.Unlock()
		c.rateLimited(wait, fmt.Sprintf("This request would exceed your organization's rate limit of %s batch requests per minute.", commas(scaleLimit(o.cfg.BatchRPM, s.cfg.TimeScale))))
		return nil
	}
	return c
}

func (s *Server) handleBatchCreate(rw http.ResponseWriter, r *http.Request) {
	c := s.batchCall(rw, r)
	if c == nil {
		return
	}
	body, ok := c.readBody(api.MaxBatchBytes)
	if !ok {
		return
	}
	reqs, err := api.ParseBatchCreate(body)
	if err != nil {
		c.fail(badRequest("%s", err))
		return
	}
	rows := make([]batchRow, len(reqs))
	for i, rq := range reqs {
		row := batchRow{customID: rq.CustomID, hash: BodyHash(rq.Params)}
		if p, rerr := readPrompt(&s.cfg, rq.Params, true); rerr != nil {
			row.invalid = rerr
		} else if rerr := versionRefusal(c.version, p); rerr != nil {
			row.invalid = rerr
		} else {
			row.model, row.in, row.maxTokens, row.verdict = p.model, p.inputTokens, p.maxTokens(), p.verdict
			row.cachePrefix, row.cacheKey, row.cacheTTL = p.cachePrefix, p.cacheKey, p.cacheTTL
		}
		rows[i] = row
	}

	q := &c.org.batches
	q.mu.Lock()
	defer q.mu.Unlock()
	q.advance(c.now)
	if capN := c.org.cfg.BatchQueueCap; capN > 0 && q.queued()+int64(len(rows)) > capN {
		q.counters.QueueFull++
		c.rateLimited(q.scaled(Duration(time.Minute)), fmt.Sprintf("Creating this batch would exceed your organization's limit of %s batch requests in the processing queue (%s queued).", commas(capN), commas(q.queued())))
		return
	}
	bm := c.org.batch
	admit := bm.AdmissionBase + Duration(int64(bm.AdmissionPerRequest)*int64(len(rows)))
	if bm.StarveAbove > 0 && len(rows) > bm.StarveAbove {
		admit += bm.StarveFor
	}
	b := &simBatch{
		id: c.w.newID("msgbatch_"), rows: rows, created: c.now,
		start:   c.now.Add(q.scaled(admit)),
		expires: c.now.Add(q.scaled(bm.Expiry)),
		visible: c.now.Add(q.scaled(bm.ReadAfterWrite)),
	}
	q.list = append(q.list, b)
	q.byID[b.id] = b
	q.counters.Created++
	q.counters.Requests += int64(len(rows))
	if p := s.cfg.Faults.PCreateLost; p > 0 && c.w.rng.float() < p {
		q.counters.CreateLost++
		if c.w.rng.float() < 0.5 {
			panic(http.ErrAbortHandler) // created, and the connection drops (the deferred Unlock runs)
		}
		c.fail(&requestError{500, api.ErrAPI, "Internal server error"})
		return
	}
	c.writeJSON(q.object(b, r))
}

// withBatch runs f on the caller's batch named in the path, after advancing
// the org's queue; another org's batch, or one inside its read-after-write
// window, is a 404.
func (s *Server) withBatch(rw http.ResponseWriter, r *http.Request, f func(c *call, q *batchQueue, b *simBatch)) {
	c := s.batchCall(rw, r)
	if c == nil {
		return
	}
	q := &c.org.batches
	q.mu.Lock()
	defer q.mu.Unlock()
	q.advance(c.now)
	id := r.PathValue("id")
	b := q.find(id, c.now)
	if b == nil {
		c.fail(&requestError{404, api.ErrNotFound, fmt.Sprintf("message_batch_id: no batch %q", id)})
		return
	}
	f(c, q, b)
}

func (s *Server) handleBatchRetrieve(rw http.ResponseWriter, r *http.Request) {
	s.withBatch(rw, r, func(c *call, q *batchQueue, b *simBatch) { c.writeJSON(q.object(b, r)) })
}

// handleBatchCancel starts a cancel. Cancelling a batch that is already
// canceling or ended returns it unchanged.
func (s *Server) handleBatchCancel(rw http.ResponseWriter, r *http.Request) {
	s.withBatch(rw, r, func(c *call, q *batchQueue, b *simBatch) {
		if !b.ended() && b.cancelAt == nil {
			t := c.now
			b.cancelAt = &t
			q.counters.CancelRequests++
		}
		c.writeJSON(q.object(b, r))
	})
}

func (s *Server) handleBatchDelete(rw http.ResponseWriter, r *http.Request) {
	s.withBatch(rw, r, func(c *call, q *batchQueue, b *simBatch) {
		if !b.ended() {
			c.fail(badRequest("Batch %s cannot be deleted while it is %s; cancel it and wait until it has ended", b.id, q.object(b, r).ProcessingStatus))
			return
		}
		b.deleted = true
		c.writeJSON(api.DeletedBatch{ID: b.id, Type: "message_batch_deleted"})
	})
}

func (s *Server) handleBatchList(rw http.ResponseWriter, r *http.Request) {
	c := s.batchCall(rw, r)
	if c == nil {
		return
	}
	q := &c.org.batches
	q.mu.Lock()
	defer q.mu.Unlock()
	q.advance(c.now)
	var items []api.MessageBatch
	for i := len(q.list) - 1; i >= 0; i-- { // newest first
		if b := q.list[i]; !b.deleted && !c.now.Before(b.visible) {
			items = append(items, q.object(b, r))
		}
	}
	page, rerr := paginate(r, items, func(m api.MessageBatch) string { return m.ID })
	if rerr != nil {
		c.fail(rerr)
		return
	}
	c.writeJSON(page)
}

// handleBatchResults streams the JSONL results of an ended batch, one line
// per request in request order.
func (s *Server) handleBatchResults(rw http.ResponseWriter, r *http.Request) {
	s.withBatch(rw, r, func(c *call, q *batchQueue, b *simBatch) {
		if !b.ended() {
			c.fail(badRequest("Results for batch %s are not available until processing has ended", b.id))
			return
		}
		if arch := q.object(b, r).ArchivedAt; arch != nil {
			c.fail(&requestError{404, api.ErrNotFound, fmt.Sprintf("Results for batch %s were archived", b.id)})
			return
		}
		rw.Header()["Content-Type"] = []string{"application/x-jsonl"}
		bw := bufio.NewWriterSize(rw, 64<<10)
		enc := json.NewEncoder(bw)
		w := c.w
		for i := range b.rows {
			row := &b.rows[i]
			line := api.BatchResultLine{CustomID: row.customID, Result: api.BatchResult{Type: q.rowResult(b, i)}}
			switch line.Result.Type {
			case api.ResultSucceeded:
				ans := w.cfg.answer(row.hash, row.verdict, row.maxTokens)
				m := &api.Message{
					ID: fmt.Sprintf("msg_01batch%s%06d", b.id[len(b.id)-8:], i), Type: "message", Role: "assistant",
					Model: row.model, Content: []api.ContentBlock{}, StopReason: ans.stopReason,
					Usage: api.Usage{InputTokens: row.in - row.cacheRead - row.cacheWrite, OutputTokens: ans.outputTokens,
						CacheReadInputTokens: row.cacheRead, CacheCreationInputTokens: row.cacheWrite,
						CacheCreation: &api.CacheCreation{}, ServiceTier: api.TierBatch, InferenceGeo: "global"},
				}
				if row.cacheTTL == time.Hour {
					m.Usage.CacheCreation.Ephemeral1h = row.cacheWrite
				} else {
					m.Usage.CacheCreation.Ephemeral5m = row.cacheWrite
				}
				if ans.text != "" {
					m.Content = []api.ContentBlock{{Type: "text", Text: ans.text}}
				}
				line.Result.Message = m
			case api.ResultErrored:
				e := api.NewErrorBody(api.ErrAPI, "", "Internal server error while processing this request")
				if row.invalid != nil {
					e = api.NewErrorBody(row.invalid.typ, "", "%s", row.invalid.msg)
				}
				line.Result.Error = &e
			}
			if err := enc.Encode(&line); err != nil {
				return
			}
		}
		bw.Flush()
	})
}
