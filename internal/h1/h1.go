// Package h1 sends HTTP/1.1 requests over a pool of kept-alive connections
// to one origin, each request written and its answer read on the caller's
// goroutine, with nothing running in the background (docs/h1.md).
//
// It exists because net/http's transport hands every request and answer
// between the caller and two goroutines per connection; on a zero-latency
// upstream that cost more than the rest of an attempt. Parsing an answer
// is net/http's own http.ReadResponse, but for the common head, which
// quickHead reads into the same *http.Response (head.go).
package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config configures a Transport.
type Config struct {
	// Origin is where every request goes: scheme ("http" or "https") and
	// host, with a port or without. Its path, query and user are ignored.
	Origin *url.URL
	// Dial opens a connection (default: a net.Dialer with a 10 s timeout
	// and 30 s TCP keep-alive).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLS is the base TLS configuration for https (default: the system's
	// roots). ServerName defaults to the origin's host; NextProtos is
	// always http/1.1 alone.
	TLS *tls.Config
	// TLSHandshakeTimeout bounds a handshake (default 10 s).
	TLSHandshakeTimeout time.Duration
	// MaxIdle is how many idle connections are kept (default 256).
	MaxIdle int
	// IdleTimeout closes a connection idle that long (default 90 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds an answer's head (default 10 MiB, net/http's).
	MaxHeaderBytes int64
}

// Request is one request. Its fields are only read.
type Request struct {
	Method string
	// Target is the request target as sent: an absolute path, with a
	// query if any ("/v1/messages"), without spaces or control
	// characters.
	Target string
	Header http.Header
	// Body is sent with a Content-Length; nil sends none for GET, HEAD,
	// DELETE and OPTIONS and an empty body for other methods.
	Body []byte
	// Timeout bounds the attempt from its start to the end of the
	// answer's head and, unless Stream, to the end of its body. Zero: no
	// bound but the context's.
	Timeout time.Duration
	// Stream leaves the body's read unbounded by Timeout: the caller reads
	// it as long as it lasts, bounded by its context.
	Stream bool
}

// Transport is a pool of connections to one origin. It is safe for
// concurrent use.
type Transport struct {
	cfg      Config
	addr     string // host:port to dial
	tls      *tls.Config
	hostHead []byte // " HTTP/1.1\r\nHost: " + the origin's host + "\r\n"

	now func() time.Time // the clock of idleness (tests set it)

	mu     sync.Mutex
	idle   []*conn // a stack: idle[len-1] went idle last
	closed bool
	// sweep closes connections idle for IdleTimeout when no request
	// comes to do it; armed while the pool holds any.
	sweep *time.Timer
	armed bool
}

