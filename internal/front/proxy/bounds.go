package proxy

// Bounds on what callers can hold: request-body bytes held at once
// (Config.MaxBodyMemory), the time a body may take to arrive
// (Config.BodyTimeout) and a write to a caller may block
// (Config.WriteTimeout). See docs/proxy.md, "Bounds".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/sluice-dev/sluice/api"
)

// Defaults of the bounds' Config fields.
const (
	DefaultBodyTimeout   = 5 * time.Minute
	DefaultWriteTimeout  = 60 * time.Second
	DefaultMaxBodyMemory = 1 << 30
)

// bodyRetryAfter is the retry-after of a caller refused for want of body
// memory: bodies are held for seconds (a message's answer, a batch's
// write to disk), not for the lanes' minutes.
const bodyRetryAfter = 5

// bodyBudget bounds the request-body bytes the proxy holds at once. A
// request reserves what it will hold before a byte of its body is read,
// waiting its turn while others hold the room: first come, first served,
// so a large body is not starved by small ones (and holds back the ones
// behind it while it waits, up to their MaxWait).
type bodyBudget struct {
	max int64 // ≤ 0: no bound
	sem *semaphore.Weighted
}

func newBodyBudget(max int64) *bodyBudget {
	b := &bodyBudget{max: max}
	if max > 0 {
		b.sem = semaphore.NewWeighted(max)
	}
	return b
}

// errBodyTooBig: a body that alone exceeds the bound can never be held.
var errBodyTooBig = errors.New("proxy: the body alone exceeds the body memory bound")

func (b *bodyBudget) release(n int64) {
	if b.sem != nil && n > 0 {
		b.sem.Release(n)
	}
}

// heldBody is the room a request body holds in the budget.
type heldBody struct {
	b    *bodyBudget
	held int64
}

// Release gives the room back; calling it again does nothing.
func (h *heldBody) Release() {
	h.b.release(h.held)
	h.held = 0
}

// handOff passes the room to another owner: h no longer gives it back;
// the func returned does, once.
func (h *heldBody) handOff() func() {
	b, n := h.b, h.held
	h.held = 0
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }
}

// reserve makes h hold total bytes, waiting for the difference until ctx
// ends (ctx is made on first need: a body that fits at once costs no
// timer). It answers the caller when it cannot: 413 when total alone
// exceeds the bound, 429 with retry-after when no room came within
// MaxWait; h is then released.
func (p *Proxy) reserve(w http.ResponseWriter, r *http.Request, h *heldBody, total, factor int64) bool {
	bb := p.bodies
	if total <= h.held || bb.sem == nil {
		h.held = max(h.held, total)
		return true
	}
	var err error
	switch {
	case total > bb.max:
		err = errBodyTooBig // what it holds already counts
	case bb.sem.TryAcquire(total - h.held):
	default:
		ctx, cancel := context.WithTimeout(r.Context(), p.cfg.MaxWait)
		err = bb.sem.Acquire(ctx, total-h.held)
		cancel()
	}
	if err == nil {
		h.held = total
		return true
	}
	h.Release()
	switch {
	case errors.Is(err, errBodyTooBig):
		p.fail(w, 413, api.ErrRequestTooLarge, fmt.Sprintf("Request body of %d bytes cannot be held: this proxy holds at most %d bytes of request bodies at once (--max-body-memory).", total/factor, bb.max/factor))
	case r.Context().Err() != nil: // the caller left
	default:
		w.Header().Set(api.HeaderRetryAfter, strconv.Itoa(bodyRetryAfter))
		w.Header().Set(api.HeaderRetryAfterMs, strconv.Itoa(bodyRetryAfter*1000))
		p.fail(w, 429, api.ErrRateLimit, fmt.Sprintf("sluice: the proxy already holds its bound of request bodies (--max-body-memory); no room within %s; retry later", p.cfg.MaxWait))
	}
	return false
}

// readBody reads a request body of at most limit bytes, holding factor ×
// its length in the body budget (the caller releases it once it no longer
// holds the body, or its copies). The room is reserved before the body is
// read, waiting for it up to MaxWait, and the body must arrive within
// BodyTimeout. On failure the caller has been answered: 413 over limit or
// over the budget, 429 with retry-after when no room came in time, 408
// when the body was too slow, 400 when it could not be read.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, limit, factor int64) ([]byte, heldBody, bool) {
	h := heldBody{b: p.bodies}
	n := r.ContentLength
	if n > limit {
		p.fail(w, 413, api.ErrRequestTooLarge, fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", limit))
		return nil, h, false
	}
	// The body's time starts once it has room: the wait is the proxy's.
	rd := deadliner(w)
	var b []byte
	var err error
	if n >= 0 {
		if !p.reserve(w, r, &h, n*factor, factor) {
			return nil, h, false
		}
		p.bodyDeadline(rd)
		// A body that says its length (net/http holds it to it) is read
		// into one buffer of that size: no copies as it grows, and what
		// it holds is what was reserved. The room is already reserved,
		// so a caller that declares a large body and stalls costs only
		// its reservation, until BodyTimeout (a fresh large buffer's
		// pages are not resident before they are written).
		b = make([]byte, n)
		_, err = io.ReadFull(r.Body, b)
	} else {
		// No length: room is reserved as the body grows.
		b = make([]byte, 0, 32<<10)
		if !p.reserve(w, r, &h, int64(cap(b))*factor, factor) {
			return nil, h, false
		}
		p.bodyDeadline(rd)
		for {
			if len(b) == cap(b) {
				next := min(int64(cap(b))*2, limit+1)
				if !p.reserve(w, r, &h, next*factor, factor) {
					return nil, h, false
				}
				grown := make([]byte, len(b), next)
				copy(grown, b)
				b = grown
			}
			var m int
			m, err = r.Body.Read(b[len(b):cap(b)])
			b = b[:len(b)+m]
			if int64(len(b)) > limit {
				err = &http.MaxBytesError{Limit: limit}
			}
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				break
			}
		}
	}
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		if rd != nil && p.cfg.BodyTimeout > 0 {
			_ = rd.SetReadDeadline(time.Time{})
		}
		return b, h, true
	case errors.As(err, &tooBig):
		p.fail(w, 413, api.ErrRequestTooLarge, fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", limit))
	case errors.As(err, &ne) && ne.Timeout():
		// The deadline stays passed: net/http's drain of the unread body
		// fails at once, and the connection is closed.
		w.Header().Set("Connection", "close")
		p.fail(w, http.StatusRequestTimeout, api.ErrInvalidRequest, fmt.Sprintf("sluice: the request body did not arrive within %s (--body-timeout)", p.cfg.BodyTimeout))
	default:
		p.fail(w, 400, api.ErrInvalidRequest, "could not read the request body")
	}
	h.Release()
	return nil, h, false
}

// readDeadliner is what sets a connection's read deadline: net/http's
// ResponseWriter (HTTP/1.1).
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// deadliner is w's read deadline setter (through a recorder), or nil.
func deadliner(w http.ResponseWriter) readDeadliner {
	for {
		if d, ok := w.(readDeadliner); ok {
			return d
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// bodyDeadline starts the body's BodyTimeout.
func (p *Proxy) bodyDeadline(rd readDeadliner) {
	if rd != nil && p.cfg.BodyTimeout > 0 {
		_ = rd.SetReadDeadline(time.Now().Add(p.cfg.BodyTimeout))
	}
}
