package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// errRequest: the request cannot be sent at all (a method, URL or header
// net/http would refuse); sending it again cannot help.
var errRequest = errors.New("request cannot be sent")

// send sends one attempt over net/http and returns its answer with the
// body unread (an error that is errRequest: the request cannot be sent at
// all): closing the body ends the attempt (reading it to the end first
// lets its connection be reused). wrote reports, once the attempt has
// ended, whether the whole request was written. A non-stream attempt is
// bounded by Config.AttemptTimeout; a streamed one only until the
// answer's head (the transport's ResponseHeaderTimeout).
func (c *Client) send(ctx context.Context, method, path string, h http.Header, body []byte, stream bool) (resp *http.Response, wrote func() bool, err error) {
	var sent atomic.Bool
	wrote = sent.Load
	if err := checkHeader(h); err != nil {
		// net/http refuses the same, but with an error nothing can tell
		// from a failed attempt.
		return nil, wrote, err
	}
	var cancel context.CancelFunc
	if stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	})
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.BaseURL+path, rd)
	if err != nil {
		cancel()
		return nil, wrote, fmt.Errorf("%w: %w", errRequest, err)
	}
	// A *bytes.Reader body: NewRequestWithContext has set GetBody (a
	// replay from the start, for the transport's retry on a reused
	// connection that closed) and ContentLength already.
	req.Header = h
	resp, err = c.http.Do(req)
	if err != nil {
		cancel()
		return nil, wrote, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, wrote, nil
}

// cancelOnClose ends the attempt's context when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// checkHeader refuses a header net/http would refuse or that is not the
// request's to set: a name that is not a token, one the transport owns
// (owned), a value with a control character other than a tab. The error
// is errRequest and never quotes a value (it could be a credential).
func checkHeader(h http.Header) error {
	for name, vs := range h {
		if !validToken(name) {
			return fmt.Errorf("%w: invalid header name %q", errRequest, name)
		}
		if owned(http.CanonicalHeaderKey(name)) {
			return fmt.Errorf("%w: header %s is the transport's", errRequest, name)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				// The value is not quoted: it could be a credential.
				return fmt.Errorf("%w: invalid value for header %s", errRequest, name)
			}
		}
	}
	return nil
}

// owned reports whether the header of canonical name is the transport's
// to write (the framing and the connection), never a request's.
func owned(name string) bool {
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

// isTokenByte marks the bytes of an RFC 9110 token.
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
