package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/keys"
)

func testKey(t *testing.T) *keys.Key {
	t.Helper()
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: "sk-ant-test-wire-0001"}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	return p.Keys()[0]
}

// countConns makes srv count the connections it accepts.
func countConns(srv *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// TestHTTP2OnlyWhenAsked: over TLS to a server that offers HTTP/2, the
// client speaks HTTP/1.1 on one kept-alive connection unless Config.HTTP2
// asks for HTTP/2; the base URL's path goes before every target.
func TestHTTP2OnlyWhenAsked(t *testing.T) {
	var proto, path atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		path.Store(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	srv.EnableHTTP2 = true
	conns := countConns(srv)
	srv.StartTLS()
	defer srv.Close()
	for _, tc := range []struct {
		http2 bool
		want  string
	}{{false, "HTTP/1.1"}, {true, "HTTP/2.0"}} {
		conns.Store(0)
		c := New(Config{BaseURL: srv.URL + "/prefix/", HTTP2: tc.http2})
		c.http.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		for range 3 {
			if o := c.Do(context.Background(), testKey(t), "POST", "/v1/messages", []byte(`{}`)); o.Class != OK {
				t.Fatalf("http2 %v: class %v, err %v", tc.http2, o.Class, o.Err)
			}
		}
		c.CloseIdle()
		if p, _ := proto.Load().(string); p != tc.want {
			t.Errorf("http2 %v: the server saw %q, want %q", tc.http2, p, tc.want)
		}
		if p, _ := path.Load().(string); p != "/prefix/v1/messages" {
			t.Errorf("http2 %v: the server saw the path %q, want the base URL's path before the target", tc.http2, p)
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("http2 %v: three attempts one after another opened %d connections, want 1", tc.http2, n)
		}
	}
}

// TestUnsendableRequestsAreInvalid: a request that cannot be written (a
// header value with a line break, a header name that is not a token, a
// method that is not a token) is a final Invalid outcome sent nowhere,
// with or without HTTP/2, and its error does not carry the header's value.
func TestUnsendableRequestsAreInvalid(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	key := testKey(t)
	for _, http2 := range []bool{false, true} {
		c := New(Config{BaseURL: srv.URL, HTTP2: http2})
		for _, extra := range []http.Header{
			{"Anthropic-Beta": {"secret-value\r\nX-Injected: 1"}},
			{"Bad Name": {"secret-value"}},
		} {
			o, _ := c.Send(context.Background(), key, "POST", "/v1/messages", []byte(`{}`), extra, false)
			if o.Class != Invalid || o.Sent || o.Err == nil || strings.Contains(o.Err.Error(), "secret-value") {
				t.Errorf("http2 %v: %v: class %v, sent %v, err %v", http2, extra, o.Class, o.Sent, o.Err)
			}
		}
		if o := c.Do(context.Background(), key, "PO ST", "/v1/messages", nil); o.Class != Invalid {
			t.Errorf("http2 %v: a method with a space: class %v, err %v", http2, o.Class, o.Err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("unsendable requests opened %d connections", n)
	}
}

// rawServe serves each connection of ln with serve: the test scripts the
// server's bytes exactly.
func rawServe(ln net.Listener, serve func(c net.Conn, br *bufio.Reader)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c, bufio.NewReader(c))
		}()
	}
}

// loopbackClient serves each connection of a loopback listener with
// serve and returns a client of it; both end with the test.
func loopbackClient(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go rawServe(ln, serve)
	c := New(Config{BaseURL: "http://" + ln.Addr().String()})
	t.Cleanup(c.CloseIdle)
	return c
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

// TestAttemptTimeout: AttemptTimeout ends an attempt whose answer does
// not come (written: Sent) or whose body stalls, as a Transport failure;
// a streamed attempt's body may take longer than AttemptTimeout.
func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := pipenet.Listen()
		defer ln.Close()
		go rawServe(ln, func(c net.Conn, br *bufio.Reader) {
			for {
				req, ok := nextRequest(br)
				if !ok {
					return
				}
				switch req.URL.Path {
				case "/silent": // until the client hangs up
					io.Copy(io.Discard, br)
					return
				case "/slow-body", "/stream":
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 4\r\n\r\nab")
					time.Sleep(3 * time.Second)
					io.WriteString(c, "cd")
				}
			}
		})
		c := New(Config{BaseURL: "http://fake", Dial: ln.DialContext, AttemptTimeout: time.Second})
		defer c.CloseIdle()
		key := testKey(t)
		start := time.Now()
		if o := c.Do(t.Context(), key, "POST", "/silent", []byte(`{}`)); o.Class != Transport || !o.Sent || time.Since(start) != time.Second {
			t.Errorf("silent server: class %v, sent %v after %v, err %v; want a transport failure after the 1 s timeout, written", o.Class, o.Sent, time.Since(start), o.Err)
		}
		if o := c.Do(t.Context(), key, "POST", "/slow-body", []byte(`{}`)); o.Class != Transport || o.Status != 200 || o.Body != nil {
			t.Errorf("a body stalled past the timeout: class %v, status %d, body %q", o.Class, o.Status, o.Body)
		}
		o, resp := c.Send(t.Context(), key, "POST", "/stream", []byte(`{}`), nil, true)
		if o.Class != OK || resp == nil {
			t.Fatalf("stream: class %v, err %v", o.Class, o.Err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "abcd" || err != nil {
			t.Errorf("streamed body %q, %v: want it whole past the timeout", b, err)
		}
	})
}

// TestCanceledAndRefused: an attempt whose context is canceled while the
// answer is awaited ends at once as Canceled, written (Sent); one whose
// connection is refused is a Transport failure, not written.
func TestCanceledAndRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := pipenet.Listen()
		go rawServe(ln, func(c net.Conn, br *bufio.Reader) {
			nextRequest(br)
			io.Copy(io.Discard, br) // no answer, until the client hangs up
		})
		c := New(Config{BaseURL: "http://fake", Dial: ln.DialContext})
		defer c.CloseIdle()
		key := testKey(t)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		if o := c.Do(ctx, key, "POST", "/v1/messages", []byte(`{}`)); o.Class != Canceled || !o.Sent || time.Since(start) != time.Second {
			t.Errorf("canceled attempt: class %v, sent %v after %v, err %v; want canceled at once, written", o.Class, o.Sent, time.Since(start), o.Err)
		}
		ln.Close()
		if o := c.Do(t.Context(), key, "POST", "/v1/messages", []byte(`{}`)); o.Class != Transport || o.Sent || o.Status != 0 {
			t.Errorf("refused connection: class %v, sent %v, status %d, err %v", o.Class, o.Sent, o.Status, o.Err)
		}
	})
}

