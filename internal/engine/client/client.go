// Package client sends one attempt of an Anthropic API call and classifies
// what came back into a small closed set. It never retries: the dispatcher
// is the only retry owner, so every attempt is paced and counted once.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/keys"
)

// Class is what one attempt amounts to, for the retry owner.
type Class int

// The outcome classes. Their order means nothing.
const (
	// OK: a 2xx answer.
	OK Class = iota
	// RateLimited: 429 rate_limit_error from a rate limit (not the spend
	// cap). Retry after retry-after; the lane slows down.
	RateLimited
	// Overloaded: 529 overloaded_error. Retry with backoff; the lane slows.
	Overloaded
	// ServerError: 5xx other than 529, and 408/409. Retry with backoff.
	ServerError
	// Transport: no response at all (connection refused or reset, timeout,
	// truncated body). Retry with backoff; the server may have billed it.
	Transport
	// KeyDead: 401, 403, 402 billing_error, the spend-cap 429, or a 400
	// saying the credit balance or a self-set usage limit is exhausted. The
	// request moves elsewhere at no attempt cost; the Scope says what was
	// refused (the key, the key for a model, the organization) and
	// keys.Key.Refused decides when a refused key is dead.
	KeyDead
	// Invalid: 400, 404, 413, 422 and other 4xx: the request itself is
	// wrong and will fail the same way on any key. Final.
	Invalid
	// Canceled: the caller's context ended the attempt.
	Canceled
)

var classNames = [...]string{"ok", "rate_limited", "overloaded", "server_error", "transport", "key_dead", "invalid", "canceled"}

// Scope is what an outcome says something about: the retry owner acts on
// the scope, never on a status code of its own reading.
type Scope int

// Scopes.
const (
	// ScopeNone: an answer, or an attempt cut by the caller.
	ScopeNone Scope = iota
	// ScopeRequest: the request itself is wrong; any key would fail it.
	ScopeRequest
	// ScopeKey: this key (401): other keys of its org are fine.
	ScopeKey
	// ScopeKeyModel: this key for the request's model pool (403
	// permission_error: a key can be refused one model and allowed others).
	ScopeKeyModel
	// ScopeOrg: the key's organization: a refusal (402, the spend cap, an
	// exhausted credit balance or self-set usage limit) of every key of
	// it, or a 429 naming a limit on its usage across all models, which
	// slows every lane of it.
	ScopeOrg
	// ScopeLane: the org × model pool's rate limits (429 rate_limit_error):
	// the lane's congestion, or a bucket the headers already showed empty.
	ScopeLane
	// ScopeAPI: the API itself (529 overloaded, 5xx, no answer): busy or
	// failing for everyone, not a sign of this lane's rate.
	ScopeAPI
	// ScopeWorkspace: the key's workspace reached the spend limit set on
	// it (400 "…specified workspace API usage limits"): the key, and any
	// other key of that workspace, not the organization's others.
	ScopeWorkspace
)

var scopeNames = [...]string{"none", "request", "key", "key × model", "organization", "lane", "api", "workspace"}

func (s Scope) String() string { return scopeNames[s] }

// ScopeOf returns the scope of an attempt of class c answered with status.
func ScopeOf(c Class, status int) Scope {
	switch c {
	case Invalid:
		return ScopeRequest
	case KeyDead:
		switch status {
		case 401:
			return ScopeKey
		case 403:
			return ScopeKeyModel
		}
		return ScopeOrg
	case RateLimited:
		return ScopeLane
	case Overloaded, ServerError, Transport:
		return ScopeAPI
	}
	return ScopeNone
}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Outcome is everything the retry owner needs from one attempt.
type Outcome struct {
	Class  Class
	Status int         // HTTP status, 0 without a response
	Body   []byte      // the response body (a Message, or an error body)
	Header http.Header // nil without a response
	Limits api.RateLimitHeaders
	OrgID  string
	// WorkspaceID is the anthropic-workspace-id header: the workspace the
	// call was charged to ("" : absent).
	WorkspaceID string
	RequestID   string
	// RetryAfter is the server's delay hint (retry-after-ms, retry-after),
	// valid when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// ShouldRetry is the x-should-retry header: -1 absent, 0 false, 1 true.
	ShouldRetry int
	// Err describes a failure without a usable answer; it never contains a
	// key value.
	Err     error
	Latency time.Duration
	// Usage and StopReason are parsed from an OK Messages body.
	Usage      api.Usage
	StopReason string
	// Date is the answer's Date header (whole seconds), zero if absent: the
	// server's clock, for reading the rate-limit resets without skew.
	Date time.Time
	// Named is the limit a RateLimited answer's message names, if it does.
	Named api.NamedLimit
	// Sent reports that the whole request was written: an attempt that
	// failed or was canceled after that may have been done (and billed)
	// by the API.
	Sent bool
}

