package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unsafe"
)

// apiHead is an answer's head as the API writes one: lower-case names,
// the twelve rate-limit headers.
const apiHead = "HTTP/1.1 200 OK\r\n" +
	"date: Mon, 07 Dec 2026 01:00:00 GMT\r\ncontent-type: application/json\r\ncontent-length: 11\r\n" +
	"connection: keep-alive\r\nrequest-id: req_011CV\r\nanthropic-organization-id: 0f0e-org\r\n" +
	"anthropic-ratelimit-requests-limit: 4000\r\nanthropic-ratelimit-requests-remaining: 3999\r\nanthropic-ratelimit-requests-reset: 2026-12-07T01:00:01Z\r\n" +
	"anthropic-ratelimit-input-tokens-limit: 2000000\r\nanthropic-ratelimit-input-tokens-remaining: 2000000\r\nanthropic-ratelimit-input-tokens-reset: 2026-12-07T01:00:01Z\r\n" +
	"anthropic-ratelimit-output-tokens-limit: 400000\r\nanthropic-ratelimit-output-tokens-remaining: 400000\r\nanthropic-ratelimit-output-tokens-reset: 2026-12-07T01:00:01Z\r\n" +
	"anthropic-ratelimit-tokens-limit: 2400000\r\nanthropic-ratelimit-tokens-remaining: 2400000\r\nanthropic-ratelimit-tokens-reset: 2026-12-07T01:00:01Z\r\n" +
	"cf-ray: 8f2c-SJC\r\nserver: cloudflare\r\n\r\n"

// headCases are heads at every edge quickHead decides on; each is judged
// against ReadResponse, not against a verdict written here.
var headCases = []string{
	apiHead,
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 529 \r\nContent-Length: 5\r\nConnection: Keep-Alive\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 005\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: -0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length:  5 \t\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nX-A:3\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Obs: caf\xc3\xa9 \xff\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Del: a\x7fb\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Cr: a\rb\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Lf: a\nb\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 5\n\n",
	"HTTP/1.1 200 OK\r\n Folded: yes\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-A: 1\r\n\tcontinued\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nBad\x80Name: 1\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\n: novalue\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nx_under: 1\r\nweird-CASE-name: 2\r\nA-B-C: 3\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTrailer: X-T\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nPragma: no-cache\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: upgrade\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\nConnection: close\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\n",
	"HTTP/1.1 199 Odd\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 099 Odd\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 000 Odd\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/2.0 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1  200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 20x OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 +20 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\x00\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\rhidden\r\nContent-Length: 5\r\n\r\n",
	"http/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 999 Whatever\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5_0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: \xef\xbc\x95\r\n\r\n",
	"HTTP/1.1 200 OK\r\ncontent-LENGTH: 5\r\nCONTENT-length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: CLOSE\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close \r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: close,\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: clo\u017fe\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: \u212aeep-alive\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-A:\t v \t\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nHost: x\r\n\r\n",
	"HTTP/1.1 200 OK \t\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\n",
}

// warmKeys is one connection's memory of names, shared by every check:
// a name known must give the same canonical form as a name new.
var warmKeys = map[string]string{}

// read is everything a reader made of an answer: its fields, its body
// read to the end three bytes at a time, and what it left in the reader.
type read struct {
	status, proto   string
	code, maj, min  int
	header, trailer http.Header
	length          int64
	close           bool
	te              []string
	body, rest      string
	bodyErr         error
}

func readAllOf(resp *http.Response, br *bufio.Reader) read {
	r := read{status: resp.Status, proto: resp.Proto, code: resp.StatusCode, maj: resp.ProtoMajor, min: resp.ProtoMinor,
		header: resp.Header, trailer: resp.Trailer, length: resp.ContentLength, close: resp.Close, te: resp.TransferEncoding}
	var sb strings.Builder
	buf := make([]byte, 3)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			r.bodyErr = err
			break
		}
	}
	r.body = sb.String()
	rest, _ := io.ReadAll(br)
	r.rest = string(rest)
	return r
}

