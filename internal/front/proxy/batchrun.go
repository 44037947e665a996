package proxy

// Running a virtual batch: the planner (Config.Plan) routes it — sync,
// batch or a split — and route.Fanout.Drive sends it, as it does a
// `sluice run`: the batch part through package batch (its own Runner and
// journal per virtual batch), the sync part and whatever the batch path
// gives back through the dispatcher. The proxy gives Drive the rows and
// ends each row the fan-out does not answer (a cancel, a shutdown, the
// sweep's unanswered rows). Every row ends exactly once (vbatch.deliver),
// in the API's result-line shape; the collector stores the lines and ends
// the batch.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/keys"
)

// driveBatch sends the rows todo of b (src gives their params, read as
// they are sent) and returns once each has been handed to the dispatcher
// or the batch path and the batch path has finished, then cleans up after
// an ended batch. release, if set, is called once every row has been
// handed out (the rows' memory, without a state dir).
func (p *Proxy) driveBatch(b *vbatch, src rowSource, todo []int, release func()) {
	if release == nil {
		release = func() {}
	}
	s := &p.batches
	ids := b.ids
	// Streaming is not allowed in batches: errored without being sent.
	// The others are summed up for the planner.
	drive := make([]int, 0, len(todo))
	sum := jsonl.Summary{Models: map[string]int{}}
	taken, err := src.each(todo, func(i int, params json.RawMessage) bool {
		info := parseParams(params)
		if info.Stream {
			e := api.NewErrorBody(api.ErrInvalidRequest, "", "stream: streaming is not supported in Message Batches")
			b.deliver(rowDone{i: i, typ: api.ResultErrored, line: lineOf(ids[i], api.BatchResult{Type: api.ResultErrored, Error: &e})})
			return true
		}
		drive = append(drive, i)
		if info.Model != "" {
			sum.Models[info.Model]++
		}
		sum.EstInputTokens += info.EstInputTokens
		sum.MaxTokens += info.MaxTokens
		return true
	})
	if err != nil {
		p.log.Warn("virtual batch: its requests cannot be read; the rows not read wait for a restart", "batch", b.id, "err", err)
		p.leaveUnresolved(b, todo[taken:])
	}
	sum.Lines, sum.Valid = len(drive), len(drive)

	routing := p.routeBatch(b, sum, len(drive))
	rowOf := sync.OnceValue(func() map[string]int {
		index := make(map[string]int, len(ids))
		for i, id := range ids {
			index[id] = i
		}
		return index
	})
	var fan *route.Fanout
	if len(drive) > 0 && s.dir != "" {
		var err error
		fan, err = p.openRoute(b, routing, ids, rowOf)
		switch {
		case errors.Is(err, route.ErrOpenBatches):
			// Its batches may be running: sending their rows on sync
			// could pay for them twice.
			p.log.Warn("virtual batch: the batch path cannot resume; its rows wait for a restart", "batch", b.id, "err", err)
			p.leaveUnresolved(b, drive)
			drive = nil
		case err != nil:
			p.log.Warn("virtual batch: the batch path cannot start; every row goes sync", "batch", b.id, "err", err)
		}
	}
	if fan == nil {
		// Every row sync: a fan-out without a batch path (no journal to
		// read, so it cannot fail).
		fan, _ = route.Open(route.Config{Routing: route.Routing{Route: route.Sync}})
	}
	if br := fan.Batch(); br != nil {
		// A cancelled virtual batch cancels the Message Batches holding
		// its rows, as the API stops processing a cancelled batch's rows;
		// a shutdown does not (a restart adopts them).
		stopCancel := context.AfterFunc(b.ctx, func() {
			if errors.Is(context.Cause(b.ctx), errBatchCanceled) {
				br.Cancel("the virtual batch was canceled")
			}
		})
		defer stopCancel()
	}
	// The fan-out drives both sides until a shutdown (p.life); the
	// batch's own end (b.ctx: cancelled) is each row's, below.
	out := fan.Drive(p.life, route.Driver{
		Feed: func(_ context.Context, s route.Side, _ bool, take func(int, string) bool, submit func(context.Context, *dispatch.Request) error) error {
			var rows []int
			for _, i := range drive {
				if take(i, ids[i]) {
					rows = append(rows, i)
				}
			}
			if s == route.SideBatch {
				p.feedBatch(b, fan.Batch(), src, ids, rows, submit)
			} else {
				p.feedSync(b, src, ids, rows)
			}
			return nil
		},
		// Only a re-plan hands a request over, and the proxy does not
		// re-plan; the feeders send their rows themselves.
		Sync: func(_ context.Context, req *dispatch.Request) error {
			p.submitRow(b, rowOf()[req.ID], req.ID, req.Params)
			return nil
		},
		BatchContext: p.life,
		Fed:          release,
		// Rows the batch path never answered (it stopped: a shutdown, or
		// a journal error) wait for a restart, which adopts their batches.
		Unanswered: func(id string) { b.deliver(rowDone{i: rowOf()[id], unresolved: true}) },
	})
	runErr := out.Batch
	if runErr != nil && !errors.Is(runErr, errShutdown) && !errors.Is(runErr, context.Canceled) {
		p.log.Warn("virtual batch: the batch path stopped", "batch", b.id, "err", runErr)
	}
	unresolved := <-b.collected
	br := fan.Batch()
	if br != nil {
		if err := br.Close(); err != nil && runErr == nil {
			runErr = err
		}
	}
	p.endBatch(b, unresolved == 0, br == nil || runErr == nil)
}