// New returns a Transport for cfg.Origin.
func New(cfg Config) (*Transport, error) {
	u := cfg.Origin
	if u == nil || u.Host == "" {
		return nil, errors.New("h1: no origin host")
	}
	t := &Transport{cfg: cfg, now: time.Now}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
		tc := &tls.Config{}
		if cfg.TLS != nil {
			tc = cfg.TLS.Clone()
		}
		if tc.ServerName == "" {
			tc.ServerName = u.Hostname()
		}
		tc.NextProtos = []string{"http/1.1"}
		t.tls = tc
	default:
		return nil, fmt.Errorf("h1: scheme %q is neither http nor https", u.Scheme)
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	if t.cfg.Dial == nil {
		t.cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if t.cfg.TLSHandshakeTimeout <= 0 {
		t.cfg.TLSHandshakeTimeout = 10 * time.Second
	}
	if t.cfg.MaxIdle <= 0 {
		t.cfg.MaxIdle = 256
	}
	if t.cfg.IdleTimeout <= 0 {
		t.cfg.IdleTimeout = 90 * time.Second
	}
	if t.cfg.MaxHeaderBytes <= 0 {
		t.cfg.MaxHeaderBytes = 10 << 20
	}
	if !validHeaderValue(u.Host) {
		return nil, fmt.Errorf("h1: invalid host %q", u.Host)
	}
	t.hostHead = []byte(" HTTP/1.1\r\nHost: " + u.Host + "\r\n")
	return t, nil
}

// Errors Do returns before anything is sent.
var (
	ErrClosed = errors.New("h1: transport closed")
	// ErrRequest: the request cannot be written as HTTP/1.1 (a method,
	// target or header refused by checkRequest); sending it again cannot
	// help.
	ErrRequest       = errors.New("h1: request cannot be sent")
	errHeaderTooLong = errors.New("h1: answer's head exceeds the limit")
)

// bigBody is the body size from which the request is written by a
// goroutine of its own while the answer is read (docs/h1.md).
const bigBody = 64 << 10

// Do sends r and returns the answer with its body unread: the caller reads
// it to the end or closes it (either ends the attempt; reading to the end
// also returns the connection to the pool). wrote reports whether the
// whole request was written. err is non-nil only without an answer; then
// resp is nil.
func (t *Transport) Do(ctx context.Context, r *Request) (resp *http.Response, wrote bool, err error) {
	if err := checkRequest(r); err != nil {
		return nil, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	var deadline time.Time
	if r.Timeout > 0 {
		deadline = time.Now().Add(r.Timeout)
	}
	c, err := t.get(ctx, deadline)
	if err != nil {
		return nil, false, cutError(ctx, r.Timeout, err)
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		c.close()
		return nil, false, err
	}
	c.cut = nil
	if ctx.Done() != nil {
		nc := c.nc
		c.cut = context.AfterFunc(ctx, func() { nc.SetDeadline(aLongTimeAgo) })
	}

	head := c.appendHead(r)
	var writeDone chan error
	if len(r.Body) < bigBody {
		c.wbuf = append(head, r.Body...)
		_, err = c.nc.Write(c.wbuf)
		if err != nil {
			return nil, false, c.fail(ctx, r, err)
		}
		wrote = true
	} else {
		// A large body goes while the answer is read: a server may answer
		// before it has read it all.
		c.wbuf = head
		writeDone = make(chan error, 1)
		go func() {
			bufs := net.Buffers{head, r.Body}
			_, err := bufs.WriteTo(c.nc)
			writeDone <- err
		}()
	}

	resp, err = c.readHead(r.Method)
	if writeDone != nil {
		var werr error
		select {
		case werr = <-writeDone:
		default:
			// An answer (or a failure) before the body was taken: end the
			// write, keep the read side for the answer's body.
			c.nc.SetWriteDeadline(aLongTimeAgo)
			werr = <-writeDone
		}
		wrote = werr == nil
		if err == nil && !wrote {
			// The answer stands; the connection, half written, does not.
			resp.Close = true
		}
	}
	if err != nil {
		return nil, wrote, c.fail(ctx, r, err)
	}
	if r.Stream && r.Timeout > 0 {
		// The head is in: the body is the caller's, as long as it lasts.
		// Cleared before the context is looked at, so a cancellation whose
		// hook ran first is not lost.
		c.nc.SetDeadline(time.Time{})
		if ctx.Err() != nil {
			c.nc.SetDeadline(aLongTimeAgo)
		}
	}
	b := &body{rc: resp.Body, c: c, ctx: ctx, keep: !resp.Close}
	if !r.Stream {
		b.timeout = r.Timeout // a streamed body's deadline was cleared
	}
	resp.Body = b
	if resp.ContentLength == 0 || noBody(resp.StatusCode) || r.Method == "HEAD" {
		// Nothing to read: ReadResponse's body is at EOF already.
		b.release(true)
	}
	return resp, wrote, nil
}

// noBody reports whether an answer of status has no body whatever its
// headers say (RFC 9112 §6.3).
func noBody(status int) bool {
	return status == 204 || status == 304 || (status >= 100 && status < 200)
}

// aLongTimeAgo is a deadline in the past: it ends a blocked read or write
// at once.
var aLongTimeAgo = time.Unix(1, 0)

// CloseIdle closes the idle connections. Connections in use are closed
// when their requests end if the transport was closed.
func (t *Transport) CloseIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// Close closes the idle connections and every connection in use as its
// request ends; Do fails with ErrClosed from then on.
func (t *Transport) Close() {
	t.mu.Lock()
	t.closed = true
	if t.sweep != nil {
		t.sweep.Stop()
	}
	t.mu.Unlock()
	t.CloseIdle()
}

// get returns a live idle connection, or a new one dialled by deadline
// (zero: no bound but ctx's).
func (t *Transport) get(ctx context.Context, deadline time.Time) (*conn, error) {
	now := t.now()
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, ErrClosed
		}
		t.expire(now)
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if c.br.Buffered() == 0 && c.alive() && c.tlsQuiet() {
			return c, nil
		}
		c.nc.Close()
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	return t.dial(ctx)
}

// expire closes the connections idle for IdleTimeout by now. t.mu held.
func (t *Transport) expire(now time.Time) {
	n := 0
	for n < len(t.idle) && now.Sub(t.idle[n].since) >= t.cfg.IdleTimeout {
		t.idle[n].nc.Close()
		t.idle[n] = nil
		n++
	}
	if n > 0 {
		t.idle = append(t.idle[:0], t.idle[n:]...)
	}
}

// put returns c to the pool, or closes it.
func (t *Transport) put(c *conn) {
	now := t.now()
	t.mu.Lock()
	if t.closed || len(t.idle) >= t.cfg.MaxIdle {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	c.since = now
	t.idle = append(t.idle, c)
	t.expire(now)
	if !t.armed {
		t.arm(t.cfg.IdleTimeout)
	}
	t.mu.Unlock()
}

// arm schedules the idle sweep in d. t.mu held.
func (t *Transport) arm(d time.Duration) {
	t.armed = true
	if t.sweep == nil {
		t.sweep = time.AfterFunc(d, t.sweepIdle)
		return
	}
	t.sweep.Reset(d)
}

// sweepIdle closes the connections idle for IdleTimeout, and comes back
// when the oldest left will be.
func (t *Transport) sweepIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = false
	if t.closed {
		return
	}
	now := t.now()
	t.expire(now)
	if len(t.idle) > 0 {
		t.arm(t.idle[0].since.Add(t.cfg.IdleTimeout).Sub(now))
	}
}

// tlsQuiet reports whether a TLS connection holds no record crypto/tls
// has read off the socket but nobody has asked for: alive sees only the
// socket, and a server's unasked answer read together with the last one
// would be the next request's answer. The read under a deadline already
// past takes what is held and asks the socket nothing; crypto/tls does
// not keep a timeout as its connection's error.
func (c *conn) tlsQuiet() bool {
	if _, ok := c.nc.(*tls.Conn); !ok {
		return true
	}
	c.nc.SetReadDeadline(aLongTimeAgo)
	_, err := c.br.Peek(1)
	return errors.Is(err, os.ErrDeadlineExceeded) && c.br.Buffered() == 0
}

// dial opens a connection, with TLS for https.
func (t *Transport) dial(ctx context.Context) (*conn, error) {
	nc, err := t.cfg.Dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t, nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		hctx, cancel := context.WithTimeout(ctx, t.cfg.TLSHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, err
		}
		c.nc = tc
	}
	c.br = bufio.NewReaderSize(c, 16<<10)
	c.keys = make(map[string]string)
	return c, nil
}

