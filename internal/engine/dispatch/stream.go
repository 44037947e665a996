package dispatch

// This file adds two things to the scheduler, for the proxy: requests
// whose attempts the caller sends itself (SubmitSend, a Sender), which a
// context can withdraw while they wait; and streaming attempts
// (StreamSender, Stream), which hold their lane slot while the answer
// streams through to a sink, and are sent again only while nothing has
// reached the sink.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// Sender sends one attempt of a request with key. It runs on the attempt's
// own goroutine while the attempt holds its lane slot (a place in the
// lane's concurrency and the request's charge to the lane's budget), and
// must return once ctx ends (Abort). Its Outcome is handled like that of a
// plain call: completed, retried or moved to another key by class;
// ShouldRetry 0 forbids a retry. Its Outcome's Sent must say whether the
// request was written whole (client.Send's Outcome does): a canceled
// attempt that was keeps its charge to the budget, since the API may
// have done the work; one that was not gives it back.
//
// A Sender that returns client.Canceled withdraws its request: it is not
// sent again and its Result is Aborted, with the Outcome's Err (or
// ErrWithdrawn) as Err. That is how a caller that left, or a stream that
// already reached its reader, says "never again".
type Sender func(ctx context.Context, key *keys.Key) client.Outcome

// ErrWithdrawn is the Err of a request withdrawn by its Sender without a
// reason of its own.
var ErrWithdrawn = errors.New("dispatch: request withdrawn")

// SubmitSend queues req like Submit, with two differences. Each attempt is
// sent by send (nil: the plain Messages call Submit makes). And ctx
// withdraws the request while it waits: once ctx has ended, a request
// that is queued, or waiting in backoff for a retry, is never sent again
// and ends Aborted with context.Cause(ctx) as Err, at once (it stops
// counting toward MaxQueued, and no longer keeps Serve running after
// Close). An attempt already in flight is not interrupted by ctx (a Sender
// that wants that watches a context of its own). cb receives the Result
// exactly once, on the dispatcher's goroutine.
//
// SubmitSend blocks while the queue is full, and returns ctx's error if
// ctx ends first, or ErrStopped once the dispatcher stops accepting work.
func (d *Dispatcher) SubmitSend(ctx context.Context, req *Request, send Sender, cb func(Result), opts ...SubmitOption) error {
	ictx, cancel := context.WithCancelCause(ctx)
	it := &item{req: req, pool: api.PoolOf(req.Model), ctx: ictx, cancel: cancel, send: send}
	for _, o := range opts {
		o(it)
	}
	it.cb = func(r Result) {
		it.unwatch()
		cb(r)
		cancel(nil)
	}
	// A withdrawal wakes the loop, which ends the request at once if it
	// is waiting (see withdrawItem).
	it.unwatch = context.AfterFunc(ictx, func() {
		select {
		case d.withdraw <- it:
		case <-d.served:
		}
	})
	var err error
	select {
	case d.submit <- it:
		return nil
	case <-d.closed:
		err = ErrStopped
	case <-d.served:
		err = ErrStopped
	case <-ctx.Done():
		err = ctx.Err()
	}
	it.unwatch()
	cancel(nil)
	return err
}

// A SubmitOption adds to what SubmitSend does with a request.
type SubmitOption func(*item)

// OnWait has f called each time the request goes back to waiting after an
// attempt, exactly when the dispatcher will send it again: into backoff
// for a retry (429, 529, 5xx, no answer, x-should-retry: true on a 4xx,
// within the retry budgets), or to the front of its queue (its key died,
// or its attempt was canceled without withdrawing it). f runs on the
// dispatcher's goroutine: keep it short. A request that is not sent again
// gets its Result instead.
func OnWait(f func()) SubmitOption { return func(it *item) { it.onWait = f } }

// withdrawItem ends it if it waits (queued or in backoff): its place
// becomes a tombstone, skipped when it comes up. An attempt in flight ends
// on its own (finish); a request already ended is left alone. Loop-owned.
func (d *Dispatcher) withdrawItem(it *item) {
	if it.where != atQueue && it.where != atRetry {
		return
	}
	err := it.withdrawn()
	if err == nil {
		return
	}
	d.queued--
	it.where = atEnd
	it.cb(Result{Request: it.req, Aborted: true, Err: err, Attempts: it.attempts})
}

// send runs one attempt of it on key; the Outcome says whether the
// request was written to the server whole (Sent). Runs on the attempt's
// goroutine; it reads only the item's fields that never change.
func (d *Dispatcher) send(it *item, key *keys.Key) client.Outcome {
	if it.send == nil {
		return d.cfg.Client.Do(d.attemptCtx, key, "POST", d.cfg.Path, it.req.Body())
	}
	o := it.send(d.attemptCtx, key)
	if o.Class == client.Canceled && d.attemptCtx.Err() == nil {
		cause := o.Err
		if cause == nil {
			cause = ErrWithdrawn
		}
		it.cancel(cause)
	}
	return o
}