// feedSync sends the rows of b on sync (src gives their params), in
// order, until the batch ends: the rows not sent then end with it.
func (p *Proxy) feedSync(b *vbatch, src rowSource, ids []string, rows []int) {
	taken, err := src.each(rows, func(i int, params json.RawMessage) bool {
		if b.ctx.Err() != nil {
			return false
		}
		p.submitRow(b, i, ids[i], params)
		return true
	})
	rest := rows[taken:]
	switch {
	case b.ctx.Err() != nil:
		for _, i := range rest {
			b.deliver(p.aborted(i, ids[i], context.Cause(b.ctx)))
		}
	case err != nil:
		p.log.Warn("virtual batch: its requests cannot be read; the rows not sent wait for a restart", "batch", b.id, "err", err)
		p.leaveUnresolved(b, rest)
	}
}

// endBatch records the end of b's run. An ended batch (every row has a
// result) gets its results file rewritten in request order and closed,
// loses the files only a restart needs (its requests; its journal, when
// the batch path finished cleanly) and its rows' state in memory (its
// custom_ids too, once the file is in order), and then shows ended. A
// batch with rows left unresolved (the proxy stopped) stays in progress,
// its files kept for the restart that finishes it.
func (p *Proxy) endBatch(b *vbatch, ended, journalDone bool) {
	s := &p.batches
	ordered := false
	if ended {
		ordered = s.order(b)
		if s.dir != "" {
			os.Remove(s.requestsPath(b.id))
			if journalDone {
				os.Remove(s.journalPath(b.id))
			}
		}
	}
	b.mu.Lock()
	if ended {
		now := p.now().UTC()
		b.endedAt, b.ordered = &now, ordered
		if ordered {
			b.ids = nil
		}
		p.log.Info("virtual batch ended", "batch", b.id, "succeeded", b.counts.Succeeded, "errored", b.counts.Errored, "canceled", b.counts.Canceled)
	}
	s.saveLogged(b)
	b.mu.Unlock()
	if ended {
		b.rows.Store(nil)
		b.cancel(nil)
		return
	}
	b.smu.Lock()
	if b.store != nil {
		b.store.close() // a restart reopens it
	}
	b.smu.Unlock()
}

// leaveUnresolved ends rows as unresolved: a restart drives them.
func (p *Proxy) leaveUnresolved(b *vbatch, rows []int) {
	for _, i := range rows {
		b.deliver(rowDone{i: i, unresolved: true})
	}
}

// routeBatch asks the planner how to send the n rows of b summed up in
// sum: sync without a planner or a state dir (the batch path needs a
// journal), for a batch being cancelled, or when the planner fails.
func (p *Proxy) routeBatch(b *vbatch, sum jsonl.Summary, n int) route.Routing {
	sync := route.Routing{Route: route.Sync, Why: "no planner"}
	if p.cfg.Plan == nil || p.batches.dir == "" || n == 0 || b.ctx.Err() != nil {
		return sync
	}
	r, err := p.cfg.Plan(sum, n)
	if err != nil {
		p.log.Warn("virtual batch: the planner failed; its rows go sync", "batch", b.id, "err", err)
		return sync
	}
	b.mu.Lock()
	b.route = r.Route
	p.batches.saveLogged(b)
	b.mu.Unlock()
	p.log.Info("virtual batch routed", "batch", b.id, "requests", n, "route", r.Route, "batch_share", r.BatchShare, "why", r.Why)
	return r
}

