package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/keys"
)

// errWaitExpired withdraws a request that waited longer than MaxWait.
var errWaitExpired = errors.New("proxy: no capacity within the wait limit")

// handleMessages serves POST /v1/messages, plain and streaming, through
// the dispatcher.
func (p *Proxy) handleMessages(w http.ResponseWriter, r *http.Request) {
	arrival := p.now()
	body, held, ok := p.readBody(w, r, api.MaxMessagesBytes, 1)
	if !ok {
		return
	}
	defer held.Release() // the body is held until the answer
	info := parseParams(body)
	extra := forwardHeaders(r.Header)
	req := &dispatch.Request{ID: "proxy", Params: body, Model: info.Model, MaxTokens: info.MaxTokens, EstInput: info.EstInputTokens}
	pool := api.PoolOf(info.Model)

	var ckey cache.Key
	cacheable := !info.Stream && p.cfg.Cache != nil && p.cfg.Cache.Mode() != cache.Off
	if cacheable {
		// anthropic-beta can change the answer: it is part of the key.
		k, err := cache.KeyOf(body, extra.Get(api.HeaderBeta))
		cacheable, ckey = err == nil, k
		if cacheable {
			m, hit := p.cfg.Cache.Get(k)
			p.metrics.cacheLookup(hit)
			if hit {
				w.Header().Set("X-Sluice-Cache", "hit")
				writeJSONBytes(w, 200, m)
				return
			}
		}
	}

	c := &call{deadline: arrival.Add(p.cfg.MaxWait), maxAttempts: p.cfg.MaxAttempts, pool: pool, abandoned: make(chan struct{})}
	ctx, cancel := context.WithDeadline(r.Context(), c.deadline)
	defer cancel()
	var sink *streamSink
	var inner dispatch.Sender
	if info.Stream {
		streams(w)
		sink = &streamSink{w: w, rc: http.NewResponseController(w), c: c, redact: p.pool().Redact, writeTimeout: p.cfg.StreamWriteTimeout}
		defer sink.close()
		inner = p.d.StreamSender(body, extra, sink)
	} else {
		inner = func(actx context.Context, key *keys.Key) client.Outcome {
			o, _ := p.cfg.Client.Send(actx, key, "POST", "/v1/messages", body, extra, false)
			return o
		}
	}
	send := func(actx context.Context, key *keys.Key) client.Outcome {
		if !c.start(p.now()) {
			return client.Outcome{Class: client.Canceled, Err: errWaitExpired}
		}
		// A caller that leaves cuts its attempt short.
		actx, stop := context.WithCancel(actx)
		defer stop()
		unhook := context.AfterFunc(r.Context(), stop)
		defer unhook()
		o := inner(actx, key)
		c.end(o)
		return o
	}

	done := make(chan dispatch.Result, 1)
	// The call waits again exactly when the dispatcher will send it again.
	onWait := dispatch.OnWait(func() { c.wait(p.now()) })
	if err := p.d.SubmitSend(ctx, req, send, func(res dispatch.Result) { done <- res }, onWait); err != nil {
		switch {
		case r.Context().Err() != nil:
		case errors.Is(err, context.DeadlineExceeded):
			p.waitExpired(w, c)
		default:
			p.unavailable(w, err)
		}
		return
	}
	deadline := ctx.Done()
	for {
		select {
		case res := <-done:
			p.account(c, res, arrival, pool)
			if sink != nil && sink.finish(res) {
				return
			}
			p.answer(w, r, c, res)
			if cacheable && res.Class == api.ClassOK && !res.Aborted && p.cfg.Cache.Mode() == cache.On {
				p.cachePut(ckey, res.Body) // not while draining
			}
			return
		case <-c.abandoned:
			p.waitExpired(w, c)
			return
		case <-deadline:
			deadline = nil
			if r.Context().Err() != nil {
				return // the caller left; the request is withdrawn
			}
			c.abandonIfWaiting()
		}
	}
}

// answer writes a Result that did not stream: the API's answer unchanged,
// or an error of sluice's own when there was none.
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, c *call, res dispatch.Result) {
	last, has := c.lastOutcome()
	switch {
	case res.Aborted:
		switch {
		case r.Context().Err() != nil:
		case c.isAbandoned(), errors.Is(res.Err, errWaitExpired), errors.Is(res.Err, context.DeadlineExceeded):
			p.waitExpired(w, c)
		default:
			p.unavailable(w, res.Err)
		}
	case res.Status == 0 || !has || last.Class == client.Transport:
		p.fail(w, 500, api.ErrAPI, fmt.Sprintf("sluice: no answer from the API after %d attempts: %v", res.Attempts, res.Err))
	default:
		copyHeaders(w.Header(), last.Header)
		w.WriteHeader(res.Status)
		w.Write(p.scrub(res.Status, res.Body))
	}
}

