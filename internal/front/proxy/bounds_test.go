package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/proxy"
)

// bigMessage is a Messages body of about size bytes.
func bigMessage(size int) []byte {
	b, _ := json.Marshal(message(strings.Repeat("x", size)))
	return b
}

// TestBodyMemoryIsBounded: a call that would take the proxy past
// MaxBodyMemory waits for room — its body unread, never sent — and after
// MaxWait gets a 429 with retry-after; a body larger than the bound alone
// gets a 413; once room is given back, calls go through again.
func TestBodyMemoryIsBounded(t *testing.T) {
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.MaxBodyMemory = 1 << 20
		c.MaxWait = 300 * time.Millisecond
	}})
	held := make(chan int, 1)
	go func() {
		// Holds 600 KB of the 1 MiB until the upstream answers.
		resp, _ := e.do("POST", "/v1/messages", bigMessage(600<<10))
		held <- resp.StatusCode
	}()
	<-f.entered
	resp, b := e.do("POST", "/v1/messages", bigMessage(600<<10))
	if resp.StatusCode != 429 || errorOf(t, b).Err.Type != api.ErrRateLimit || resp.Header.Get("retry-after") == "" {
		t.Errorf("a call past the bound: %d %s (retry-after %q), want 429 rate_limit_error with retry-after", resp.StatusCode, b, resp.Header.Get("retry-after"))
	}
	if resp, b := e.do("POST", "/v1/messages", bigMessage(2<<20)); resp.StatusCode != 413 || errorOf(t, b).Err.Type != api.ErrRequestTooLarge {
		t.Errorf("a body larger than the bound: %d %s, want 413", resp.StatusCode, b)
	}
	if n := len(f.calls()); n != 1 {
		t.Errorf("the upstream saw %d calls, want only the one holding the room", n)
	}
	close(f.hold)
	if code := <-held; code != 200 {
		t.Errorf("the call holding the room: %d", code)
	}
	if resp, b := e.do("POST", "/v1/messages", bigMessage(600<<10)); resp.StatusCode != 200 {
		t.Errorf("once the room is back: %d %s", resp.StatusCode, b)
	}
}

// TestBodyWaitsForRoom: a call over the bound that gets room within
// MaxWait is served; its body was not read while it waited.
func TestBodyWaitsForRoom(t *testing.T) {
	f := newFake()
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.MaxBodyMemory = 1 << 20
		c.MaxWait = 20 * time.Second
	}})
	first := make(chan int, 1)
	go func() {
		resp, _ := e.do("POST", "/v1/messages", bigMessage(600<<10))
		first <- resp.StatusCode
	}()
	<-f.entered
	second := make(chan int, 1)
	go func() {
		resp, _ := e.do("POST", "/v1/messages", bigMessage(600<<10))
		second <- resp.StatusCode
	}()
	// The second waits for room: the upstream sees nothing more until
	// the first is answered.
	select {
	case <-f.entered:
		t.Fatal("a call past the bound reached the upstream while the room was held")
	case <-time.After(200 * time.Millisecond):
	}
	close(f.hold)
	if a, b := <-first, <-second; a != 200 || b != 200 {
		t.Errorf("statuses %d and %d, want both 200", a, b)
	}
}

// TestSlowBodyIsCut: a caller that sends its body a byte at a time is cut
// at BodyTimeout (408, connection closed), long before its body is whole.
// In a synctest bubble on in-memory connections: the trickle is fake time.
func TestSlowBodyIsCut(t *testing.T) {
	synctest.Test(t, testSlowBodyIsCut)
}

