package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// resultsTimeout bounds one results download (a chunk of 100,000 rows
// streams in well under it); a cut download is tried again.
const resultsTimeout = 30 * time.Minute

// rowsPerReport is the most rows a harvest step hands the loop at once.
const rowsPerReport = 256

// resultRow is one line of a results file. Message and Error stay raw so a
// message is handed over byte for byte.
type resultRow struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	} `json:"result"`
}

// httpError is a results download answered with a non-200 status.
type httpError struct {
	status int
	class  client.Class
	body   []byte
	err    error
}

func (e *httpError) Error() string {
	return fmt.Sprintf("batch: results: HTTP %d: %v", e.status, e.err)
}

// advanceHarvest downloads c's results: verified first if its batch was
// adopted, then streamed, each row handed to the loop as it arrives (rows
// already handled are skipped, so a download cut short is simply tried
// again). Loop-owned.
func (r *Runner) advanceHarvest(c *chunk, now time.Time) {
	key, waiting := r.keyFor(c, now)
	if waiting {
		return
	}
	if key == nil {
		r.giveUp(c, "organization has no live key", true)
		return
	}
	var models map[string]string // the models of the requests attached now
	if !c.try.verified {
		models = make(map[string]string, len(c.reqs))
		for id, q := range c.reqs {
			models[id] = q.Model
		}
	}
	r.start(c, r.live.ctx, func(ctx context.Context) report {
		rep := &harvestReport{c: c, key: key}
		if models != nil {
			why, err := r.verifyAdopted(ctx, c, key, models)
			if err == nil && why != "" {
				rep.foreign = why
				return rep
			}
			rep.verified, rep.err = err == nil, err
		}
		if rep.err == nil {
			rep.err = r.stream(ctx, c, key)
		}
		return rep
	})
}

// harvestReport is a harvest step's outcome.
type harvestReport struct {
	c        *chunk
	key      *keys.Key
	verified bool   // the adopted batch's results proved ours
	foreign  string // they proved another's: the evidence
	err      error  // the download's, the journal's, a simulated crash, or ctx
}

func (rep *harvestReport) of() *chunk { return rep.c }

// rowsReport is rows a harvest step read, for the loop to hand over; the
// step waits for the reply.
type rowsReport struct {
	c     *chunk
	rows  []*resultRow
	reply chan rowsReply
}

func (rep *rowsReport) of() *chunk { return rep.c }

// rowsReply tells a harvest step whether to stop reading (every row of its
// chunk is handled), or why it must (the Runner failed).
type rowsReply struct {
	stop bool
	err  error
}

// stream downloads c's results file and hands its rows to the loop in
// small groups, as they arrive. Runs in a step.
func (r *Runner) stream(ctx context.Context, c *chunk, key *keys.Key) error {
	var rows []*resultRow
	reply := make(chan rowsReply, 1)
	hand := func() (bool, error) {
		r.events <- &rowsReport{c: c, rows: rows, reply: reply}
		rows = nil
		rep := <-reply
		return rep.stop, rep.err
	}
	err := r.eachResultLine(ctx, c, key, func(line []byte, complete, more bool) (bool, error) {
		row := &resultRow{}
		if err := json.Unmarshal(line, row); err != nil || row.CustomID == "" {
			if !complete {
				return false, fmt.Errorf("batch: results of %s end in a torn line", c.batch)
			}
			return false, fmt.Errorf("batch: results of %s hold a line that is not a result: %.200q", c.batch, line)
		}
		id, ok := c.rowID(row.CustomID)
		if !ok {
			r.log.Warn("batch: a results line names a custom_id the chunk did not send", "batch", c.batch, "custom_id", row.CustomID)
			return false, nil
		}
		row.CustomID = id // the caller's, from here on
		rows = append(rows, row)
		if more && len(rows) < rowsPerReport {
			return false, nil
		}
		return hand()
	})
	if err == nil && len(rows) > 0 {
		_, err = hand()
	}
	return err
}

// eachResultLine downloads c's results file and calls fn on each
// non-blank line as it arrives, until fn says stop, fails, or the file
// ends. complete is false for a line the read cut (a last line without a
// newline, a dropped connection): it must still parse. more is true when
// the next line is already read. Lines have no length limit. Runs in a
// step.
func (r *Runner) eachResultLine(ctx context.Context, c *chunk, key *keys.Key, fn func(line []byte, complete, more bool) (stop bool, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, resultsTimeout)
	defer cancel()
	sent := r.now()
	resp, err := r.cfg.Client.Stream(ctx, key, batchesPath+"/"+url.PathEscape(c.batch)+"/results", "application/x-jsonl")
	if err != nil {
		return fmt.Errorf("batch: results: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resultsError(resp)
	}
	key.Answered(sent, keys.AllPools)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			stop, ferr := fn(line, err == nil, err == nil && br.Buffered() > 0)
			if ferr != nil {
				return ferr
			}
			if stop {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("batch: results of %s cut short: %w", c.batch, err)
		}
	}
}

