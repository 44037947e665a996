package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/format/rawjson"
	"github.com/sluice-dev/sluice/keys"
)

// Send is one attempt like Do, for a caller that relays someone else's
// request (the proxy). It differs from Do in two ways:
//
//   - extra headers are added to the request (the caller's anthropic-version
//     replaces the client's, anthropic-beta is passed on). Credentials in
//     extra (x-api-key, Authorization) are ignored: the request is always
//     authenticated by key; so are the headers the transport owns
//     (Content-Length, Content-Type, Host, Connection, Transfer-Encoding).
//   - when stream is true and the answer is a 2xx text/event-stream, the
//     body is not read: Send returns the Outcome of the headers (class OK,
//     status, limits, org, request id) and the response, whose Body the
//     caller reads and must close; closing it ends the attempt. Every other
//     answer is read and classified as Do classifies it, and resp is nil.
//
// A streamed attempt is bounded by AttemptTimeout only until the answer's
// head arrives: a long answer streams as long as it takes.
// A stream that goes silent must be cut by its reader, through ctx:
// dispatch.StreamSender cuts one that sends no event for
// dispatch.Config.StreamIdle (a stalled stream would otherwise hold its
// lane slot forever).
func (c *Client) Send(ctx context.Context, key *keys.Key, method, path string, body []byte, extra http.Header, stream bool) (Outcome, *http.Response) {
	start := time.Now()
	h := make(http.Header, 8)
	// One backing array for the values set here, instead of one per
	// Set: the names are canonical already.
	vals := make([]string, 0, 4)
	put := func(name, v string) {
		vals = append(vals, v)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	put(api.HeaderVersion, c.cfg.Version)
	put("Content-Type", "application/json")
	if stream {
		put("Accept", "text/event-stream")
	} else {
		put("Accept", "application/json")
	}
	put("User-Agent", c.cfg.UserAgent)
	for name, vs := range extra {
		name = http.CanonicalHeaderKey(name) // no allocation when it already is
		switch {
		case name == "X-Api-Key", name == "Authorization", name == "Content-Type", owned(name):
			// The key's, the body's and the transport's: net/http
			// dropped or replaced these too.
			continue
		}
		if len(vs) > 0 {
			// Shared, not copied: the transport only reads a request's header,
			// and every attempt sets its own map's entries.
			h[name] = vs
		}
	}
	key.Apply(h, c.cfg.Auth)

	resp, wrote, err := c.send(ctx, method, path, h, body, stream)
	if errors.Is(err, errRequest) {
		// Refused before a byte left: no key or retry can send it.
		return Outcome{Class: Invalid, ShouldRetry: -1, Err: fmt.Errorf("client: %w", err)}, nil
	}
	if err != nil {
		o := failed(ctx, err, start)
		o.Sent = wrote()
		return o, nil
	}
	if stream && resp.StatusCode/100 == 2 && isEventStream(resp.Header) {
		o := Outcome{Class: OK, Status: resp.StatusCode, Header: resp.Header, Latency: time.Since(start), ShouldRetry: -1, Sent: wrote()}
		readHeaders(&o, resp.Header)
		return o, resp
	}
	b, err := readBody(resp)
	resp.Body.Close()
	if err != nil {
		// The status arrived but the body did not: no usable answer.
		o := failed(ctx, err, start)
		o.Status, o.Header, o.Sent = resp.StatusCode, resp.Header, wrote()
		return o, nil
	}
	o := Outcome{Status: resp.StatusCode, Body: b, Header: resp.Header, Latency: time.Since(start), ShouldRetry: -1, Sent: wrote()}
	readHeaders(&o, resp.Header)
	o.Class = Classify(resp.StatusCode, resp.Header, b)
	if o.Class != OK {
		o.Err = statusError(resp.StatusCode, resp.Header, b)
		if o.Class == RateLimited {
			o.Named = namedLimit(b)
		}
		return o, nil
	}
	usage, stop, err := readMessage(b)
	if err != nil {
		// A 2xx that is not a Message is not an answer.
		o.Class, o.Err = Transport, fmt.Errorf("client: HTTP %d with a body that is not JSON: %w", resp.StatusCode, err)
	} else {
		o.Usage, o.StopReason = usage, stop
	}
	return o, nil
}

// presizeMax bounds the buffer readBody allocates on the answer's word
// alone, before a byte has arrived: an upstream that declares 200 MB and
// sends 16 bytes must not cost 200 MB an attempt. Messages are far below it.
const presizeMax = 1 << 20

// readBody reads an answer's body, at most maxBody bytes of it. When the
// answer says its length (up to presizeMax), into one buffer of that
// size: io.ReadAll grew its buffer from 512 bytes, three allocations and
// copies for a small answer. The last read of a sized body returns io.EOF
// with the data, so the connection goes back to the pool as it did.
func readBody(resp *http.Response) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= presizeMax {
		b := make([]byte, n)
		_, err := io.ReadFull(resp.Body, b)
		return b, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxBody))
}

// readMessage reads usage and stop_reason of a Message. It validates the
// whole answer but decodes only the small usage object (docs/overhead.md).
func readMessage(b []byte) (api.Usage, string, error) {
	var u api.Usage
	if !json.Valid(b) {
		return u, "", json.Unmarshal(b, new(any)) // the decoder's own message
	}
	b = bytes.TrimSpace(b)
	if b[0] != '{' {
		return u, "", errors.New("the answer is not a JSON object")
	}
	var msBuf [16]rawjson.Member // on the stack (rawjson.AppendMembers)
	ms := rawjson.AppendMembers(msBuf[:0], b)
	var stop string
	if v := rawjson.Lookup(ms, "stop_reason"); v != nil && v[0] == '"' {
		stop = rawjson.String(v)
	}
	if v := rawjson.Lookup(ms, "usage"); v != nil {
		if err := json.Unmarshal(v, &u); err != nil {
			return api.Usage{}, "", fmt.Errorf("usage: %w", err)
		}
	}
	return u, stop, nil
}

// readHeaders fills the fields of o that come from response headers.
func readHeaders(o *Outcome, h http.Header) {
	o.Limits = api.ParseRateLimitHeaders(h)
	o.OrgID = h.Get(api.HeaderOrganizationID)
	o.WorkspaceID = h.Get(api.HeaderWorkspaceID)
	o.RequestID = h.Get(api.HeaderRequestID)
	o.Date = api.ParseDate(h)
	// An HTTP-date retry-after is on the server's clock: read it against
	// the answer's Date when there is one.
	ref := time.Now()
	if !o.Date.IsZero() {
		ref = o.Date
	}
	o.RetryAfter, o.HasRetryAfter = api.ParseRetryAfter(h, ref)
	switch h.Get(api.HeaderShouldRetry) {
	case "true":
		o.ShouldRetry = 1
	case "false":
		o.ShouldRetry = 0
	}
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}
