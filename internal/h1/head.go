package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// The answer's head is read by one of two parsers. http.ReadResponse is
// the rule; quickHead reads the common case — HTTP/1.1, a Content-Length,
// plain header lines — to the same *http.Response, and hands anything
// else to ReadResponse before a byte is taken (it only peeks). The API's
// answers carry a dozen rate-limit headers: ReadResponse allocated a
// string per name it canonicalised and per value, 43 allocations a head,
// and was an eighth of the engine's CPU. quickHead makes one string of
// the whole head, slices names and values out of it, and remembers each
// connection's names in their canonical form. TestQuickHeadIsReadResponse
// and FuzzQuickHead hold it to ReadResponse.

// maxKeys bounds a connection's memory of header names.
const maxKeys = 64

// quickHead reads the answer's head from br when it is the common case,
// and returns nil (having taken nothing) when it is not, or when the
// connection failed before a whole head arrived: ReadResponse then reads
// it, or meets the same failure. keys maps the names this connection has
// seen to their canonical form.
func quickHead(br *bufio.Reader, keys map[string]string) *http.Response {
	var head []byte
	for want := 1; ; want = br.Buffered() + 1 {
		if _, err := br.Peek(want); err != nil {
			return nil
		}
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			head = b[:i+4]
			break
		}
		// A bare LF in what has come means a head parseHead declines
		// (and which may never hold a CRLF CRLF): ReadResponse's, now.
		for j := bytes.IndexByte(b, '\n'); j >= 0; {
			if j == 0 || b[j-1] != '\r' {
				return nil
			}
			k := bytes.IndexByte(b[j+1:], '\n')
			if k < 0 {
				break
			}
			j += 1 + k
		}
		if br.Buffered() >= br.Size() {
			return nil // a head longer than the buffer
		}
	}
	resp, bodyLen := parseHead(string(head), keys)
	if resp == nil {
		return nil
	}
	br.Discard(len(head))
	if bodyLen == 0 {
		resp.Body = http.NoBody
	} else {
		resp.Body = &sizedBody{br: br, n: bodyLen}
	}
	return resp
}

// parseHead parses head (a status line, header lines, and the blank line,
// all ending in CRLF) as ReadResponse would, for an answer framed by its
// Content-Length; nil for anything else. Names and values are substrings
// of head.
func parseHead(head string, keys map[string]string) (*http.Response, int64) {
	line, rest, ok := cutLine(head)
	// "HTTP/1.1 200 OK": exactly one space, a three-digit status, an
	// answer that may have a body.
	if !ok || len(line) < 12 || line[:9] != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil, 0
	}
	code := 0
	for _, c := range []byte(line[9:12]) {
		if c < '0' || c > '9' {
			return nil, 0
		}
		code = code*10 + int(c-'0')
	}
	if noBody(code) {
		return nil, 0 // interim or bodiless: ReadResponse's
	}
	n := strings.Count(rest, "\n") - 1 // header lines
	h := make(http.Header, n)
	vals := make([]string, n) // one backing array: one value a name
	bodyLen, haveLen := int64(0), false
	closing, sawConnection := false, false
	lines := 0 // the names set, to tell a repeated one
	for i := 0; ; i++ {
		var kv string
		if kv, rest, ok = cutLine(rest); !ok {
			return nil, 0
		}
		if kv == "" {
			break
		}
		name, value, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, 0
		}
		value = trimSpace(value)
		if !validHeaderValue(value) { // textproto's value bytes too
			return nil, 0
		}
		key, ok := keys[name] // a name known is a plain one
		if !ok {
			if !validToken(name) {
				return nil, 0
			}
			key = textproto.CanonicalMIMEHeaderKey(name)
			if len(keys) < maxKeys {
				// Neither the name nor its canonical form (name itself
				// when it is canonical already) may hold on to head.
				n := strings.Clone(name)
				if key == name {
					key = n
				}
				keys[n] = key
			}
		}
		switch key {
		case "Content-Length":
			if haveLen {
				return nil, 0
			}
			l, err := strconv.ParseUint(value, 10, 63) // net/http's parseContentLength
			if err != nil {
				return nil, 0
			}
			bodyLen, haveLen = int64(l), true
		case "Connection":
			if sawConnection {
				return nil, 0
			}
			sawConnection = true
			switch {
			case len(value) == len("close") && strings.EqualFold(value, "close"): // ASCII only, as httpguts
				closing = true
				continue // ReadResponse drops it once read
			case len(value) != len("keep-alive") || !strings.EqualFold(value, "keep-alive"):
				return nil, 0
			}
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, 0
		}
		vals[i] = value
		h[key] = vals[i : i+1 : i+1]
		lines++
	}
	if !haveLen || len(h) != lines {
		// Read to close, or a name given twice (its values make a list):
		// ReadResponse's.
		return nil, 0
	}
	return &http.Response{
		Status: line[9:], StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: bodyLen, Close: closing,
	}, bodyLen
}

// cutLine cuts the line ending in CRLF at the start of s; false when it
// ends in a bare LF, which ReadResponse also takes as a line's end.
func cutLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' {
		return "", "", false
	}
	return s[:i-1], s[i+1:], true
}

// trimSpace trims spaces and tabs from both ends of v, as textproto does
// a header line's.
func trimSpace(v string) string {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// sizedBody is a body of a known length: like net/http's, it returns
// io.EOF with its last bytes (so the connection is released at once) and
// io.ErrUnexpectedEOF when the connection ends first.
type sizedBody struct {
	br *bufio.Reader
	n  int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	k, err := b.br.Read(p)
	b.n -= int64(k)
	if b.n == 0 {
		return k, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

func (b *sizedBody) Close() error { return nil }