// TestLargeBodyAnsweredEarly: a server that answers a large body before
// reading it (an early 413) and hangs up is heard: the answer is the
// outcome, and the request counts as not written whole.
func TestLargeBodyAnsweredEarly(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	c := loopbackClient(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		c.(*net.TCPConn).CloseWrite()
		<-done // the body is never read
	})
	o := c.Do(context.Background(), testKey(t), "POST", "/v1/messages", make([]byte, 32<<20)) // far more than socket buffers hold
	if o.Status != 413 || o.Class != Invalid || o.Sent {
		t.Errorf("early answer: status %d, class %v, sent %v, err %v; want the 413, not written whole", o.Status, o.Class, o.Sent, o.Err)
	}
}

// TestAnswerHeadIsBounded: an answer whose head never ends is a transport
// failure once it passes net/http's limit (10 MiB), not read into memory
// without end.
func TestAnswerHeadIsBounded(t *testing.T) {
	c := loopbackClient(t, func(c net.Conn, br *bufio.Reader) {
		if _, ok := nextRequest(br); !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("y", 1000) + "\r\n")
		for range 100_000 { // 100 MB
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	})
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	o := c.Do(context.Background(), testKey(t), "POST", "/v1/messages", []byte(`{}`))
	runtime.ReadMemStats(&m1)
	if o.Class != Transport || o.Status != 0 {
		t.Errorf("a 100 MB head: class %v, status %d, err %v; want a transport failure", o.Class, o.Status, o.Err)
	}
	if a := m1.TotalAlloc - m0.TotalAlloc; a > 64<<20 {
		t.Errorf("reading the head allocated %d MiB", a>>20)
	}
}

// TestProxyFromEnvironment: HTTP_PROXY from the environment carries the
// attempts. net/http reads the environment once a process, so the test
// runs itself again in a child process with the variable set.
func TestProxyFromEnvironment(t *testing.T) {
	if os.Getenv("SLUICE_TEST_PROXY_CHILD") == "" {
		var through atomic.Value
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			through.Store(r.Method + " " + r.RequestURI)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"type":"message","usage":{"input_tokens":1,"output_tokens":1}}`)
		}))
		defer proxy.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^TestProxyFromEnvironment$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SLUICE_TEST_PROXY_CHILD=1", "HTTP_PROXY="+proxy.URL, "NO_PROXY=", "no_proxy=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the child failed: %v\n%s", err, out)
		}
		if got, _ := through.Load().(string); got != "POST http://api.example.invalid/v1/messages" {
			t.Errorf("the proxy saw %q, want the attempt", got)
		}
		return
	}
	c := New(Config{BaseURL: "http://api.example.invalid"})
	defer c.CloseIdle()
	if o := c.Do(context.Background(), testKey(t), "POST", "/v1/messages", []byte(`{}`)); o.Class != OK {
		t.Fatalf("through the proxy from the environment: class %v, err %v", o.Class, o.Err)
	}
}