// withdrawn returns why it was withdrawn, or nil.
func (it *item) withdrawn() error {
	if it.ctx == nil || it.ctx.Err() == nil {
		return nil
	}
	return context.Cause(it.ctx)
}

// stopped returns why a canceled attempt's request must end rather than
// be relaunched (Abort, or withdrawn), or nil.
func (d *Dispatcher) stopped(it *item) error {
	if d.attemptCtx.Err() != nil {
		return ErrStopped
	}
	return it.withdrawn()
}

// dropWithdrawn ends it, the head of q, if it was withdrawn, and reports
// whether it did. Loop-owned.
func (d *Dispatcher) dropWithdrawn(q *fifo, it *item) bool {
	err := it.withdrawn()
	if err == nil {
		return false
	}
	q.pop()
	d.queued--
	it.where = atEnd
	it.cb(Result{Request: it.req, Aborted: true, Err: err, Attempts: it.attempts})
	return true
}

// StreamSink receives one streamed answer.
type StreamSink interface {
	// Begin is called once, when an attempt is answered with a 2xx
	// text/event-stream, with the answer's status and headers, before any
	// event. From then on the request is never sent again. An error means
	// the reader is gone: the attempt ends and the request is withdrawn.
	Begin(status int, h http.Header) error
	// Event receives one whole server-sent event as it was read: its
	// lines and the blank line that ends it. ev is valid only during the
	// call. An error means the reader is gone, as for Begin.
	Event(ev []byte) error
}

// StreamSender returns a Sender for a streaming Messages call: body (with
// "stream": true) is POSTed to the dispatcher's path with the extra
// headers (see client.Client.Send). An answer that is not a stream (a 429,
// a 400, a plain JSON message) is an ordinary Outcome, retried or
// completed by class, and the sink sees nothing of it. A stream goes to
// sink event by event as it arrives; the Outcome then carries usage and
// stop_reason from message_start and message_delta, and ShouldRetry 0
// whatever happens — a mid-stream error event (passed to the sink as
// sent; the Outcome is classed by its error type, with its data as Body),
// a dropped connection, a stream cut before message_stop, or one silent
// for Config.StreamIdle (Transport). An event cut off by the end of the
// stream is not passed on: the sink only ever sees whole events.
//
// The Sender must not be shared between requests: it remembers that its
// stream began, and withdraws the request if it is ever run again.
func (d *Dispatcher) StreamSender(body []byte, extra http.Header, sink StreamSink) Sender {
	begun := false // only one attempt of a request runs at a time
	return func(ctx context.Context, key *keys.Key) client.Outcome {
		if begun {
			return client.Outcome{Class: client.Canceled, ShouldRetry: 0, Err: errors.New("dispatch: the stream already began")}
		}
		start := time.Now()
		// The stream's own context: cancelled when it goes silent.
		sctx, scancel := context.WithCancelCause(ctx)
		defer scancel(nil)
		o, resp := d.cfg.Client.Send(sctx, key, "POST", d.cfg.Path, body, extra, true)
		if resp == nil {
			return o
		}
		defer resp.Body.Close()
		begun = true
		o.ShouldRetry = 0
		if err := sink.Begin(resp.StatusCode, resp.Header); err != nil {
			return client.Outcome{Class: client.Canceled, Status: o.Status, Header: o.Header, ShouldRetry: 0, Sent: o.Sent, Err: fmt.Errorf("dispatch: stream reader: %w", err)}
		}
		rs := streamReader{idle: d.cfg.StreamIdle, cut: func() { scancel(errStreamIdle) }}
		err := rs.copy(resp.Body, sink)
		o.Latency = time.Since(start)
		o.Usage, o.StopReason = rs.usage, rs.stopReason
		switch {
		case rs.sinkErr != nil:
			o.Class, o.Err = client.Canceled, fmt.Errorf("dispatch: stream reader: %w", rs.sinkErr)
		case rs.errData != nil:
			o.Class, o.Body = classOfStreamError(rs.errType), rs.errData
			o.Err = fmt.Errorf("dispatch: error event in the stream: %s", rs.errType)
		case rs.stopped:
			o.Class = client.OK
		case ctx.Err() != nil:
			o.Class, o.Err = client.Canceled, fmt.Errorf("dispatch: stream: %w", context.Cause(ctx))
		case errors.Is(context.Cause(sctx), errStreamIdle):
			o.Class, o.Err = client.Transport, fmt.Errorf("dispatch: stream cut after it began: no event for %s", d.cfg.StreamIdle)
		case err != nil:
			o.Class, o.Err = client.Transport, fmt.Errorf("dispatch: stream cut after it began: %w", err)
		default:
			o.Class, o.Err = client.Transport, errors.New("dispatch: stream ended before message_stop")
		}
		return o
	}
}

// errStreamIdle cuts a stream that went silent.
var errStreamIdle = errors.New("dispatch: stream idle")