// Scope returns the scope of the outcome: ScopeOf its class and status,
// except a 429 whose message names an organization-wide limit (Named.Org),
// which is the organization's, and a workspace's own usage limit (a 400),
// which the status alone does not tell from the organization's.
func (o *Outcome) Scope() Scope {
	if o.Class == RateLimited && o.Named.Org {
		return ScopeOrg
	}
	s := ScopeOf(o.Class, o.Status)
	if s == ScopeOrg && o.Status == 400 && isWorkspaceLimit(o.Body) {
		return ScopeWorkspace
	}
	return s
}

// Config configures a Client.
type Config struct {
	// BaseURL of the API, without a trailing slash (default
	// https://api.anthropic.com).
	BaseURL string
	// Version is the anthropic-version header (default 2023-06-01).
	Version string
	// Auth picks x-api-key (default) or Authorization: Bearer.
	Auth keys.AuthStyle
	// MaxConns sizes the connection pool: it should be at least the total
	// concurrency sluice will use, so connections are reused, not churned.
	MaxConns int
	// AttemptTimeout bounds one attempt (default 10 minutes, like the SDKs).
	AttemptTimeout time.Duration
	// Transport replaces the tuned transport (tests that wrap a
	// transport).
	Transport http.RoundTripper
	// HTTP2 lets the transport speak HTTP/2 over TLS where the server
	// offers it (many requests multiplexed on few connections) instead of
	// HTTP/1.1 alone, one kept-alive connection per request in flight:
	// for thousands of requests in flight at once.
	HTTP2 bool
	// Dial opens connections in place of a net.Dialer (tests: an
	// in-memory network).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// UserAgent is sent on every request.
	UserAgent string
}

// Client sends attempts. It is safe for concurrent use.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a Client with its own tuned net/http transport: HTTP/1.1,
// one kept-alive connection per request in flight, idle connections per
// host sized to MaxConns (the default keeps 2, which churns thousands of
// connections under load), HTTP/2 only when cfg.HTTP2 asks, answers
// uncompressed (as the API writes them), a proxy from the environment
// (HTTPS_PROXY, …), TCP keep-alive.
func New(cfg Config) *Client {
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.anthropic.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Version == "" {
		cfg.Version = api.VersionDefault
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 10 * time.Minute
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "sluice/0"
	}
	rt := cfg.Transport
	if rt == nil {
		dial := cfg.Dial
		if dial == nil {
			dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		var protocols http.Protocols
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(cfg.HTTP2)
		rt = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dial,
			Protocols:             &protocols,
			MaxIdleConns:          cfg.MaxConns,
			MaxIdleConnsPerHost:   cfg.MaxConns,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: cfg.AttemptTimeout,
			DisableCompression:    true,
		}
	}
	return &Client{cfg: cfg, http: &http.Client{Transport: rt, CheckRedirect: refuseRedirect}}
}

// CloseIdle closes the connections no attempt is using. The client stays
// usable: the next attempt opens a new one.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// refuseRedirect keeps every redirect as the answer: net/http strips only
// Authorization and cookies on a cross-host redirect, so following one
// would send x-api-key to wherever the Location points.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// BaseURL returns the API base URL in use.
func (c *Client) BaseURL() string { return c.cfg.BaseURL }

// Version returns the anthropic-version the client sends.
func (c *Client) Version() string { return c.cfg.Version }

// WithVersion returns a client that sends anthropic-version v ("" : c's
// own) over c's connections: a gateway relays each caller's version.
func (c *Client) WithVersion(v string) *Client {
	if v == "" || v == c.cfg.Version {
		return c
	}
	d := *c
	d.cfg.Version = v
	return &d
}

// maxBody bounds what is read of one response: far above any Message.
const maxBody = 256 << 20

