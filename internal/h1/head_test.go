package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
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
}

// readWith reads head+body with quick (or, quick false, ReadResponse) and
// returns the answer with its body read (up to 5 bytes), or nil when the
// reader refused it.
func readWith(t *testing.T, raw string, quick bool) (*http.Response, string, error, bool) {
	t.Helper()
	br := bufio.NewReaderSize(strings.NewReader(raw), 16<<10)
	var resp *http.Response
	var err error
	if quick {
		if resp = quickHead(br, map[string]string{}); resp == nil {
			return nil, "", nil, false
		}
	} else if resp, err = http.ReadResponse(br, nil); err != nil {
		return nil, "", err, true
	}
	b, berr := io.ReadAll(io.LimitReader(resp.Body, 5))
	if berr != nil {
		return resp, string(b), berr, true
	}
	return resp, string(b), nil, true
}

// checkHead fails when quickHead accepts raw and does not read it exactly
// as ReadResponse does.
func checkHead(t *testing.T, raw string) {
	t.Helper()
	q, qb, qerr, ok := readWith(t, raw, true)
	if !ok {
		return // ReadResponse's to read
	}
	r, rb, rerr, _ := readWith(t, raw, false)
	if r == nil {
		t.Fatalf("quickHead read %q, which ReadResponse refuses (%v)", raw, rerr)
	}
	if q.Status != r.Status || q.StatusCode != r.StatusCode || q.Proto != r.Proto || q.ProtoMajor != r.ProtoMajor || q.ProtoMinor != r.ProtoMinor ||
		q.ContentLength != r.ContentLength || q.Close != r.Close || !reflect.DeepEqual(q.TransferEncoding, r.TransferEncoding) ||
		!reflect.DeepEqual(q.Trailer, r.Trailer) || qb != rb || (qerr == nil) != (rerr == nil) {
		t.Fatalf("%q:\nquick %q %d %s len %d close %v body %q (%v)\n  std %q %d %s len %d close %v body %q (%v)", raw,
			q.Status, q.StatusCode, q.Proto, q.ContentLength, q.Close, qb, qerr,
			r.Status, r.StatusCode, r.Proto, r.ContentLength, r.Close, rb, rerr)
	}
	if !reflect.DeepEqual(q.Header, r.Header) {
		t.Fatalf("%q: headers\nquick %v\n  std %v", raw, q.Header, r.Header)
	}
}

// TestQuickHeadIsReadResponse: every head quickHead reads, it reads as
// ReadResponse does (status, protocol, headers, length, close, body);
// and it does read the API's own.
func TestQuickHeadIsReadResponse(t *testing.T) {
	for _, h := range headCases {
		for _, body := range []string{"hello world", "hel"} { // whole, and cut short
			checkHead(t, h+body)
		}
	}
	if _, _, _, ok := readWith(t, apiHead+"hello world", true); !ok {
		t.Errorf("quickHead handed the API's own head to ReadResponse")
	}
}

// TestQuickHeadLeavesWhatItRefuses: a head quickHead hands on is still
// whole in the reader for ReadResponse.
func TestQuickHeadLeavesWhatItRefuses(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(raw))
	if quickHead(br, map[string]string{}) != nil {
		t.Fatal("quickHead read a chunked answer")
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "hello" {
		t.Errorf("body %q after quickHead refused it", b)
	}
}

func FuzzQuickHead(f *testing.F) {
	for _, h := range headCases {
		f.Add(h + "hello world")
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkHead(t, raw)
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
