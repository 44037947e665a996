package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/keys"
)

// Options is the shape of the promised dispatch.Config (the package
// dispatch at the module's root): that package converts its Config to
// Options field for field, so a field added there and not here, or here
// and not there, does not compile. Build turns Options into the engine's
// Config and the client it sends with; the job and proxy facades use it
// too, so one rule makes a dispatcher from the promised configuration.
type Options struct {
	BaseURL       string
	Version       string
	Auth          keys.AuthStyle
	Keys          []*keys.Key
	DiscoverModel string
	Caps          map[api.Family]int
	Reserve       float64
	MaxRetryAfter time.Duration
	MaxQueued     int
	HTTP2         bool
	Transport     http.RoundTripper
	Logger        *slog.Logger
}

// DefaultDiscoverModel is the model the keys' free probe names when
// Options.DiscoverModel is empty.
const DefaultDiscoverModel = "claude-sonnet-4-5"

// Client builds the client o describes: one kept-alive connection per
// request in flight at every key's largest cap (HTTP/1.1), or HTTP/2 when
// asked.
func (o Options) Client() *client.Client {
	caps := maps.Clone(DefaultCaps)
	maps.Copy(caps, o.Caps)
	return client.New(client.Config{BaseURL: o.BaseURL, Version: o.Version, Auth: o.Auth,
		MaxConns: ConnsFor(caps, len(o.Keys)), HTTP2: o.HTTP2, Transport: o.Transport})
}

// ConnsFor is how many connections nKeys keys' lanes need at caps (the
// largest cap a key, and some to spare): HTTP/1.1 carries one request in
// flight a connection, and a pool smaller than that churns connections.
func ConnsFor(caps map[api.Family]int, nKeys int) int {
	most := 0
	for _, v := range caps {
		most = max(most, v)
	}
	return max(64, most*nKeys+16)
}

// Config is the engine's configuration for o, sending with c.
func (o Options) Config(c *client.Client) Config {
	return Config{Client: c, Keys: o.Keys, Caps: o.Caps, Lane: lane.Config{Reserve: o.Reserve},
		MaxRetryAfter: o.MaxRetryAfter, MaxQueued: o.MaxQueued, Logger: o.Logger}
}

// Discover names the organization of every key of o that has none yet,
// with Discover's free probe (DiscoverModel, default
// DefaultDiscoverModel). Beyond Discover's own errors (no key left alive,
// a refused workspace), it fails when ctx ended during the probes, and
// when no probe got an answer at all — the API at BaseURL is not there —
// where Discover would give every key a provisional organization and let
// the lanes find out.
func (o Options) Discover(ctx context.Context, c *client.Client) error {
	var unknown []*keys.Key
	for _, k := range o.Keys {
		if k.Org() == "" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	model := o.DiscoverModel
	if model == "" {
		model = DefaultDiscoverModel
	}
	found, err := Discover(ctx, c, unknown, model)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dispatch: probing the keys: %w", err)
	}
	var lost error
	for _, d := range found {
		if d.Outcome.Status != 0 {
			return nil
		}
		if lost == nil {
			lost = d.Outcome.Err
		}
	}
	return fmt.Errorf("dispatch: no key's probe got an answer from the API at %s: %v", c.BaseURL(), lost)
}

// Pool is o's keys as a keys.Pool (a nil Pool rotated to hold them): what
// the proxy reads live keys from, and whose Redact hides their values.
func (o Options) Pool() *keys.Pool { return (*keys.Pool)(nil).Rotated(o.Keys, nil) }

// Redactor is what hides o's key values from any text a caller is given.
func (o Options) Redactor() func(string) string { return o.Pool().Redact }

// RedactLog is l (nil: a logger that discards) with o's key values
// redacted from every line: the one wrapping the front doors log through.
func (o Options) RedactLog(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return slog.New(keys.RedactingHandler(l.Handler(), o.Redactor()))
}

// Start discovers o's keys and builds a Dispatcher on a client of its
// own; the caller runs its Serve and, once it returns, the client's
// CloseIdle. The Logger is wrapped so no key value is logged.
func (o Options) Start(ctx context.Context) (*Dispatcher, *client.Client, error) {
	if len(o.Keys) == 0 {
		return nil, nil, errors.New("dispatch: no keys")
	}
	o.Logger = o.RedactLog(o.Logger)
	c := o.Client()
	if err := o.Discover(ctx, c); err != nil {
		c.CloseIdle()
		return nil, nil, err
	}
	d, err := New(o.Config(c))
	if err != nil {
		c.CloseIdle()
		return nil, nil, err
	}
	return d, c, nil
}