func testSlowBodyIsCut(t *testing.T) {
	f := newFake()
	close(f.hold)
	const token = "slow-body-test-token"
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, pipe: true, proxy: func(c *proxy.Config) {
		c.Token = token
		c.BodyTimeout = 300 * time.Millisecond
	}})
	conn, err := e.dial(t.Context(), "tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := bigMessage(1000)
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", token, len(body))
	start := time.Now()
	sent := make(chan int, 1)
	go func() {
		for i := range body { // a byte every 20 ms: 20 s for the whole body
			if _, err := conn.Write(body[i : i+1]); err != nil {
				sent <- i
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		sent <- len(body)
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "--body-timeout") {
		t.Errorf("a slow body: %d %s, want 408 naming --body-timeout", resp.StatusCode, b)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cut after %s", d)
	}
	if n := <-sent; n == len(body) { // the connection is closed: the trickle's writes fail
		t.Error("the whole slow body was taken")
	}
	if len(f.calls()) != 0 {
		t.Error("a cut body reached the upstream")
	}
}

// hugeAnswer answers every Messages call with a message of about 16 MB.
func hugeAnswer() http.Handler {
	text := strings.Repeat("y", 16<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set(api.HeaderRequestID, "req_huge")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_huge","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`, sonnet, text)
	})
}

// TestStalledReaderIsCut: a caller that stops reading a large answer is
// cut once one write has blocked for WriteTimeout; a caller that reads
// gets the whole answer.
func TestStalledReaderIsCut(t *testing.T) {
	const token = "stalled-reader-test-token"
	e := newEnv(t, options{upstream: hugeAnswer(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.Token = token
		c.WriteTimeout = 300 * time.Millisecond
	}})
	if resp, b := e.do("POST", "/v1/messages", message("read it all"), "x-api-key", token); resp.StatusCode != 200 || len(b) < 16<<20 {
		t.Fatalf("a caller that reads: %d, %d bytes", resp.StatusCode, len(b))
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(message("then stop reading"))
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", token, len(body), body)
	// Not reading: the proxy's writes fill the socket buffers and block.
	// Once the handler has given up on the caller, the proxy's request
	// counter has it.
	deadline := time.Now().Add(20 * time.Second)
	for !bytes.Contains(e.metrics(token), []byte(`sluice_proxy_requests_total{code="200",endpoint="messages"} 2`)) {
		if time.Now().After(deadline) {
			t.Fatalf("the handler still writes to a caller that stopped reading:\n%s", e.metrics(token))
		}
		time.Sleep(20 * time.Millisecond)
	}
	n, _ := io.Copy(io.Discard, conn)
	if n >= 16<<20 {
		t.Errorf("a caller that stopped reading got the whole answer (%d bytes) after the write timeout", n)
	}
}

// metrics returns the proxy's /metrics.
func (e *env) metrics(token string) []byte {
	e.t.Helper()
	_, b := e.do("GET", "/metrics", nil, "x-api-key", token)
	return b
}

// TestChunkedBodyIsBounded: a body without a Content-Length reserves room
// as it grows: within the bound it is served, past the API's limit or
// past what the bound could ever hold it gets a 413.
func TestChunkedBodyIsBounded(t *testing.T) {
	f := newFake()
	close(f.hold)
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.MaxBodyMemory = 8 << 20
		c.MaxWait = 200 * time.Millisecond
	}})
	send := func(body []byte) (int, []byte) {
		t.Helper()
		// An io.Reader of unknown length: net/http sends it chunked.
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/messages", io.MultiReader(bytes.NewReader(body)))
		req.Header.Set("x-api-key", "caller")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	small := bigMessage(300 << 10)
	if code, b := send(small); code != 200 {
		t.Errorf("a chunked body within the bound: %d %s", code, b)
	}
	if got := f.calls(); len(got) != 1 || got[0] != string(small) {
		t.Errorf("the upstream got %d calls, the body intact: %v", len(got), len(got) == 1 && got[0] == string(small))
	}
	if code, b := send(bigMessage(33 << 20)); code != 413 || errorOf(t, b).Err.Type != api.ErrRequestTooLarge {
		t.Errorf("a chunked body past 32 MB: %d %s, want 413", code, b)
	}
	if code, b := send(bigMessage(12 << 20)); code != 413 || !strings.Contains(string(b), "--max-body-memory") {
		t.Errorf("a chunked body past the bound: %d %.200s, want 413 naming --max-body-memory", code, b)
	}
}

// trickled sends a request with head's method, path and headers, then its
// body of n bytes one byte every 20 ms (20 s for 1000 bytes), and reads
// the answer. It returns the answer, how many body bytes had been sent
// when the answer came, and whether the proxy closed the connection after
// it.
func (e *env) trickled(head string, n int) (resp *http.Response, body []byte, sentBefore int, closed bool) {
	e.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", head, n)
	var sent atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range n {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// A guard against a hang, not a timing assertion.
	conn.SetReadDeadline(time.Now().Add(time.Duration(n)*20*time.Millisecond + 10*time.Second))
	rd := bufio.NewReader(conn)
	resp, err = http.ReadResponse(rd, nil)
	if err != nil {
		e.t.Fatalf("%s: no answer: %v", head, err)
	}
	sentBefore = int(sent.Load())
	body, _ = io.ReadAll(resp.Body)
	// Nothing more comes: the connection ends (EOF, or a reset once the
	// trickle writes to a closed connection), or, kept open, the guard's
	// deadline passes.
	_, err = rd.ReadByte()
	var ne net.Error
	return resp, body, sentBefore, err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestRefusedCallerIsNotHeardOut: a caller without the token is answered
// 401 at once, its body never read (a caller trickling a body cannot hold
// a connection by being refused), and its connection is closed.
func TestRefusedCallerIsNotHeardOut(t *testing.T) {
	f := newFake()
	close(f.hold)
	e := newEnv(t, options{upstream: f, keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.Token = "refused-caller-test-token"
		c.BodyTimeout = time.Minute // the refusal, not the body's bound, ends it
	}})
	const n = 1000
	resp, b, sent, closed := e.trickled("POST /v1/messages HTTP/1.1\r\nx-api-key: wrong-token", n)
	if resp.StatusCode != 401 || errorOf(t, b).Err.Type != api.ErrAuthentication {
		t.Errorf("a wrong token: %d %s, want 401", resp.StatusCode, b)
	}
	if sent == n {
		t.Error("the refused caller was answered only once its whole body was read")
	}
	if !closed {
		t.Error("the refused caller's connection was kept open")
	}
	if len(f.calls()) != 0 {
		t.Error("a refused call reached the upstream")
	}
}

// TestUnreadBodyIsCut: a body no handler reads (a GET's) is bounded by
// BodyTimeout too: the answer comes once it is past, not once the caller
// has sent its body, and the connection is closed.
func TestUnreadBodyIsCut(t *testing.T) {
	const token = "unread-body-test-token"
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) {
		c.Token = token
		c.BodyTimeout = 300 * time.Millisecond
	}})
	for _, head := range []string{
		"GET /v1/messages/batches HTTP/1.1\r\nx-api-key: " + token,
		"GET /healthz HTTP/1.1\r\nx-api-key: " + token,
		"GET /no/such/path HTTP/1.1\r\nx-api-key: " + token,
	} {
		const n = 1000
		resp, b, sent, closed := e.trickled(head, n)
		if want := 200; strings.Contains(head, "/no/such") {
			want = 404
			if resp.StatusCode != want {
				t.Errorf("%s: %d %s, want %d", head, resp.StatusCode, b, want)
			}
		} else if resp.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", head, resp.StatusCode, b, want)
		}
		if sent == n {
			t.Errorf("%s: answered only once the whole trickled body was read", head)
		}
		if !closed {
			t.Errorf("%s: the connection was kept open after a body that did not arrive in time", head)
		}
	}
	// A caller that sends its body at once keeps its connection.
	if resp, b := e.do("GET", "/v1/messages/batches", []byte(`{}`), "x-api-key", token); resp.StatusCode != 200 {
		t.Errorf("a GET with a small body: %d %s", resp.StatusCode, b)
	}
}