// openRoute opens the fan-out of b (resuming its journal, if any), with a
// journal of its own next to the batch's files. It is nil, with no error,
// when the routing sends nothing to batch and no journal is open: every
// row goes sync. rowOf maps a custom_id to its row.
func (p *Proxy) openRoute(b *vbatch, routing route.Routing, ids []string, rowOf func() map[string]int) (*route.Fanout, error) {
	fan, err := route.Open(route.Config{
		Routing: routing, Client: p.cfg.Client.WithVersion(b.version), Keys: p.pool().Keys(), Logger: p.log,
		Journal: p.batches.journalPath(b.id), MaxRetryAfter: p.d.MaxRetryAfter(),
		Done: func(id string) bool {
			i, ok := rowOf()[id]
			return ok && b.finished(i)
		},
		Sink: func(r dispatch.Result, _ string) {
			i, ok := rowOf()[r.Request.ID]
			if !ok {
				return
			}
			p.metrics.usage(r.Org, api.PoolOf(r.Request.Model), r.Request.Model, r.Usage, true)
			b.deliver(rowDone{i: i, typ: rowType(r), line: rowLine(ids[i], r, p.pool().Redact)})
		},
		Reroute: func(req *dispatch.Request, why string) {
			i, ok := rowOf()[req.ID]
			if !ok {
				return
			}
			if err := b.ctx.Err(); err != nil {
				b.deliver(p.aborted(i, ids[i], context.Cause(b.ctx)))
				return
			}
			p.log.Debug("virtual batch row re-routed to sync", "batch", b.id, "id", req.ID, "why", why)
			p.submitRow(b, i, ids[i], req.Params)
		},
	})
	if err != nil || fan.Batch() == nil {
		return nil, err
	}
	return fan, nil
}

// feedBatch submits the rows of b (src gives their params) to the batch
// path br through submit, in order, with its backpressure. A row br holds
// (its batch was created before a restart) is always submitted: only its
// batch may answer it.
func (p *Proxy) feedBatch(b *vbatch, br *batch.Runner, src rowSource, ids []string, rows []int, submit func(context.Context, *dispatch.Request) error) {
	taken, err := src.each(rows, func(i int, params json.RawMessage) bool {
		id := ids[i]
		held := br.Holds(id)
		if err := b.ctx.Err(); err != nil && !held {
			b.deliver(p.aborted(i, id, context.Cause(b.ctx)))
			return true
		}
		info := parseParams(params)
		req := &dispatch.Request{ID: id, Params: params, Model: info.Model, MaxTokens: info.MaxTokens,
			EstInput: info.EstInputTokens, ParamsHash: jsonl.ParamsHash(params)}
		ctx := b.ctx
		if held {
			ctx = p.life
		}
		err := submit(ctx, req)
		if err == nil {
			return true
		}
		switch {
		case p.life.Err() != nil:
			b.deliver(rowDone{i: i, unresolved: true})
		case b.ctx.Err() != nil && !held:
			b.deliver(p.aborted(i, id, context.Cause(b.ctx)))
		default: // the Runner stopped (its journal failed): never accepted
			p.submitRow(b, i, id, params)
		}
		return true
	})
	if err != nil {
		p.log.Warn("virtual batch: its requests cannot be read; the rows not sent wait for a restart", "batch", b.id, "err", err)
		p.leaveUnresolved(b, rows[taken:])
	}
}