// scrub is an answer's body as the caller may see it: an error body with
// any key value redacted (an upstream gateway may echo the key it was
// sent); a success unchanged.
func (p *Proxy) scrub(status int, body []byte) []byte {
	if status < 300 {
		return body
	}
	return []byte(p.pool().Redact(string(body)))
}

// waitExpired answers a request whose wait ended (at MaxWait, or after
// MaxAttempts attempts) with the faithful upstream error: the last 429/529
// or 5xx as the API sent it (a 429/529 with a retry-after of when capacity
// is expected); after attempts that got no answer at all (the API
// unreachable), a 500 api_error saying so, as when the retries run out;
// when nothing was sent, an error of sluice's own with the same
// retry-after: a 529 when 529s held every lane of the pool back (the
// breaker), a 500 when failures did, else a 429 (no capacity).
func (p *Proxy) waitExpired(w http.ResponseWriter, c *call) {
	p.metrics.waitExpired.Add(1)
	last, ok := c.lastOutcome()
	switch {
	case ok && len(last.Body) > 0 && (last.Class == client.RateLimited || last.Class == client.Overloaded):
		copyHeaders(w.Header(), last.Header)
		hint, _ := api.ParseRetryAfter(last.Header, p.now())
		p.setRetryAfter(w, c.pool, hint)
		w.WriteHeader(last.Status)
		w.Write(p.scrub(last.Status, last.Body))
		return
	case ok && len(last.Body) > 0 && last.Class == client.ServerError && last.Status >= 500:
		copyHeaders(w.Header(), last.Header)
		w.WriteHeader(last.Status)
		w.Write(p.scrub(last.Status, last.Body))
		return
	case ok && (last.Class == client.Transport || last.Class == client.ServerError):
		p.fail(w, 500, api.ErrAPI, fmt.Sprintf("sluice: no answer from the API after %d attempts within %s: %v", c.attemptCount(), p.cfg.MaxWait, last.Err))
		return
	}
	// Nothing of this call was sent. Say why: the API's own trouble when
	// that is what held every lane of the pool back, else the rate limits.
	p.setRetryAfter(w, c.pool, 0)
	w.Header().Set(api.HeaderShouldRetry, "true")
	switch p.d.Trouble(c.pool) {
	case client.Overloaded:
		p.fail(w, api.StatusOverloaded, api.ErrOverloaded, fmt.Sprintf("sluice: the API is overloaded (529) on every organization; not sent within %s; retry later", p.cfg.MaxWait))
	case client.ServerError:
		p.fail(w, 500, api.ErrAPI, fmt.Sprintf("sluice: the API is failing (5xx or no answer) on every organization; not sent within %s; retry later", p.cfg.MaxWait))
	default:
		p.fail(w, 429, api.ErrRateLimit, fmt.Sprintf("sluice: no capacity on any organization within %s; retry later", p.cfg.MaxWait))
	}
}

// setRetryAfter sets retry-after to when capacity for pool is expected
// (dispatch.ExpectedWait), or the upstream's hint if longer: whole
// seconds, rounded up, at least 1, at most the dispatcher's
// --max-retry-after (an SDK honours longer ones, and a caller told to wait
// an hour would rather be told the truth by a second request sooner).
// Both retry-after and retry-after-ms are set, so SDKs that read either
// agree.
func (p *Proxy) setRetryAfter(w http.ResponseWriter, pool api.Pool, upstream time.Duration) {
	d := min(max(p.d.ExpectedWait(pool), upstream, time.Second), max(p.d.MaxRetryAfter(), time.Second))
	secs := int64((d + time.Second - 1) / time.Second)
	w.Header().Set(api.HeaderRetryAfter, strconv.FormatInt(secs, 10))
	w.Header().Set(api.HeaderRetryAfterMs, strconv.FormatInt(secs*1000, 10))
}

