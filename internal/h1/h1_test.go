package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer accepts loopback connections and runs serve on each: the
// test scripts the server's bytes exactly. It counts connections.
type rawServer struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
}

func newRawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) transport(t *testing.T, mutate func(*Config)) *Transport {
	t.Helper()
	return newTransport(t, "http://"+s.ln.Addr().String(), mutate)
}

func newTransport(t *testing.T, origin string, mutate func(*Config)) *Transport {
	t.Helper()
	u, err := url.Parse(origin)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Origin: u}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// nextRequest reads the next request on a server's connection, its body
// read and dropped; false at the connection's end.
func nextRequest(br *bufio.Reader) (*http.Request, bool) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	io.Copy(io.Discard, req.Body)
	return req, true
}

// readAll reads an answer's body to its end and closes it.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return string(b)
}

func post(body string) *Request {
	return &Request{Method: "POST", Target: "/v1/messages", Header: http.Header{"X-Api-Key": {"sk-test"}, "Content-Type": {"application/json"}}, Body: []byte(body)}
}

// TestRequestsAreWrittenAsNetHTTPReadsThem: net/http's server reads what
// Do writes — method, target, headers, Host, the body by its length, an
// empty POST with Content-Length: 0, a GET with none — and answers one
// after another share one connection.
func TestRequestsAreWrittenAsNetHTTPReadsThem(t *testing.T) {
	type seen struct {
		method, uri, host, key, body string
		length                       int64
		te                           []string
	}
	got := make(chan seen, 10)
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("X-Api-Key"), string(b), r.ContentLength, r.TransferEncoding}
		w.Header().Set("X-Answer", "yes")
		io.WriteString(w, "answer to "+r.Method)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := newTransport(t, srv.URL, nil)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		r    *Request
		want seen
	}{
		{post(`{"a":1}`), seen{"POST", "/v1/messages", host, "sk-test", `{"a":1}`, 7, nil}},
		{&Request{Method: "POST", Target: "/v1/x?y=1&z=%20"}, seen{"POST", "/v1/x?y=1&z=%20", host, "", "", 0, nil}},
		{&Request{Method: "GET", Target: "/v1/models"}, seen{"GET", "/v1/models", host, "", "", 0, nil}},
	} {
		resp, wrote, err := tr.Do(context.Background(), tc.r)
		if err != nil || !wrote {
			t.Fatalf("%s %s: wrote %v, err %v", tc.r.Method, tc.r.Target, wrote, err)
		}
		if b := readAll(t, resp); resp.StatusCode != 200 || b != "answer to "+tc.r.Method || resp.Header.Get("X-Answer") != "yes" {
			t.Errorf("%s: answer %d %q, header %v", tc.r.Method, resp.StatusCode, b, resp.Header)
		}
		s := <-got
		if s.method != tc.want.method || s.uri != tc.want.uri || s.host != tc.want.host || s.key != tc.want.key || s.body != tc.want.body || s.length != tc.want.length || len(s.te) != 0 {
			t.Errorf("server saw %+v, want %+v", s, tc.want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("three requests one after another opened %d connections, want 1", n)
	}
}

// TestFramings: every way an answer can say where it ends is read as
// net/http reads it, and the connection is reused exactly when the answer
// allows it and was read to its end.
func TestFramings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string // what the server writes after reading a request
		status int
		body   string
		reuse  bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", true},
		{"chunked with a trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n", 200, "hello", true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", 204, "", true},
		{"zero length", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "", true},
		{"interim answers first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", true},
		{"connection close", "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", 429, "no", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false},
		{"read to close", "HTTP/1.1 200 OK\r\n\r\nuntil the end", 200, "until the end", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The server keeps every connection open (but one whose
			// body ends with it): reuse is the client's decision alone.
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					_, ok := nextRequest(br)
					if !ok {
						return
					}
					io.WriteString(c, tc.answer)
					if tc.name == "read to close" {
						return
					}
				}
			})
			tr := srv.transport(t, nil)
			for i := range 3 {
				resp, _, err := tr.Do(context.Background(), post("{}"))
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if b := readAll(t, resp); resp.StatusCode != tc.status || b != tc.body {
					t.Fatalf("request %d: %d %q, want %d %q", i, resp.StatusCode, b, tc.status, tc.body)
				}
			}
			want := int32(3)
			if tc.reuse {
				want = 1
			}
			if n := srv.conns.Load(); n != want {
				t.Errorf("three requests opened %d connections, want %d", n, want)
			}
		})
	}
}

