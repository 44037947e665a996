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
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/keys"
)

// resultsTimeout bounds one results download (a chunk of 100,000 rows
// streams in well under it); a cut download is tried again.
const resultsTimeout = 30 * time.Minute

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
	err    error
}

func (e *httpError) Error() string {
	return fmt.Sprintf("batch: results: HTTP %d: %v", e.status, e.err)
}

// harvest downloads c's results and hands every row over; a download cut
// short is tried again, rows already handled skipped.
func (r *Runner) harvest(ctx context.Context, c *chunk, b *api.MessageBatch) error {
	o := c.org
	delay := r.cfg.PollMin
	verified := !c.adopted
	failures, notFound := 0, 0 // failed downloads (a dead key counts), and 404s: each its own bound
	for {
		key, err := r.orgKey(ctx, o)
		if err != nil {
			return err
		}
		if key == nil {
			return r.giveUp(c, "organization has no live key", true)
		}
		if !verified {
			var why string
			if why, err = r.verifyAdopted(ctx, c, key); err == nil {
				if why != "" {
					r.markForeign(c, why)
					return r.giveUp(c, "the adopted batch is another's: "+why, false)
				}
				verified = true
			}
		}
		if err == nil {
			err = r.stream(ctx, c, key)
		}
		if err == nil {
			break
		}
		if errors.Is(err, errCrash) {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var he *httpError
		if errors.As(err, &he) {
			switch {
			case he.class == client.KeyDead:
				failures++
				r.keyDead(o, key, &client.Outcome{Status: he.status, Err: he.err})
				continue
			case he.status == 404:
				// Right after a batch ends its results may not be served
				// yet (the API shows transient 404s there): only a 404
				// that lasts is "gone".
				notFound++
				if notFound > maxResultsNotFound {
					return r.giveUp(c, fmt.Sprintf("results not found %d times (archived, or deleted)", notFound), false)
				}
				r.log.Info("batch: results not found yet; trying again", "org", o.label, "batch", c.batch, "tries", notFound)
				if err := sleep(ctx, delay); err != nil {
					return err
				}
				delay = min(delay*2, r.cfg.PollMax)
				continue
			}
		}
		if failures++; failures >= maxHarvestTries {
			return r.giveUp(c, fmt.Sprintf("results download failed %d times: %v", failures, err), true)
		}
		r.log.Info("batch: results download failed; trying again", "org", o.label, "batch", c.batch, "err", err)
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(delay*2, r.cfg.PollMax)
	}

	// Requests the results did not mention.
	r.mu.Lock()
	missing := r.takeUnhandled(c)
	r.freeUnattached(c)
	r.mu.Unlock()
	for _, q := range missing {
		r.emitReroute(c, q, "missing from the batch results")
	}
	if len(missing) > 0 {
		r.log.Warn("batch: requests missing from a batch's results were re-routed", "batch", c.batch, "requests", len(missing))
	}
	if !c.cancelAt.IsZero() {
		// The old system's "frozen request_counts" signature: a batch
		// cancelled as stuck that had in fact been answering.
		rc := b.RequestCounts
		r.log.Info("batch: harvested a batch sluice cancelled", "org", o.label, "batch", c.batch,
			"succeeded", rc.Succeeded, "errored", rc.Errored, "canceled", rc.Canceled, "expired", rc.Expired)
	}
	r.mu.Lock()
	c.harvested, c.finished = true, true
	r.maybeClose(c)
	r.mu.Unlock()
	return nil
}

// stream downloads c's results file and handles each line as it arrives.
func (r *Runner) stream(ctx context.Context, c *chunk, key *keys.Key) error {
	return r.eachResultLine(ctx, c, key, func(line []byte, complete bool) (bool, error) {
		if err := r.handleLine(c, line, complete); err != nil {
			return false, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(c.handled) == c.n(), nil // every row handled: the rest is not needed
	})
}

// eachResultLine downloads c's results file and calls fn on each
// non-blank line as it arrives, until fn says stop, fails, or the file
// ends. complete is false for a line the read cut (a last line without a
// newline, a dropped connection): it must still parse. Lines have no
// length limit.
func (r *Runner) eachResultLine(ctx context.Context, c *chunk, key *keys.Key, fn func(line []byte, complete bool) (stop bool, err error)) error {
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
			stop, ferr := fn(line, err == nil)
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

// handleLine hands one results line over: delivered or re-routed when its
// request was submitted, parked when a resumed chunk's request has not been
// submitted yet, skipped when done. complete is false for a last line
// without a newline, which must still parse.
func (r *Runner) handleLine(c *chunk, line []byte, complete bool) error {
	row := &resultRow{}
	if err := json.Unmarshal(line, row); err != nil || row.CustomID == "" {
		if !complete {
			return fmt.Errorf("batch: results of %s end in a torn line", c.batch)
		}
		return fmt.Errorf("batch: results of %s hold a line that is not a result: %.200q", c.batch, line)
	}
	id, ok := c.rowID(row.CustomID)
	r.mu.Lock()
	i := c.index[id]
	if !ok {
		r.mu.Unlock()
		r.log.Warn("batch: a results line names a custom_id the chunk did not send", "batch", c.batch, "custom_id", row.CustomID)
		return nil
	}
	row.CustomID = id // the caller's, from here on
	if c.handled[id] {
		r.mu.Unlock()
		return nil
	}
	req := c.reqs[id]
	if req == nil {
		if r.recovered[id] == c && !r.inputClosed {
			// Its request may be submitted later in this run.
			delete(r.recovered, id)
			c.unattached--
			r.parked[id] = &parkedRow{c: c, row: row, hash: c.hashes[i]}
			c.parkedN++
		}
		c.handled[id] = true
		r.mu.Unlock()
		return nil
	}
	c.handled[id] = true
	r.mu.Unlock()
	r.deliverRow(c, req, row)
	if r.crash("mid-harvest") {
		return errCrash
	}
	return nil
}

// deliverRow turns one row into the request's outcome:
//
//	succeeded                        → result, class ok
//	errored, invalid_request_error   → result, class final (never retried;
//	                                   from an adopted batch: re-routed)
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
	r.mu.Lock()
	if k := c.org.key(); k != nil {
		res.Key = k.Label()
	}
	r.mu.Unlock()
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
		// From an adopted batch an invalid_request row may be another
		// job's request's verdict: the sync path asks again.
		if typ != api.ErrInvalidRequest || c.adopted {
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
	r.mu.Lock()
	defer r.mu.Unlock()
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
	return &httpError{status: resp.StatusCode, class: client.Classify(resp.StatusCode, resp.Header, body), err: err}
}
