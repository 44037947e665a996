// Package zeroapi is a stand-in for the Messages API with no latency and
// no limits that costs its host as little as it can: the upstream `sluice-bench
// capacity` measures the engine against. The simulator (sim) models
// the API's world — buckets, faults, caching, batches — at a CPU cost a
// request of its own that, on a small machine, is most of what the engine
// would be measured against (BENCHMARKS.md, "(b) Capacity", and
// docs/overhead.md give the figures).
//
// It speaks HTTP/1.1 itself, one goroutine per connection, and answers:
//
//   - POST /v1/messages: a Message whose usage says the body's length ÷ 4
//     input tokens and OutputMin–OutputMax output tokens (by a counter);
//     with the answer's org id, request id and Date headers and, as the
//     API sends with every answer, the twelve anthropic-ratelimit-*
//     headers, of limits far above anything one process reaches and
//     buckets always full (so the engine reads and learns from them as
//     from the API's); 401 for a key it does not know. A body answered
//     before counts as an extra answer.
//   - POST /v1/messages/count_tokens: the key probe, {"input_tokens": n}.
//   - GET /_zero/stats: what it answered (Stats).
//
// It checks nothing a faithful API would refuse beyond the key, the
// framing and "stream": it is a measuring instrument, not a world.
package zeroapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/apimodel"
)

// Config configures a Server.
type Config struct {
	// Orgs is the number of organizations, each with one key (default 3).
	Orgs int
	// OutputMin and OutputMax bound the output tokens of an answer
	// (default 8–32); an answer stops at max_tokens only when it says so,
	// never here.
	OutputMin, OutputMax int
}

// Key returns the API key of org i (0-based).
func Key(i int) string { return fmt.Sprintf("sk-ant-fake-zero-org%d-%04d", i+1, i+1) }

// OrgID returns the organization id the answers to org i's key carry.
func OrgID(i int) string { return fmt.Sprintf("00000000-2e40-4000-8000-%012d", i+1) }

// Stats is what a Server answered.
type Stats struct {
	// Messages counts answered Messages calls; Extra those whose body had
	// been answered before (a request sent twice).
	Messages, Extra int64
	// CountTokens counts key probes; Refused answers that were not 2xx.
	CountTokens, Refused int64
}

// Server serves the stand-in. It is safe for concurrent use.
type Server struct {
	cfg    Config
	orgs   map[string]int // key → org
	orgIDs []string

	messages, extra, countTokens, refused, ids atomic.Int64
	seed                                       maphash.Seed
	seen                                       [64]seenShard
	stamp                                      atomic.Pointer[stamp]

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	done  bool
}

type seenShard struct {
	mu sync.Mutex
	m  map[uint64]struct{}
	_  [40]byte // its own cache line
}

// stamp is the headers that change once a second: Date and the
// rate-limit headers.
type stamp struct {
	sec     int64
	headers []byte // each line ending in CRLF
}

// Limits are the per-minute limits the rate-limit headers state: far
// above what one process sends (24k requests a second is 1.4M a minute
// over every org). The benchmarks' simulator states the same (`unlimited`
// in cmd/sluice-bench/engine.go), so the two upstreams are one world.
var Limits = apimodel.Limits{RPM: 10_000_000, ITPM: 10_000_000_000, OTPM: 2_000_000_000}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Orgs <= 0 {
		cfg.Orgs = 3
	}
	if cfg.OutputMin <= 0 {
		cfg.OutputMin = 8
	}
	if cfg.OutputMax < cfg.OutputMin {
		cfg.OutputMax = max(cfg.OutputMin, 32)
	}
	s := &Server{cfg: cfg, orgs: map[string]int{}, seed: maphash.MakeSeed(), conns: map[net.Conn]struct{}{}}
	for i := range cfg.Orgs {
		s.orgs[Key(i)] = i
		s.orgIDs = append(s.orgIDs, OrgID(i))
	}
	for i := range s.seen {
		s.seen[i].m = map[uint64]struct{}{}
	}
	return s
}

