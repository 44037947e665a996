package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/h1"
)

// wire sends one attempt and returns its answer with the body unread
// (an error that is h1.ErrRequest: the request cannot be sent at all):
// closing the body ends the attempt (reading it to the end first lets its
// connection be reused). wrote reports, once the attempt has ended,
// whether the whole request was written. A non-stream attempt is bounded
// by Config.AttemptTimeout; a streamed one only until the answer's head.
type wire interface {
	send(ctx context.Context, method, path string, h http.Header, body []byte, stream bool) (resp *http.Response, wrote func() bool, err error)
	closeIdle()
}

func wroteYes() bool { return true }
func wroteNo() bool  { return false }

func wroteFunc(wrote bool) func() bool {
	if wrote {
		return wroteYes
	}
	return wroteNo
}

// h1Wire sends over internal/h1's connections (docs/h1.md).
type h1Wire struct {
	t       *h1.Transport
	base    string // the base URL, for errors
	prefix  string // the base URL's path, before every target
	timeout time.Duration
}

// newH1Wire returns the h1 wire for cfg's base URL, or nil where net/http
// must send: a proxy from the environment applies, the URL carries user
// information or a query, or it is not http(s).
func newH1Wire(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *h1Wire {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	t, err := h1.New(h1.Config{Origin: u, Dial: dial, MaxIdle: cfg.MaxConns, IdleTimeout: idleTimeout})
	if err != nil {
		return nil
	}
	return &h1Wire{t: t, base: cfg.BaseURL, prefix: strings.TrimRight(u.EscapedPath(), "/"), timeout: cfg.AttemptTimeout}
}

func (w *h1Wire) send(ctx context.Context, method, path string, h http.Header, body []byte, stream bool) (*http.Response, func() bool, error) {
	r := h1.Request{Method: method, Target: w.prefix + path, Header: h, Body: body, Timeout: w.timeout, Stream: stream}
	resp, wrote, err := w.t.Do(ctx, &r)
	if err != nil {
		// Shaped as net/http's errors are: the method and URL, never a
		// header.
		return nil, wroteFunc(wrote), &url.Error{Op: urlErrorOp(method), URL: w.base + path, Err: err}
	}
	return resp, wroteFunc(wrote), nil
}

func (w *h1Wire) closeIdle() { w.t.CloseIdle() }

// urlErrorOp is net/http's name for method in a url.Error ("Post").
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// netWire sends over net/http.
type netWire struct{ c *Client }

func (w *netWire) closeIdle() {} // the http.Client's, which CloseIdle closes

func (w *netWire) send(ctx context.Context, method, path string, h http.Header, body []byte, stream bool) (*http.Response, func() bool, error) {
	if err := h1.CheckHeader(h); err != nil {
		// net/http refuses the same, but with an error nothing can tell
		// from a failed attempt.
		return nil, wroteNo, err
	}
	var cancel context.CancelFunc
	if stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, w.c.cfg.AttemptTimeout)
	}
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		},
	})
	wrote := sent.Load
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.c.cfg.BaseURL+path, rd)
	if err != nil {
		cancel()
		return nil, wrote, fmt.Errorf("%w: %w", h1.ErrRequest, err)
	}
	// A *bytes.Reader body: NewRequestWithContext has set GetBody (a
	// replay from the start, for the transport's retry on a reused
	// connection that closed) and ContentLength already.
	req.Header = h
	resp, err := w.c.http.Do(req)
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