// TestConnectionsNotReadToTheEndAreNotReused: a body closed before its
// end, an answer followed by bytes nobody asked for, and a connection
// the server closed while it was idle are never used again, and the
// next request does not fail for them.
func TestConnectionsNotReadToTheEndAreNotReused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(c net.Conn) // once the answer is written
		read  bool             // the client reads the body to its end
	}{
		{"body closed early", nil, false},
		{"unsolicited bytes", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra") }, true},
		{"unsolicited bytes read with the answer", nil, true},
		{"closed while idle", func(c net.Conn) { c.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wrote := make(chan struct{}, 4)
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					_, ok := nextRequest(br)
					if !ok {
						return
					}
					answer := "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"
					if tc.name == "unsolicited bytes read with the answer" {
						answer += "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra" // one write: one read
					}
					io.WriteString(c, answer)
					if tc.after != nil {
						tc.after(c)
					}
					wrote <- struct{}{}
				}
			})
			tr := srv.transport(t, nil)
			for i := range 2 {
				resp, _, err := tr.Do(context.Background(), post("{}"))
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				<-wrote
				if tc.read {
					if b := readAll(t, resp); b != "0123456789" {
						t.Fatalf("request %d: body %q", i, b)
					}
				} else {
					buf := make([]byte, 3)
					io.ReadFull(resp.Body, buf)
					resp.Body.Close()
				}
				// Let the server's close or extra bytes arrive before the
				// next request asks the pool.
				time.Sleep(20 * time.Millisecond)
			}
			if n := srv.conns.Load(); n != 2 {
				t.Errorf("two requests opened %d connections, want 2 (the first one must not be reused)", n)
			}
		})
	}
}

// TestCancelEndsABlockedAttempt: a context ended while the answer is
// awaited ends Do at once with the context's error, and its connection is
// not reused; the request counts as written.
func TestCancelEndsABlockedAttempt(t *testing.T) {
	release := make(chan struct{})
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		_, ok := nextRequest(br)
		if !ok {
			return
		}
		<-release
	})
	t.Cleanup(func() { close(release) })
	tr := srv.transport(t, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	errWithdrawn := errors.New("withdrawn")
	time.AfterFunc(50*time.Millisecond, func() { cancel(errWithdrawn) })
	start := time.Now()
	resp, wrote, err := tr.Do(ctx, post("{}"))
	if resp != nil || !errors.Is(err, errWithdrawn) || !wrote {
		t.Fatalf("canceled attempt: resp %v, wrote %v, err %v; want the cause, written", resp, wrote, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v to end the attempt", d)
	}
	tr.mu.Lock()
	idle := len(tr.idle)
	tr.mu.Unlock()
	if idle != 0 {
		t.Errorf("the canceled attempt's connection went back to the pool")
	}
}

// TestTimeoutBoundsTheHeadAndTheBody: Timeout ends an attempt whose
// answer does not come, or whose body stalls; a streamed attempt's body
// may take longer than Timeout.
func TestTimeoutBoundsTheHeadAndTheBody(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, ok := nextRequest(br)
			if !ok {
				return
			}
			switch req.URL.Path {
			case "/silent":
				time.Sleep(400 * time.Millisecond)
				return
			case "/slow-body", "/stream":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
				time.Sleep(300 * time.Millisecond)
				io.WriteString(c, "cd")
			}
		}
	})
	tr := srv.transport(t, nil)
	r := &Request{Method: "POST", Target: "/silent", Body: []byte("{}"), Timeout: 100 * time.Millisecond}
	if _, wrote, err := tr.Do(context.Background(), r); err == nil || !wrote || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Errorf("silent server: wrote %v, err %v; want a timeout", wrote, err)
	}
	r = &Request{Method: "POST", Target: "/slow-body", Body: []byte("{}"), Timeout: 100 * time.Millisecond}
	resp, _, err := tr.Do(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("a body stalled past the timeout was read whole")
	}
	resp.Body.Close()
	r = &Request{Method: "POST", Target: "/stream", Body: []byte("{}"), Timeout: 100 * time.Millisecond, Stream: true}
	if resp, _, err = tr.Do(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); b != "abcd" {
		t.Errorf("streamed body %q, want it whole past the timeout", b)
	}
}