// Do sends one attempt of method path with body, authenticated by key, and
// classifies the outcome. body is sent byte for byte. It is Send with no
// extra headers, not streamed.
func (c *Client) Do(ctx context.Context, key *keys.Key, method, path string, body []byte) Outcome {
	o, _ := c.Send(ctx, key, method, path, body, nil, false)
	return o
}

// failed builds the outcome of an attempt that got no usable response.
func failed(ctx context.Context, err error, start time.Time) Outcome {
	o := Outcome{Class: Transport, ShouldRetry: -1, Latency: time.Since(start)}
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		o.Class = Canceled
	}
	// url.Error carries the URL, never a header, so no key can leak here.
	o.Err = fmt.Errorf("client: %w", err)
	return o
}

// statusError renders an error answer as a Go error: the API's type and
// message, and the request id.
func statusError(status int, h http.Header, body []byte) error {
	if status >= 300 && status < 400 {
		return fmt.Errorf("client: HTTP %d redirect to %q: sluice never follows a redirect (the API key would go with it); point the base URL at the final address", status, redactedLocation(h.Get("Location")))
	}
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Err.Type != "" {
		return fmt.Errorf("client: HTTP %d %s", status, eb.Error())
	}
	snippet := body
	if len(snippet) > 200 {
		snippet = snippet[:200]
	}
	return fmt.Errorf("client: HTTP %d: %q", status, snippet)
}

// redactedLocation is a redirect's target without its query (which could
// carry anything) for an error message.
func redactedLocation(loc string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return "(unparsable)"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

// Classify maps an answer to its class: by HTTP status first, then, for the
// few statuses that mean more than one thing, by the error body.
func Classify(status int, h http.Header, body []byte) Class {
	switch {
	case status >= 200 && status < 300:
		return OK
	case status == 401, status == 403, status == 402:
		return KeyDead
	case status == 429:
		if isSpendCap(body) {
			return KeyDead
		}
		return RateLimited
	case status == api.StatusOverloaded:
		return Overloaded
	case status == 408, status == 409, status >= 500:
		return ServerError
	case status == 400 && isUsageLimit(body):
		return KeyDead
	default:
		return Invalid
	}
}

// isSpendCap recognises the monthly spend-cap 429: no retry-after and
// error.details.error_code enforced_spend_limit_reached. Retrying it fails
// until next month.
func isSpendCap(body []byte) bool {
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Err.Details != nil && eb.Err.Details.ErrorCode == api.SpendLimitErrorCode {
		return true
	}
	return false
}

// namedLimit is the limit a 429 error body's message names, if any.
func namedLimit(body []byte) api.NamedLimit {
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) != nil {
		return api.NamedLimit{}
	}
	return api.ParseNamedLimit(eb.Err.Message)
}

// isUsageLimit recognises the 400s that mean the organization cannot spend:
// a self-set usage limit or an empty credit balance.
func isUsageLimit(body []byte) bool {
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) != nil {
		return false
	}
	m := eb.Err.Message
	return strings.HasPrefix(m, "You have reached your specified") || strings.Contains(m, "credit balance is too low")
}

// isWorkspaceLimit recognises the usage-limit 400 of a workspace rather
// than of the organization.
func isWorkspaceLimit(body []byte) bool {
	var eb api.ErrorBody
	return json.Unmarshal(body, &eb) == nil && strings.HasPrefix(eb.Err.Message, "You have reached your specified workspace")
}

// Probe checks key with a free count_tokens call: the answer's
// anthropic-organization-id names the key's organization, and a 401/403
// says the key is dead, at no cost.
func (c *Client) Probe(ctx context.Context, key *keys.Key, model string) Outcome {
	body, _ := json.Marshal(map[string]any{"model": model,
		"messages": []map[string]any{{"role": "user", "content": "ping"}}})
	return c.Do(ctx, key, "POST", "/v1/messages/count_tokens", body)
}

// Stream sends a body-less GET of path and returns the response unread,
// for answers too large to hold (batch results files). The caller closes
// the body; a status other than 200 is returned as is, for the caller to
// classify. It uses the same transport, auth style and version as Do.
func (c *Client) Stream(ctx context.Context, key *keys.Key, path, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.cfg.BaseURL+path, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set(api.HeaderVersion, c.cfg.Version)
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	key.Apply(req.Header, c.cfg.Auth)
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error names the URL, never a header: no key can leak.
		return nil, fmt.Errorf("client: %w", err)
	}
	return resp, nil
}