// Stream sends req as a streaming call (req.Params with "stream": true)
// and waits for its Result; the answer goes to sink as StreamSender
// describes. ctx withdraws the request while it waits and cuts a stream in
// flight (the request is then withdrawn). The Result of a stream that
// reached sink has no Body unless it ended with an error event.
func (d *Dispatcher) Stream(ctx context.Context, req *Request, extra http.Header, sink StreamSink) Result {
	inner := d.StreamSender(req.Params, extra, sink)
	send := func(actx context.Context, key *keys.Key) client.Outcome {
		actx, cancel := context.WithCancel(actx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		return inner(actx, key)
	}
	ch := make(chan Result, 1)
	if err := d.SubmitSend(ctx, req, send, func(r Result) { ch <- r }); err != nil {
		return Result{Request: req, Aborted: true, Err: err}
	}
	return <-ch
}

// classOfStreamError classes a mid-stream error event by its error type's
// class (api.ClassOfError). Never KeyDead: a key that was good enough to
// start the stream is not killed by its end, and the request must not
// move; a refusal mid-stream is retried as a server error.
func classOfStreamError(t api.ErrorType) client.Class {
	switch c, _ := api.ClassOfError(t); c {
	case api.ErrorOverloaded:
		return client.Overloaded
	case api.ErrorRateLimited:
		return client.RateLimited
	case api.ErrorInvalid:
		return client.Invalid
	}
	return client.ServerError
}

// streamReader copies server-sent events and reads what the dispatcher
// needs from them.
type streamReader struct {
	// idle > 0: cut is called when no event arrives for that long (time
	// spent in the sink does not count).
	idle time.Duration
	cut  func()

	usage      api.Usage
	stopReason string
	stopped    bool          // message_stop seen
	errType    api.ErrorType // of an error event
	errData    []byte        // its data
	sinkErr    error
}

// copy passes every event of body to sink, whole, as soon as its blank
// line is read. An event the stream's end cuts off (no blank line) is
// dropped: per the SSE rules a reader never dispatches it, and a caller
// relaying the stream must be able to append an event of its own. It
// returns the read error that ended the stream (nil at EOF, or when the
// sink failed: see sinkErr).
func (s *streamReader) copy(body io.Reader, sink StreamSink) error {
	var timer *time.Timer
	if s.idle > 0 && s.cut != nil {
		timer = time.AfterFunc(s.idle, s.cut)
		defer timer.Stop()
	}
	deliver := func(ev []byte) bool {
		s.observe(ev)
		if timer != nil {
			timer.Stop() // the sink's time is not the stream's silence
		}
		if serr := sink.Event(ev); serr != nil {
			s.sinkErr = serr
			return false
		}
		if timer != nil {
			timer.Reset(s.idle)
		}
		return true
	}
	r := bufio.NewReaderSize(body, 32<<10)
	var ev []byte
	lineStart := 0
	for {
		chunk, err := r.ReadSlice('\n')
		ev = append(ev, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			// Whatever is left in ev is an unfinished event: dropped.
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line := ev[lineStart:]
		if len(bytes.TrimRight(line, "\r\n")) > 0 {
			lineStart = len(ev)
			continue
		}
		if len(ev) > len(line) { // an event, not a stray blank line
			if !deliver(ev) {
				return nil
			}
		}
		ev, lineStart = ev[:0], 0
	}
}

// observe reads one event's type and, for the events that carry them,
// usage, stop_reason and the error type.
func (s *streamReader) observe(ev []byte) {
	var name string
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("event:")):
			name = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		}
	}
	switch name {
	case "message_start":
		var m struct {
			Message struct {
				Usage api.Usage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &m) == nil {
			s.usage = m.Message.Usage
		}
	case "message_delta":
		// message_delta usage is cumulative; fields it leaves out keep
		// their message_start values.
		var m struct {
			Delta struct {
				StopReason *string `json:"stop_reason"`
			} `json:"delta"`
			Usage struct {
				InputTokens              *int64 `json:"input_tokens"`
				CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
				CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
				OutputTokens             *int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(data, &m) != nil {
			return
		}
		if m.Delta.StopReason != nil {
			s.stopReason = *m.Delta.StopReason
		}
		u := m.Usage
		for _, f := range []struct {
			v   *int64
			dst *int64
		}{
			{u.InputTokens, &s.usage.InputTokens},
			{u.CacheCreationInputTokens, &s.usage.CacheCreationInputTokens},
			{u.CacheReadInputTokens, &s.usage.CacheReadInputTokens},
			{u.OutputTokens, &s.usage.OutputTokens},
		} {
			if f.v != nil && *f.v > 0 {
				*f.dst = *f.v
			}
		}
	case "message_stop":
		s.stopped = true
	case "error":
		var e api.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Err.Type != "" {
			s.errType = e.Err.Type
		} else {
			s.errType = api.ErrAPI
		}
		s.errData = bytes.Clone(data)
	}
}