// unavailable answers a request the dispatcher could not take.
func (p *Proxy) unavailable(w http.ResponseWriter, err error) {
	if errors.Is(err, dispatch.ErrStopped) {
		select {
		case <-p.d.Done(): // it stopped for want of a key?
			if errors.Is(p.d.Err(), dispatch.ErrNoLiveKey) {
				err = dispatch.ErrNoLiveKey
			}
		default:
		}
	}
	if errors.Is(err, dispatch.ErrNoLiveKey) {
		w.Header().Set(api.HeaderShouldRetry, "false")
		p.fail(w, 500, api.ErrAPI, "sluice: no live key left")
		return
	}
	w.Header().Set(api.HeaderRetryAfter, "1")
	p.fail(w, api.StatusOverloaded, api.ErrOverloaded, "sluice proxy is shutting down")
}

// account records a finished request in the metrics.
func (p *Proxy) account(c *call, res dispatch.Result, arrival time.Time, pool api.Pool) {
	if res.Aborted {
		return
	}
	if started, ok := c.startedAt(); ok {
		p.metrics.queueWait(res.Org, pool, started.Sub(arrival))
	}
	p.metrics.usage(res.Org, pool, res.Request.Model, res.Usage, false)
}

// cachePut stores an answer off the response path; not once the proxy
// drains (the cache is closed after Wait).
func (p *Proxy) cachePut(k cache.Key, message []byte) {
	p.goBackground(nil, func() {
		if err := p.cfg.Cache.Put(k, message, cache.Meta{Origin: "proxy"}); err != nil && !errors.Is(err, cache.ErrNotAnswer) {
			p.log.Warn("cache write failed", "err", p.pool().Redact(err.Error()))
		}
	})
}

// call is one Messages request's state, shared by its handler and its
// attempts. The handler may answer a request that waited too long only
// while no attempt is running, and an attempt may start only while the
// handler has not answered: one mutex makes the two exclusive.
type call struct {
	deadline    time.Time
	maxAttempts int           // > 0: abandoned when it would wait for attempt maxAttempts+1
	pool        api.Pool      // for the retry-after of its answer
	abandoned   chan struct{} // closed when the wait expired (state abandoned)

	mu       sync.Mutex
	state    callState
	started  time.Time // the first attempt's start
	attempts int
	// tried counts the attempts MaxAttempts bounds: those the API
	// answered with a capacity or server signal (429, 529, 5xx, a 4xx
	// marked retryable) or did not answer. A dead key's 401/403 and an
	// attempt cut short cost the request nothing at the dispatcher, and
	// nothing here either.
	tried   int
	last    client.Outcome
	hasLast bool
	begun   bool // a stream reached the caller
}

type callState int

const (
	waiting callState = iota
	sending
	abandoned
)

// start moves a waiting call to sending, unless its wait expired.
func (c *call) start(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == abandoned {
		return false
	}
	if !now.Before(c.deadline) {
		c.abandonLocked()
		return false
	}
	c.state = sending
	c.attempts++
	if c.started.IsZero() {
		c.started = now
	}
	return true
}

// end records an attempt's outcome. Whether the call waits again is the
// dispatcher's decision (wait), not the outcome's.
func (c *call) end(o client.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.hasLast = o, true
	switch o.Class {
	case client.KeyDead, client.Canceled, client.OK:
	default:
		c.tried++
	}
}

// wait puts a call whose attempt ended back to waiting: the dispatcher
// will send it again (dispatch.OnWait). Past the deadline it is abandoned
// at once. A stream that began never waits again.
func (c *call) wait(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.begun || c.state != sending {
		return
	}
	c.state = waiting
	if !now.Before(c.deadline) || (c.maxAttempts > 0 && c.tried >= c.maxAttempts) {
		c.abandonLocked()
	}
}

func (c *call) attemptCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

// abandonIfWaiting abandons a call no attempt is running for.
func (c *call) abandonIfWaiting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == waiting {
		c.abandonLocked()
	}
}

// abandonLocked requires c.mu.
func (c *call) abandonLocked() {
	if c.state != abandoned {
		c.state = abandoned
		close(c.abandoned)
	}
}

func (c *call) isAbandoned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == abandoned
}

func (c *call) setBegun() {
	c.mu.Lock()
	c.begun = true
	c.mu.Unlock()
}

func (c *call) lastOutcome() (client.Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.hasLast
}

func (c *call) startedAt() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, !c.started.IsZero()
}

// streamSink writes a streamed answer to the caller, event by event. Its
// methods run on the attempt's goroutine; close, from the handler, makes
// later writes fail, so nothing is written after the handler returns.
type streamSink struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	c            *call
	redact       func(string) string
	writeTimeout time.Duration // of one write; ≤ 0: none

	mu     sync.Mutex
	closed bool
	begun  bool
}

var errCallerGone = errors.New("proxy: the caller left")