// checkHead fails when quickHead accepts raw and does not read it exactly
// as ReadResponse does — fields, body, body error, what is left in the
// reader — or when it declines raw but took bytes from the reader. slow
// feeds the reader a byte at a time.
func checkHead(t *testing.T, raw string, slow bool) {
	t.Helper()
	reader := func() *bufio.Reader {
		var rd io.Reader = strings.NewReader(raw)
		if slow {
			rd = iotest.OneByteReader(rd)
		}
		return bufio.NewReaderSize(rd, 16<<10)
	}
	qbr := reader()
	q := quickHead(qbr, warmKeys)
	if q == nil {
		if left, _ := io.ReadAll(qbr); string(left) != raw {
			t.Fatalf("quickHead declined %q but took bytes from the reader", raw)
		}
		return
	}
	sbr := reader()
	s, err := http.ReadResponse(sbr, nil)
	if err != nil {
		t.Fatalf("quickHead read %q, which ReadResponse refuses (%v)", raw, err)
	}
	qr, sr := readAllOf(q, qbr), readAllOf(s, sbr)
	if !errors.Is(qr.bodyErr, sr.bodyErr) {
		t.Fatalf("%q: body error %v, ReadResponse's %v", raw, qr.bodyErr, sr.bodyErr)
	}
	qr.bodyErr, sr.bodyErr = nil, nil
	if !reflect.DeepEqual(qr, sr) {
		t.Fatalf("%q:\nquickHead    %+v\nReadResponse %+v", raw, qr, sr)
	}
	// The values share one backing array: appending to one must not
	// change another.
	for k := range q.Header {
		q.Header[k] = append(q.Header[k], "appended")
	}
	for k, vs := range q.Header {
		if len(vs) != 2 || vs[1] != "appended" {
			t.Fatalf("%q: %s = %q after appending to every value", raw, k, vs)
		}
	}
}

// TestQuickHeadIsReadResponse: every head quickHead reads, it reads as
// ReadResponse does, whole or arriving a byte at a time, with a body whole
// or cut short; and it does read the API's own.
func TestQuickHeadIsReadResponse(t *testing.T) {
	for _, slow := range []bool{false, true} {
		for _, h := range headCases {
			for _, body := range []string{"hello world", "hel", "hello worldHTTP/1.1 200 OK\r\n"} {
				checkHead(t, h+body, slow)
			}
		}
	}
	if quickHead(bufio.NewReader(strings.NewReader(apiHead+"hello world")), map[string]string{}) == nil {
		t.Errorf("quickHead handed the API's own head to ReadResponse")
	}
}

// TestQuickHeadLastReadIsEOF: the read that returns a body's last byte
// returns io.EOF with it, as ReadResponse's body does (h1's body gives its
// connection back on it).
func TestQuickHeadLastReadIsEOF(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	q := quickHead(bufio.NewReader(strings.NewReader(raw)), map[string]string{})
	p := make([]byte, 5)
	if n, err := q.Body.Read(p); n != 5 || err != io.EOF {
		t.Errorf("last read: %d, %v; want 5 bytes and io.EOF", n, err)
	}
}

// TestQuickHeadForgetsTheHead: a connection's memory of names holds none
// of the heads it parsed (a name sent canonical is its own canonical
// form, and would otherwise pin the whole head).
func TestQuickHeadForgetsTheHead(t *testing.T) {
	keys := map[string]string{}
	head := strings.Clone("HTTP/1.1 200 OK\r\nX-Request-Id: 1\r\nx-lower: 2\r\nContent-Length: 0\r\n\r\n")
	if resp, _ := parseHead(head, keys); resp == nil {
		t.Fatal("parseHead declined a plain head")
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(head)))
	inHead := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= start && p < start+uintptr(len(head))
	}
	if len(keys) != 3 {
		t.Errorf("keys %v: want the three names", keys)
	}
	for name, key := range keys {
		if inHead(name) || inHead(key) {
			t.Errorf("keys[%q] = %q holds on to the head", name, key)
		}
	}
}

// TestBareLFIsNotWaitedFor: an answer whose head ends lines with a bare
// LF is read at once (by ReadResponse), not after the attempt's timeout on
// a connection the server keeps open.
func TestBareLFIsNotWaitedFor(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, ok := nextRequest(br); !ok {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\nContent-Length: 5\n\nhello")
		}
	})
	tr := srv.transport(t, nil)
	r := post("{}")
	r.Timeout = 5 * time.Second
	start := time.Now()
	resp, _, err := tr.Do(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); b != "hello" {
		t.Errorf("body %q", b)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a bare-LF answer took %v", d)
	}
}

func FuzzQuickHead(f *testing.F) {
	for _, h := range headCases {
		f.Add(h+"hello world", false)
		f.Add(h+"hel", true)
	}
	f.Fuzz(func(t *testing.T, raw string, slow bool) {
		checkHead(t, raw, slow)
	})
}

func BenchmarkHead(b *testing.B) {
	raw := []byte(apiHead + "hello world")
	rd := bytes.NewReader(raw)
	br := bufio.NewReaderSize(rd, 16<<10)
	b.Run("quickHead", func(b *testing.B) {
		keys := map[string]string{}
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(raw)
			br.Reset(rd)
			resp := quickHead(br, keys)
			io.Copy(io.Discard, resp.Body)
		}
	})
	b.Run("ReadResponse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(raw)
			br.Reset(rd)
			resp, _ := http.ReadResponse(br, nil)
			io.Copy(io.Discard, resp.Body)
		}
	})
}