// TestLargeBodyAnsweredEarly: a server that answers a large body before
// reading it (an early 413) and hangs up is heard: the answer comes back,
// the request counts as not written whole, the connection is not reused.
// A large body the server reads arrives whole.
func TestLargeBodyAnsweredEarly(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 8<<20)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/read" {
			n, _ := io.Copy(io.Discard, req.Body)
			answer := strconv.FormatInt(n, 10)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(answer))+"\r\n\r\n"+answer)
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbig")
		c.(*net.TCPConn).CloseWrite()
		time.Sleep(100 * time.Millisecond) // then the deferred close resets the rest
	})
	tr := srv.transport(t, nil)
	resp, wrote, err := tr.Do(context.Background(), &Request{Method: "POST", Target: "/early", Body: big})
	if err != nil {
		t.Fatalf("early answer: %v", err)
	}
	if b := readAll(t, resp); resp.StatusCode != 413 || b != "big" || wrote {
		t.Errorf("early answer: %d %q, wrote %v; want 413 \"big\", not written whole", resp.StatusCode, b, wrote)
	}
	resp, wrote, err = tr.Do(context.Background(), &Request{Method: "POST", Target: "/read", Body: big})
	if err != nil || !wrote {
		t.Fatalf("large body: wrote %v, err %v", wrote, err)
	}
	if b := readAll(t, resp); b != strconv.Itoa(len(big)) {
		t.Errorf("server read %s bytes, want %d", b, len(big))
	}
}

// TestInvalidRequestsAreRefusedBeforeWriting: a header value with a line
// break (header injection), a name that is not a token, a header the
// transport owns, a target with a space or not absolute, and a method
// that is not a token are refused without a byte sent; the error never
// carries the value.
func TestInvalidRequestsAreRefusedBeforeWriting(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	tr := srv.transport(t, nil)
	secret := "sk-ant-secret\r\nX-Evil: 1"
	for _, r := range []*Request{
		{Method: "POST", Target: "/v1/messages", Header: http.Header{"X-Api-Key": {secret}}},
		{Method: "POST", Target: "/v1/messages", Header: http.Header{"Bad Name": {"x"}}},
		{Method: "POST", Target: "/v1/messages", Header: http.Header{"Content-Length": {"3"}}},
		{Method: "POST", Target: "/v1/messages", Header: http.Header{"Host": {"elsewhere"}}},
		{Method: "POST", Target: "/v1/mess ages"},
		{Method: "POST", Target: "v1/messages"},
		{Method: "PO ST", Target: "/v1/messages"},
	} {
		resp, wrote, err := tr.Do(context.Background(), r)
		if err == nil || resp != nil || wrote {
			t.Errorf("%s %q %v: resp %v, wrote %v, err %v: want refused", r.Method, r.Target, r.Header, resp, wrote, err)
		}
		if err != nil && strings.Contains(err.Error(), "sk-ant") {
			t.Errorf("the error carries a header value: %v", err)
		}
	}
	if n := srv.conns.Load(); n != 0 {
		t.Errorf("refused requests opened %d connections", n)
	}
}