// submitRow sends row i of b, custom_id id, through the dispatcher; its
// Result ends the row. The callback runs on the dispatcher's loop:
// deliver never waits.
func (p *Proxy) submitRow(b *vbatch, i int, id string, params json.RawMessage) {
	info := parseParams(params)
	req := &dispatch.Request{ID: id, Params: params, Model: info.Model, MaxTokens: info.MaxTokens, EstInput: info.EstInputTokens}
	pool := api.PoolOf(info.Model)
	err := p.d.SubmitSend(b.ctx, req, p.versionSender(b, params), func(res dispatch.Result) {
		if res.Aborted {
			b.deliver(p.aborted(i, id, res.Err))
			return
		}
		p.metrics.usage(res.Org, pool, info.Model, res.Usage, false)
		b.deliver(rowDone{i: i, typ: rowType(res), line: rowLine(id, res, p.pool().Redact)})
	})
	if err != nil {
		b.deliver(p.aborted(i, id, p.refusal(b, err)))
	}
}

// refusal says why the dispatcher refused a row: the batch's own end, no
// live key left (the dispatcher stopped for want of one), or err.
func (p *Proxy) refusal(b *vbatch, err error) error {
	if b.ctx.Err() != nil {
		return context.Cause(b.ctx)
	}
	if errors.Is(err, dispatch.ErrStopped) {
		select {
		case <-p.d.Done():
			if errors.Is(p.d.Err(), dispatch.ErrNoLiveKey) {
				return dispatch.ErrNoLiveKey
			}
		default:
		}
	}
	return err
}

// aborted is the end of row i (custom_id id) withdrawn or never sent
// for err: canceled (the batch was), errored (no live key: nothing can
// answer it), or unresolved (the proxy is stopping; a restart sends it).
func (p *Proxy) aborted(i int, id string, err error) rowDone {
	switch {
	case errors.Is(err, errBatchCanceled):
		return rowDone{i: i, typ: api.ResultCanceled, line: lineOf(id, api.BatchResult{Type: api.ResultCanceled})}
	case errors.Is(err, dispatch.ErrNoLiveKey):
		e := api.NewErrorBody(api.ErrAPI, "", "sluice: no live key left")
		return rowDone{i: i, typ: api.ResultErrored, line: lineOf(id, api.BatchResult{Type: api.ResultErrored, Error: &e})}
	}
	return rowDone{i: i, unresolved: true}
}

// testHookStorePut, if set (tests), runs before each result line is
// stored: a slow disk.
var testHookStorePut atomic.Pointer[func()]

// maxGroup bounds the lines the collector writes before one fsync.
const maxGroup = 4096

// collectBatch stores the ends of b's expect rows as they come, then
// tells the batch's driver how many were left unresolved (endBatch). It
// writes every line at hand, fsyncs the results file once, and only then
// counts those rows (group commit): a row counts once it is durable.
func (p *Proxy) collectBatch(b *vbatch, expect int) {
	results := b.rows.Load().results
	unresolved := 0
	group := make([]rowDone, 0, 64)
	for got := 0; got < expect; {
		group = append(group[:0], <-results)
		got++
	more:
		for got < expect && len(group) < maxGroup {
			select {
			case d := <-results:
				group = append(group, d)
				got++
			default:
				break more
			}
		}
		var err error
		b.smu.Lock()
		for _, d := range group {
			if d.unresolved {
				continue
			}
			if hook := testHookStorePut.Load(); hook != nil {
				(*hook)()
			}
			if perr := b.store.put(d.i, d.line); perr != nil && err == nil {
				err = perr
			}
		}
		if serr := b.store.sync(); serr != nil && err == nil {
			err = serr
		}
		b.smu.Unlock()
		b.mu.Lock()
		for _, d := range group {
			if d.unresolved {
				unresolved++
			} else {
				addCount(&b.counts, d.typ)
			}
		}
		if err != nil && !b.warned {
			b.warned = true
			p.log.Warn("virtual batch results not stored durably", "batch", b.id, "err", err)
		}
		b.mu.Unlock()
	}
	b.collected <- unresolved
}

// versionSender sends a row of b with the caller's anthropic-version (nil:
// the dispatcher's own send, when the caller named none), so the API
// applies the caller's version to its rows as it would to a batch of its
// own.
func (p *Proxy) versionSender(b *vbatch, params []byte) dispatch.Sender {
	if b.version == "" {
		return nil
	}
	extra := http.Header{api.HeaderVersion: {b.version}}
	return func(ctx context.Context, key *keys.Key) client.Outcome {
		o, _ := p.cfg.Client.Send(ctx, key, "POST", "/v1/messages", params, extra, false)
		return o
	}
}