// takeRows hands rows of c over, on the loop: delivered or re-routed when
// their request was submitted, parked when a resumed chunk's request has
// not been submitted yet, skipped when done.
func (r *Runner) takeRows(c *chunk, rows []*resultRow) rowsReply {
	if r.live.fatal != nil {
		return rowsReply{err: r.live.fatal}
	}
	for _, row := range rows {
		id := row.CustomID
		if c.handled[id] {
			continue
		}
		c.handled[id] = true
		req := c.reqs[id]
		if req == nil {
			if r.recovered[id] == c && r.input == inputOpen {
				// Its request may be submitted later in this run.
				delete(r.recovered, id)
				c.unattached--
				r.parked[id] = &parkedRow{c: c, row: row, hash: c.hashes[c.index[id]]}
				c.parkedN++
			}
			continue
		}
		r.deliverRow(c, req, row)
		if r.crashed("mid-harvest") {
			r.fail(errCrash)
			return rowsReply{err: errCrash}
		}
	}
	return rowsReply{stop: len(c.handled) == c.n()}
}

// harvestDone applies a harvest step's report: the chunk harvested, or
// given up (its adopted batch another's, or the download failing too
// often), or tried again after a wait (at once with another key).
func (r *Runner) harvestDone(rep *harvestReport) {
	c, o := rep.c, rep.c.org
	if rep.verified {
		c.try.verified = true
	}
	if rep.foreign != "" {
		r.markForeign(c, rep.foreign)
		r.giveUp(c, "the adopted batch is another's: "+rep.foreign, false)
		return
	}
	if rep.err == nil {
		r.finishHarvest(c)
		return
	}
	if r.stopped(r.live.ctx, rep.err) {
		return
	}
	now := r.now()
	var he *httpError
	if errors.As(rep.err, &he) {
		switch {
		case he.class == client.KeyDead:
			c.try.failures++
			r.refused(o, rep.key, &client.Outcome{Class: he.class, Status: he.status, Body: he.body, Err: he.err}, now)
			return // at once, with the org's next key
		case he.status == http.StatusNotFound:
			// Right after a batch ends its results may not be served yet
			// (the API shows transient 404s there): only a 404 that lasts
			// is "gone".
			c.try.notFound++
			if c.try.notFound > maxResultsNotFound {
				r.giveUp(c, fmt.Sprintf("results not found %d times (archived, or deleted)", c.try.notFound), false)
				return
			}
			r.log.Info("batch: results not found yet; trying again", "org", o.label, "batch", c.batch, "tries", c.try.notFound)
			c.wake = now.Add(c.try.delay)
			c.try.delay = min(c.try.delay*2, r.cfg.PollMax)
			return
		}
	}
	if c.try.failures++; c.try.failures >= maxHarvestTries {
		r.giveUp(c, fmt.Sprintf("results download failed %d times: %v", c.try.failures, rep.err), true)
		return
	}
	r.log.Info("batch: results download failed; trying again", "org", o.label, "batch", c.batch, "err", rep.err)
	c.wake = now.Add(c.try.delay)
	c.try.delay = min(c.try.delay*2, r.cfg.PollMax)
}

// finishHarvest ends a harvest: the requests the results did not mention
// are re-routed, and c closes once its delivered rows are durable.
func (r *Runner) finishHarvest(c *chunk) {
	missing := r.takeUnhandled(c)
	r.freeUnattached(c)
	for _, q := range missing {
		r.emitReroute(c, q, "missing from the batch results")
	}
	if len(missing) > 0 {
		r.log.Warn("batch: requests missing from a batch's results were re-routed", "batch", c.batch, "requests", len(missing))
	}
	if b := c.try.ended; !c.cancelAt.IsZero() && b != nil {
		// The old system's "frozen request_counts" signature: a batch
		// cancelled as stuck that had in fact been answering.
		rc := b.RequestCounts
		r.log.Info("batch: harvested a batch sluice cancelled", "org", c.org.label, "batch", c.batch,
			"succeeded", rc.Succeeded, "errored", rc.Errored, "canceled", rc.Canceled, "expired", rc.Expired)
	}
	r.enter(c, harvested)
	r.maybeClose(c)
}