// conn is one connection and what is reused with it.
type conn struct {
	t     *Transport
	nc    net.Conn          // the connection requests go over (TLS or not)
	raw   syscall.RawConn   // the socket under it, for alive; nil if none
	br    *bufio.Reader     // reads through conn.Read
	keys  map[string]string // header names seen, canonical (quickHead)
	wbuf  []byte
	limit int64 // what conn.Read may still read
	since time.Time
	cut   func() bool // stops the context's hook; nil without one
	// peek asks the socket whether it is alive (alive_unix.go), peekOK
	// its answer.
	peek   func(fd uintptr)
	peekOK bool
}

// Read reads from the connection, at most limit bytes: the answer's head
// is read under MaxHeaderBytes.
func (c *conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeaderTooLong
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	return n, err
}

// appendHead writes r's request line and headers into c's buffer.
func (c *conn) appendHead(r *Request) []byte {
	b := c.wbuf[:0]
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.Target...)
	b = append(b, c.t.hostHead...)
	for name, vs := range r.Header {
		for _, v := range vs {
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if r.Body != nil || bodyMethod(r.Method) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.Body)), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// bodyMethod reports whether a request of method carries a body even
// when empty (net/http sends Content-Length: 0 for these).
func bodyMethod(m string) bool {
	return m == "POST" || m == "PUT" || m == "PATCH"
}

// headRequest tells http.ReadResponse that an answer has no body
// whatever its headers say; nil means any other method.
var headRequest = &http.Request{Method: "HEAD"}

// readHead reads the answer's status line and headers, skipping interim
// (1xx) answers.
func (c *conn) readHead(method string) (*http.Response, error) {
	var req *http.Request
	if method == "HEAD" {
		req = headRequest
	}
	c.limit = c.t.cfg.MaxHeaderBytes
	for {
		var resp *http.Response
		if req == nil {
			resp = quickHead(c.br, c.keys) // head.go
		}
		if resp == nil {
			var err error
			if resp, err = http.ReadResponse(c.br, req); err != nil {
				return nil, err
			}
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("h1: the server switched protocols, which no request asked")
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			continue
		}
		c.limit = math.MaxInt64
		return resp, nil
	}
}

// fail closes c after an error and returns the error to give: the
// context's when its end cut the attempt, the timeout's when that did.
func (c *conn) fail(ctx context.Context, r *Request, err error) error {
	if c.cut != nil {
		c.cut()
		c.cut = nil
	}
	c.close()
	return cutError(ctx, r.Timeout, err)
}