// TestAnswerHeadIsBounded: an answer whose head never ends is cut at
// MaxHeaderBytes instead of read into memory without end.
func TestAnswerHeadIsBounded(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("y", 1000) + "\r\n") // once: the server shares the test's allocation count
		for range 1000 {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	})
	tr := srv.transport(t, func(c *Config) { c.MaxHeaderBytes = 64 << 10 })
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, _, err := tr.Do(context.Background(), post("{}"))
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, errHeaderTooLong) {
		t.Errorf("a 1 MB head with a 64 KiB limit: %v", err)
	}
	if a := m1.TotalAlloc - m0.TotalAlloc; a > 1<<20 {
		t.Errorf("reading the head allocated %d KiB", a>>10)
	}
}

// TestTLS: an https origin is reached over TLS with http/1.1 offered by
// ALPN, and its connection is reused.
func TestTLS(t *testing.T) {
	var conns atomic.Int32
	var proto atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		io.WriteString(w, "secure")
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tr := newTransport(t, srv.URL, func(c *Config) { c.TLS = &tls.Config{RootCAs: roots} })
	for range 3 {
		resp, _, err := tr.Do(context.Background(), post("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); b != "secure" {
			t.Fatalf("body %q", b)
		}
	}
	if p, _ := proto.Load().(string); p != "HTTP/1.1" {
		t.Errorf("server saw %q, want HTTP/1.1 (the server offers h2 too)", p)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("three requests opened %d TLS connections, want 1", n)
	}
}

// TestPoolBounds: at most MaxIdle connections are kept, the one used last
// is reused first, one idle IdleTimeout is closed, and after Close no
// request is sent and connections in use are closed as they end.
func TestPoolBounds(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			_, ok := nextRequest(br)
			if !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	now := time.Unix(1000, 0)
	tr := srv.transport(t, func(c *Config) { c.MaxIdle = 2; c.IdleTimeout = time.Minute })
	tr.now = func() time.Time { return now }
	// Three answers held at once, then read: three connections, two kept.
	var resps []*http.Response
	for range 3 {
		resp, _, err := tr.Do(context.Background(), post("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, r := range resps {
		readAll(t, r)
	}
	if n := len(tr.idle); n != 2 {
		t.Fatalf("%d idle connections, want MaxIdle 2", n)
	}
	last := tr.idle[1]
	resp, _, err := tr.Do(context.Background(), post("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := resp.Body.(*body); !ok || b.c != last {
		t.Errorf("the connection used last was not reused first")
	}
	readAll(t, resp)
	now = now.Add(time.Minute)
	resp, _, err = tr.Do(context.Background(), post("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.conns.Load(); n != 4 {
		t.Errorf("after the idle timeout: %d connections opened in all, want a fourth", n)
	}
	tr.Close()
	readAll(t, resp)
	if n := len(tr.idle); n != 0 {
		t.Errorf("a connection went back to a closed pool")
	}
	if _, _, err := tr.Do(context.Background(), post("{}")); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: %v", err)
	}
}

// heldConn holds what is written to it while hold is set, so two TLS
// records leave in one TCP write.
type heldConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *heldConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	c.Conn.Write(c.buf)
	c.buf = nil
}

// TestTLSUnaskedRecordIsNotTheNextAnswer: an answer nobody asked for that
// arrives in a TLS record together with the last answer (crypto/tls holds
// it, the socket looks empty) never becomes the next request's answer.
func TestTLSUnaskedRecordIsNotTheNextAnswer(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil) // for its certificate
	srv.StartTLS()
	cert := srv.TLS.Certificates[0]
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	srv.Close()
	var n atomic.Int32
	raw := newRawServer(t, func(c net.Conn, _ *bufio.Reader) {
		hc := &heldConn{Conn: c}
		tc := tls.Server(hc, &tls.Config{Certificates: []tls.Certificate{cert}})
		br := bufio.NewReader(tc)
		for {
			_, ok := nextRequest(br)
			if !ok {
				return
			}
			i := n.Add(1)
			hc.mu.Lock()
			hc.hold = true
			hc.mu.Unlock()
			io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nreq-"+strconv.Itoa(int(i)))
			io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTALE")
			hc.flush()
		}
	})
	tr := newTransport(t, "https://"+raw.ln.Addr().String(), func(c *Config) {
		c.TLS = &tls.Config{RootCAs: roots, ServerName: "example.com"}
	})
	for i := range 3 {
		resp, _, err := tr.Do(context.Background(), post("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if b := readAll(t, resp); b == "STALE" {
			t.Fatalf("request %d was answered with the answer nobody asked for", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTimeoutCoversConnecting: Timeout bounds the whole attempt, the TLS
// handshake of a server that never answers it included, and the error is
// a timeout as net/http's is (context.DeadlineExceeded, Timeout()).
func TestTimeoutCoversConnecting(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	tr := newTransport(t, "https://"+srv.ln.Addr().String(), nil)
	start := time.Now()
	r := post("{}")
	r.Timeout = 200 * time.Millisecond
	_, wrote, err := tr.Do(context.Background(), r)
	var te interface{ Timeout() bool }
	if err == nil || wrote || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &te) || !te.Timeout() {
		t.Errorf("a handshake never answered: wrote %v, err %v; want a timeout", wrote, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the 200 ms attempt took %v", d)
	}
}

// TestStreamCanceledOrClosedMidBody: a streamed body cut by its context
// reads as the context's cause, and a Close racing a blocked Read ends it
// (run with -race: the two do not race on the connection).
func TestStreamCanceledOrClosedMidBody(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		_, ok := nextRequest(br)
		if !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nevent\r\n")
		io.Copy(io.Discard, br) // then silence until the client hangs up
	})
	tr := srv.transport(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	r := post("{}")
	r.Stream, r.Timeout = true, time.Minute
	resp, _, err := tr.Do(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := resp.Body.Read(buf); !errors.Is(err, context.Canceled) {
		t.Errorf("a stream cut by its context: %v, want context.Canceled", err)
	}
	resp.Body.Close()

	resp, _, err = tr.Do(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, buf)
	done := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	resp.Body.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("a Read blocked when the body was closed returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Read")
	}
	if _, err := resp.Body.Read(buf); err == nil || err == io.EOF {
		t.Errorf("Read after Close: %v", err)
	}
}

// TestIdleConnectionsAreClosedWithoutTraffic: a connection idle for
// IdleTimeout is closed though no request comes to notice it.
func TestIdleConnectionsAreClosedWithoutTraffic(t *testing.T) {
	closed := make(chan struct{})
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		_, ok := nextRequest(br)
		if !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		if _, err := br.ReadByte(); err == io.EOF {
			close(closed)
		}
	})
	tr := srv.transport(t, func(c *Config) { c.IdleTimeout = 50 * time.Millisecond })
	resp, _, err := tr.Do(context.Background(), post("{}"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("an idle connection was still open 5 s after a 50 ms idle timeout")
	}
}

// TestTargetBytesNetHTTPSends: a query with bytes beyond ASCII (a caller's
// raw query the proxy forwards) goes as net/http sends it.
func TestTargetBytesNetHTTPSends(t *testing.T) {
	got := make(chan string, 1)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		line, _ := br.ReadString('\n')
		got <- line
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	})
	tr := srv.transport(t, nil)
	resp, _, err := tr.Do(context.Background(), &Request{Method: "GET", Target: "/v1/models?after_id=café"})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if l := <-got; l != "GET /v1/models?after_id=café HTTP/1.1\r\n" {
		t.Errorf("request line %q", l)
	}
}