// deliverRow turns one row into the request's outcome:
//
//	succeeded                        → result, class ok
//	errored, the request's own fault → result, class final (never retried;
//	 (api.ClassOfError)                from an adopted batch: re-routed)
//	succeeded from an adopted batch,
//	  another model than asked for   → re-routed (the batch is another's)
//	errored otherwise, expired       → re-routed to sync
//	canceled, sluice cancelled       → re-routed to sync
//	canceled by someone else         → result, class transport (a re-run drives it)
//	anything else                    → result, class transport
func (r *Runner) deliverRow(c *chunk, req *call.Request, row *resultRow) {
	res := Result{BatchID: c.batch, Result: call.Result{
		Request: req, Org: c.org.label, Attempts: 1, Latency: r.now().Sub(c.intentAt),
	}}
	if k := c.org.key(); k != nil {
		res.Key = k.Label()
	}
	switch row.Result.Type {
	case api.ResultSucceeded:
		var m struct {
			Model      string    `json:"model"`
			Usage      api.Usage `json:"usage"`
			StopReason string    `json:"stop_reason"`
		}
		if len(row.Result.Message) == 0 || json.Unmarshal(row.Result.Message, &m) != nil {
			r.transport(c, res, "a succeeded row without a message")
			return
		}
		if c.adopted && !sameModel(req.Model, m.Model) {
			// A resumed chunk's requests arrive after verifyAdopted ran,
			// so each row is checked as it meets its request.
			r.markForeign(c, fmt.Sprintf("custom_id %q was answered by %q, its request asked for %q", req.ID, m.Model, req.Model))
			r.emitReroute(c, req, fmt.Sprintf("the adopted batch answered with %q, the request asked for %q: another's", m.Model, req.Model))
			return
		}
		res.Class, res.Status, res.Body = api.ClassOK, http.StatusOK, row.Result.Message
		res.Usage, res.StopReason = m.Usage, m.StopReason
		r.noteCacheRow(c, req, m.Usage)
		r.emitResult(c, res)
	case api.ResultErrored:
		typ, msg := errorOf(row.Result.Error)
		// Only a request's own fault is final (api.ClassOfError); from an
		// adopted batch even that may be another job's request's verdict:
		// the sync path asks again.
		if class, _ := api.ClassOfError(typ); !class.Final() || c.adopted {
			r.emitReroute(c, req, fmt.Sprintf("errored row (%s)", typ))
			return
		}
		res.Class, res.Status, res.Body = api.ClassFinal, http.StatusBadRequest, row.Result.Error
		res.Err = fmt.Errorf("batch: row errored: %s: %s", typ, msg)
		r.emitResult(c, res)
	case api.ResultExpired:
		r.emitReroute(c, req, "expired row")
	case api.ResultCanceled:
		if !c.cancelAt.IsZero() {
			r.emitReroute(c, req, "canceled row (sluice cancelled the batch)")
			return
		}
		r.transport(c, res, fmt.Sprintf("batch %s was canceled outside sluice", c.batch))
	default:
		r.transport(c, res, fmt.Sprintf("unknown result type %q", row.Result.Type))
	}
}

// transport delivers a class transport result with a synthetic error body.
func (r *Runner) transport(c *chunk, res Result, msg string) {
	res.Class = api.ClassTransport
	res.Err = fmt.Errorf("batch: %s", msg)
	res.Body = api.NewErrorBody(api.ErrAPI, "", "sluice: %s", msg).Marshal()
	r.emitResult(c, res)
}

// errorOf reads the error type and message of a row's error object, which
// is an error body ({"type":"error","error":{"type","message"}}) or, in
// some renderings, the inner object itself.
func errorOf(raw json.RawMessage) (api.ErrorType, string) {
	var outer struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Error   api.ErrorDetail `json:"error"`
	}
	if json.Unmarshal(raw, &outer) != nil {
		return "", ""
	}
	if outer.Error.Type != "" {
		return outer.Error.Type, outer.Error.Message
	}
	return api.ErrorType(outer.Type), outer.Message
}

// markForeign counts c's adopted batch as another's (why: the first
// evidence), once: nothing more is harvested from it and its requests are
// re-driven.
func (r *Runner) markForeign(c *chunk, why string) {
	if !c.foreign {
		c.foreign = true
		r.stats.Foreign++
		r.log.Warn("batch: an adopted batch is not this chunk's; its answers are not used and its requests are re-driven",
			"org", c.org.label, "chunk", c.id, "batch", c.batch, "why", why)
	}
}

// resultsError is a results download answered with a status other than
// 200. A redirect's body repeats its target, query and all, so it is not
// quoted: the client does not follow redirects, and says so.
func resultsError(resp *http.Response) *httpError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	err := fmt.Errorf("%s", bytes.TrimSpace(body))
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		err = errors.New("a redirect (sluice never follows one: the API key would go with it)")
	}
	return &httpError{status: resp.StatusCode, class: client.Classify(resp.StatusCode, resp.Header, body), body: body, err: err}
}