// cutError is the error to give for err, which ended a dial, a read or a
// write: the context's cause when its end cut the attempt (as net/http
// gives), a timeoutError when the attempt's own deadline did (a
// connection's deadline, or the dial's context deadline), err otherwise.
func cutError(ctx context.Context, timeout time.Duration, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("h1: %w", context.Cause(ctx))
	}
	if timeout > 0 {
		return &timeoutError{after: timeout, cause: err}
	}
	return err
}

// timeoutError is an attempt cut by Request.Timeout. Like net/http's for
// a context deadline, it is a timeout (Timeout, for url.Error's) and is
// context.DeadlineExceeded (errors.Is).
type timeoutError struct {
	after time.Duration
	cause error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("h1: no answer within %v: %v", e.after, e.cause)
}
func (e *timeoutError) Timeout() bool        { return true }
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
func (e *timeoutError) Unwrap() error        { return e.cause }

func (c *conn) close() { c.nc.Close() }

// body is an answer's body: reading it to the end gives its connection
// back to the pool. Close may come while a Read is blocked (a caller
// ending a stream): the first of them to end the body owns the
// connection's fate, the other leaves it alone.
type body struct {
	rc      io.ReadCloser // ReadResponse's or quickHead's
	c       *conn
	ctx     context.Context
	timeout time.Duration // the request's, for the error of a read it cut
	keep    bool          // the answer allows the connection's reuse
	state   atomic.Int32
}

// The states of a body.
const (
	bodyOpen   int32 = iota
	bodyDone         // read to its end
	bodyClosed       // closed first, or its read failed
)

// errBodyClosed is a Read after Close, as net/http words it.
var errBodyClosed = errors.New("h1: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyDone:
		return 0, io.EOF
	case bodyClosed:
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.release(true)
	case err != nil:
		b.release(false)
		err = cutError(b.ctx, b.timeout, err)
	}
	return n, err
}

// Close ends the answer: a body not read to its end closes the connection
// (draining an unknown rest could take as long as the body), which also
// ends a Read blocked on it.
func (b *body) Close() error {
	b.release(false)
	return nil
}

// release ends b's hold on its connection, once: back to the pool if the
// body was read whole, the answer allows it, nothing follows the answer
// and the context's hook never fired; closed otherwise.
func (b *body) release(whole bool) {
	to := bodyClosed
	if whole {
		to = bodyDone
	}
	if !b.state.CompareAndSwap(bodyOpen, to) {
		return
	}
	c := b.c
	hooked := c.cut == nil || c.cut()
	c.cut = nil
	if whole && b.keep && hooked && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.close()
}

// checkRequest refuses what cannot be written as HTTP/1.1: a method or
// header name that is not a token, a value with a control character, a
// target that is not an absolute path or holds a space or a control
// character.
func checkRequest(r *Request) error {
	if !validToken(r.Method) {
		return fmt.Errorf("%w: invalid method %q", ErrRequest, r.Method)
	}
	if r.Target == "" || r.Target[0] != '/' {
		return fmt.Errorf("%w: target %q is not an absolute path", ErrRequest, r.Target)
	}
	for i := 0; i < len(r.Target); i++ {
		// A space or a control character would break the request line;
		// other bytes go as they are, as net/http sends a raw query.
		if b := r.Target[i]; b <= ' ' || b == 0x7f {
			return fmt.Errorf("%w: target %q has a space or a control character", ErrRequest, r.Target)
		}
	}
	return CheckHeader(r.Header)
}

// CheckHeader refuses a header that cannot be written as HTTP/1.1 (as
// net/http does): a name that is not a token, one the transport owns
// (Host, Content-Length, Transfer-Encoding, Connection), a value with a
// control character other than a tab. The error is ErrRequest and never
// quotes a value (it could be a credential).
func CheckHeader(h http.Header) error {
	for name, vs := range h {
		if !validToken(name) {
			return fmt.Errorf("%w: invalid header name %q", ErrRequest, name)
		}
		if Owned(http.CanonicalHeaderKey(name)) {
			return fmt.Errorf("%w: header %s is the transport's", ErrRequest, name)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				// The value is not quoted: it could be a credential.
				return fmt.Errorf("%w: invalid value for header %s", ErrRequest, name)
			}
		}
	}
	return nil
}

// Owned reports whether the header of canonical name is the transport's
// to write (the framing and the connection), never a request's.
func Owned(name string) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection":
		return true
	}
	return false
}

// validToken reports whether s is an RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte[s[i]] {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v has no control character other than
// a horizontal tab (net/http's httpguts.ValidHeaderFieldValue).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

var isTokenByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
