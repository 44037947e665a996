// Package proxy is sluice as an Anthropic-compatible HTTP gateway: an
// http.Handler to point an official SDK's base URL at, so code that makes
// one Messages call at a time (or creates Message Batches) runs over every
// organization's keys at the binding rate, with no change but the URL and
// the key — the library form of `sluice proxy`.
//
// It serves POST /v1/messages (plain and streaming, passed through event
// by event), count_tokens, the models list, and virtual Message Batches
// (the batch path for a large one, the sync lanes for a small one, as the
// planner decides; kept across restarts in StateDir). A caller that
// exceeds the capacity waits up to MaxWait, then gets a 429 with a
// retry-after of when capacity is expected.
//
// This package is promised (see the README's Go API); the gateway's
// implementation is internal. Invariants: one proxy per StateDir (New
// takes its lock, Shutdown lets it go); a virtual batch's row is sent once,
// and answered once; the upstream keys are never shown to a caller, a log
// line or a page.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	engine "github.com/sluice-dev/sluice/internal/engine/dispatch"
	iproxy "github.com/sluice-dev/sluice/internal/front/proxy"
)

// Config configures a Proxy. Dispatch.Keys is required.
type Config struct {
	// Dispatch says how to reach the API and with which keys.
	Dispatch dispatch.Config
	// Token must be sent by every caller as x-api-key or Authorization:
	// Bearer (at least 16 characters, no space). Required unless NoAuth.
	Token string
	// NoAuth accepts any credential: only for a listener no one else can
	// reach (loopback on a machine of your own).
	NoAuth bool
	// StateDir keeps virtual batches across restarts; empty keeps them in
	// memory only, and runs every row on the sync lanes.
	StateDir string
	// MaxWait bounds how long a request may wait for capacity (default
	// 60 s); past it the caller gets a 429 with retry-after.
	MaxWait time.Duration
	// MaxAttempts bounds the upstream attempts of one caller request
	// (default 4; negative: the dispatcher's retry budgets alone).
	MaxAttempts int
	// Logger receives the proxy's log; nil discards it.
	Logger *slog.Logger
}

// ErrStateInUse (wrapped) is New's error when another proxy holds
// StateDir.
var ErrStateInUse = iproxy.ErrStateInUse

// Proxy is the gateway; it runs a dispatcher of its own.
type Proxy struct {
	p    *iproxy.Proxy
	d    *engine.Dispatcher
	c    *client.Client
	stop context.CancelFunc
}

// New probes cfg's keys for their organizations, starts the dispatcher and
// builds the gateway (taking StateDir's lock, if set: ErrStateInUse when
// another proxy holds it). It fails as dispatch.New does, and without a
// Token unless NoAuth.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	switch {
	case cfg.NoAuth && cfg.Token != "":
		return nil, errors.New("proxy: Token and NoAuth both set: choose one")
	case !cfg.NoAuth && (len(cfg.Token) < 16 || strings.ContainsFunc(cfg.Token, unicode.IsSpace)):
		return nil, errors.New("proxy: a Token of at least 16 characters, none of them space, is required (or NoAuth, for a listener no one else can reach)")
	}
	eo := engine.Options(cfg.Dispatch)
	log := eo.RedactLog(cfg.Logger)
	if eo.Logger == nil {
		eo.Logger = cfg.Logger // Start redacts it
	}
	d, c, err := eo.Start(ctx)
	if err != nil {
		return nil, err
	}
	serveCtx, stop := context.WithCancel(context.Background())
	go d.Serve(serveCtx)
	world := observe.Probed(cfg.Dispatch.Keys, c, log)
	p, err := iproxy.New(iproxy.Config{Dispatcher: d, Client: c, Pool: eo.Pool(),
		Token: cfg.Token, StateDir: cfg.StateDir, MaxWait: cfg.MaxWait, MaxAttempts: cfg.MaxAttempts, Logger: log,
		Plan: route.Planner(route.Options{Route: "auto", Prefer: "cost", Log: log, World: world})})
	if err != nil {
		d.Close()
		stop()
		<-d.Done()
		c.CloseIdle()
		return nil, err
	}
	return &Proxy{p: p, d: d, c: c, stop: stop}, nil
}

// ServeHTTP answers one caller request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.p.ServeHTTP(w, r) }

// Shutdown stops the gateway in order: new requests are refused, those in
// flight finish (their answers reach their callers), the dispatcher stops
// and StateDir's lock is let go. Stop the HTTP server that serves the
// Proxy first (http.Server.Shutdown), so no request is cut. When ctx ends
// first, requests still in flight are aborted (a virtual batch's rows
// resume on the next New over the same StateDir) and ctx's error is
// returned.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.p.Drain()
	p.d.Close()
	var err error
	select {
	case <-p.d.Done():
	case <-ctx.Done():
		err = ctx.Err()
		p.d.Abort()
		p.stop()
		<-p.d.Done()
	}
	p.stop()
	p.p.Wait()
	p.c.CloseIdle()
	return errors.Join(err, p.p.Close())
}