func (s *streamSink) Begin(status int, h http.Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errCallerGone
	}
	copyHeaders(s.w.Header(), h)
	s.w.Header().Del("Content-Length")
	s.w.WriteHeader(status)
	s.begun = true
	s.c.setBegun()
	return s.write(nil)
}

// Event passes one event on; an error event with any key value redacted.
func (s *streamSink) Event(ev []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errCallerGone
	}
	if bytes.HasPrefix(ev, []byte("event: error")) {
		ev = []byte(s.redact(string(ev)))
	}
	return s.write(ev)
}

// write writes b (if any) and flushes it to the caller within
// writeTimeout; a caller whose connection does not take it in time (its
// socket buffers full: it stopped reading) is gone. The deadline is
// lifted after each write, so the time between events (the model's, not
// the caller's) never counts. On HTTP/1.1 the deadline is the
// connection's; an embedder serving HTTP/2 needs the server's
// HTTP2Config.WriteByteTimeout as well, since a stream reset cannot reach
// a caller that stopped reading the whole connection. Called with mu held.
func (s *streamSink) write(b []byte) error {
	if s.writeTimeout > 0 {
		// A writer without deadlines (not net/http's) just writes.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		defer s.rc.SetWriteDeadline(time.Time{})
	}
	if len(b) > 0 {
		if _, err := s.w.Write(b); err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

// finish ends a stream that reached the caller and reports whether it
// did; a stream cut upstream ends with an error event (after the last
// whole event: the dispatcher never passes on an unfinished one), so the
// SDK raises its APIError instead of returning a truncated message.
func (s *streamSink) finish(res dispatch.Result) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begun {
		return false
	}
	if last, ok := s.c.lastOutcome(); ok && last.Class == client.Transport && !s.closed {
		why := "cut"
		if last.Err != nil {
			why = last.Err.Error()
		}
		b := api.NewErrorBody(api.ErrAPI, newRequestID(), "sluice: the upstream stream ended early (%s)", s.redact(why)).Marshal()
		s.write(fmt.Appendf(nil, "event: error\ndata: %s\n\n", b))
	}
	return true
}

func (s *streamSink) close() {
	s.mu.Lock()
	s.closed = true
	if s.begun && s.writeTimeout > 0 {
		// What net/http writes after the handler returns (the end of the
		// chunked body) is bounded too; it lifts the deadline itself once
		// the response is finished.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	}
	s.mu.Unlock()
}

func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get(api.HeaderRequestID) == "" {
		w.Header().Set(api.HeaderRequestID, newRequestID())
	}
	w.WriteHeader(status)
	w.Write(b)
}

// parseParams reads model, max_tokens, stream and an input estimate of a
// body the proxy forwards, by the rules and the estimate `sluice run`
// uses for its input lines. A body that breaks a rule gives what was read
// before it: the API answers it with its own 400.
func parseParams(body []byte) jsonl.Info {
	info, _ := jsonl.DescribeParams(body)
	return info
}

// handleCountTokens serves POST /v1/messages/count_tokens on a live key.
func (p *Proxy) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	body, held, ok := p.readBody(w, r, api.MaxMessagesBytes, 1)
	if !ok {
		return
	}
	defer held.Release()
	p.forward(w, r, "POST", "/v1/messages/count_tokens", body)
}

// handleModels serves GET /v1/models and /v1/models/{id} on a live key.
func (p *Proxy) handleModels(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	p.forward(w, r, "GET", path, nil)
}

// forward sends one call outside the lanes (count_tokens and models have
// limits of their own, and cost nothing) on the live keys in turn: a
// 429/529/5xx or no answer tries the next key, once each.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, method, path string, body []byte) {
	live := p.pool().Live()
	if len(live) == 0 {
		p.unavailable(w, dispatch.ErrNoLiveKey)
		return
	}
	first := int(p.rr.Add(1))
	extra := forwardHeaders(r.Header)
	var o client.Outcome
	for i := range live {
		o, _ = p.cfg.Client.Send(r.Context(), live[(first+i)%len(live)], method, path, body, extra, false)
		if o.Class == client.OK || o.Class == client.Invalid || o.Class == client.Canceled {
			break
		}
	}
	switch {
	case o.Class == client.Canceled:
	case o.Status == 0:
		p.fail(w, 500, api.ErrAPI, fmt.Sprintf("sluice: no answer from the API: %v", o.Err))
	default:
		copyHeaders(w.Header(), o.Header)
		w.WriteHeader(o.Status)
		w.Write(o.Body)
	}
}