// Stats returns what the server has answered so far.
func (s *Server) Stats() Stats {
	return Stats{Messages: s.messages.Load(), Extra: s.extra.Load(), CountTokens: s.countTokens.Load(), Refused: s.refused.Load()}
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.ln = ln
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.done
			s.mu.Unlock()
			if done {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops Serve and closes every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	s.done = true
	ln := s.ln
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for c := range conns {
		c.Close()
	}
	return nil
}

// request is what serveConn read of one request.
type request struct {
	method, target []byte
	key            []byte
	length         int
	close, chunked bool
	body           []byte
}

func (r *request) reset() {
	*r = request{method: r.method[:0], target: r.target[:0], key: r.key[:0]}
}

var errBadRequest = errors.New("zeroapi: malformed request")

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c, 16<<10)
	var out, msg, body []byte
	var r request
	for {
		r.reset()
		if err := readHead(br, &r); err != nil {
			if err != io.EOF {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
			}
			return
		}
		if r.chunked {
			c.Write([]byte("HTTP/1.1 411 Length Required\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
			return
		}
		if cap(body) < r.length {
			body = make([]byte, r.length)
		}
		r.body = body[:r.length]
		if _, err := io.ReadFull(br, r.body); err != nil {
			return
		}
		out, msg = s.answer(out[:0], msg[:0], &r)
		if _, err := c.Write(out); err != nil || r.close {
			return
		}
	}
}

// readHead reads a request line and its headers.
func readHead(br *bufio.Reader, r *request) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == io.EOF && len(line) == 0 {
			return io.EOF
		}
		return errBadRequest
	}
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1 {
		return errBadRequest
	}
	// The line is valid only until the next read: keep copies.
	r.method = append(r.method, line[:sp1]...)
	r.target = append(r.target, line[sp1+1:sp2]...)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return errBadRequest
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return errBadRequest
		}
		value = bytes.TrimSpace(value)
		switch {
		case equalFold(name, "content-length"):
			n, err := strconv.Atoi(string(value))
			if err != nil || n < 0 || n > 64<<20 {
				return errBadRequest
			}
			r.length = n
		case equalFold(name, "x-api-key"):
			r.key = append(r.key[:0], value...)
		case equalFold(name, "authorization"):
			if v, ok := bytes.CutPrefix(value, []byte("Bearer ")); ok {
				r.key = append(r.key[:0], v...)
			}
		case equalFold(name, "connection"):
			r.close = equalFold(value, "close")
		case equalFold(name, "transfer-encoding"):
			r.chunked = true
		}
	}
}

// equalFold reports whether b is s, a lower-case ASCII name, in any case:
// ASCII only, as HTTP's names are (bytes.EqualFold folds Unicode too).
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// answer appends the whole answer to r to out; msg is a buffer for a
// Message's body, returned for reuse.
func (s *Server) answer(out, msg []byte, r *request) ([]byte, []byte) {
	if string(r.method) == "GET" && string(r.target) == "/_zero/stats" {
		b, _ := json.Marshal(s.Stats())
		return s.head(out, 200, "", b), msg
	}
	org, known := s.orgs[string(r.key)]
	if !known {
		s.refused.Add(1)
		return s.head(out, 401, "", api.NewErrorBody(api.ErrAuthentication, "", "invalid x-api-key").Marshal()), msg
	}
	orgID := s.orgIDs[org]
	switch {
	case string(r.method) == "POST" && string(r.target) == "/v1/messages":
		if bytes.Contains(r.body, []byte(`"stream":true`)) {
			s.refused.Add(1)
			return s.head(out, 400, orgID, api.NewErrorBody(api.ErrInvalidRequest, "", "zeroapi does not stream").Marshal()), msg
		}
		if s.seenBefore(r.body) {
			s.extra.Add(1)
		}
		s.messages.Add(1)
		msg = s.message(msg, r.body)
		return s.head(out, 200, orgID, msg), msg
	case string(r.method) == "POST" && string(r.target) == "/v1/messages/count_tokens":
		s.countTokens.Add(1)
		msg = strconv.AppendInt(append(msg, `{"input_tokens":`...), int64(len(r.body)/4+1), 10)
		msg = append(msg, '}')
		return s.head(out, 200, orgID, msg), msg
	}
	s.refused.Add(1)
	return s.head(out, 404, orgID, api.NewErrorBody(api.ErrNotFound, "", "zeroapi answers POST /v1/messages and /v1/messages/count_tokens").Marshal()), msg
}

// seenBefore records body and reports whether it had been answered.
func (s *Server) seenBefore(body []byte) bool {
	h := maphash.Bytes(s.seed, body)
	sh := &s.seen[h%uint64(len(s.seen))]
	sh.mu.Lock()
	_, dup := sh.m[h]
	sh.m[h] = struct{}{}
	sh.mu.Unlock()
	return dup
}

// message appends a Message answering body to out.
func (s *Server) message(out, body []byte) []byte {
	n := s.messages.Load()
	outTokens := s.cfg.OutputMin + int(n%int64(s.cfg.OutputMax-s.cfg.OutputMin+1))
	out = append(out, `{"id":"msg_zero_`...)
	out = strconv.AppendInt(out, s.ids.Add(1), 36)
	out = append(out, `","type":"message","role":"assistant","model":`...)
	out = appendModel(out, body)
	out = append(out, `,"content":[{"type":"text","text":"`...)
	for i := range outTokens {
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, "word"...)
	}
	out = append(out, `"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":`...)
	out = strconv.AppendInt(out, int64(len(body)/4+1), 10)
	out = append(out, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`...)
	out = strconv.AppendInt(out, int64(outTokens), 10)
	return append(out, `,"service_tier":"standard"}}`...)
}

// appendModel appends the body's "model" value (a JSON string) to out,
// or "unknown" when it has none in the plain form.
func appendModel(out, body []byte) []byte {
	i := bytes.Index(body, []byte(`"model":"`))
	if i >= 0 {
		v := body[i+len(`"model":`):]
		if j := bytes.IndexByte(v[1:], '"'); j >= 0 && bytes.IndexByte(v[1:j+1], '\\') < 0 {
			return append(out, v[:j+2]...)
		}
	}
	return append(out, `"unknown"`...)
}

// head appends an answer of status with body to out.
func (s *Server) head(out []byte, status int, orgID string, body []byte) []byte {
	out = s.headStart(out, status, orgID, s.ids.Add(1))
	out = append(out, "Content-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}

// headStart appends the status line and the headers every answer has.
func (s *Server) headStart(out []byte, status int, orgID string, id int64) []byte {
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\nContent-Type: application/json\r\nRequest-Id: req_zero_"...)
	out = strconv.AppendInt(out, id, 36)
	out = append(out, "\r\n"...)
	if orgID != "" {
		out = append(out, "Anthropic-Organization-Id: "...)
		out = append(out, orgID...)
		out = append(out, "\r\n"...)
	}
	return append(out, s.secondHeaders()...)
}

// secondHeaders is the Date header of this second and the rate-limit
// headers of an always-full bucket (remaining one below the limit, reset
// by the next second), made once a second.
func (s *Server) secondHeaders() []byte {
	now := time.Now()
	if st := s.stamp.Load(); st != nil && st.sec == now.Unix() {
		return st.headers
	}
	b := []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")
	reset := now.UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
	for _, l := range []struct {
		name       api.Limiter
		limit, rem int64
	}{
		{api.LimiterRequests, Limits.RPM, Limits.RPM - 1},
		{api.LimiterInputTokens, Limits.ITPM, Limits.ITPM - 1000},
		{api.LimiterOutputTokens, Limits.OTPM, Limits.OTPM - 1000},
		{api.LimiterTokens, Limits.ITPM + Limits.OTPM, Limits.ITPM + Limits.OTPM - 1000},
	} {
		b = fmt.Appendf(b, "%s: %d\r\n%s: %d\r\n%s: %s\r\n",
			api.LimitHeaderName(l.name, "limit"), l.limit,
			api.LimitHeaderName(l.name, "remaining"), l.rem,
			api.LimitHeaderName(l.name, "reset"), reset)
	}
	s.stamp.Store(&stamp{sec: now.Unix(), headers: b})
	return b
}
