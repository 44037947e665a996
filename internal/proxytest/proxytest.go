// Package proxytest serves a sluice proxy in front of a simulator, both on
// real loopback HTTP, for the SDK conformance tests of the proxy.
package proxytest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/logbuf"
	"github.com/sluice-dev/sluice/internal/simtest"
	"github.com/sluice-dev/sluice/lane"
	"github.com/sluice-dev/sluice/proxy"
	"github.com/sluice-dev/sluice/sim"
)

// Options shape the world, the dispatcher and the proxy.
type Options struct {
	World    func(*sim.Config)
	Dispatch func(*dispatch.Config)
	Proxy    func(*proxy.Config)
}

// Env is a running simulator and the proxy in front of it.
type Env struct {
	Sim        *sim.Server
	Dispatcher *dispatch.Dispatcher
	Proxy      *proxy.Proxy
	URL        string // the proxy's base URL
	Logs       *logbuf.Buffer
}

// Start serves the three-org simulator at time scale 1000 (changed by
// o.World), a dispatcher over its keys and a proxy, until the test ends.
// The proxy logs at debug level into Env.Logs.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) {
		c.TimeScale = 1000
		if o.World != nil {
			o.World(c)
		}
	})
	pool, err := simtest.Pool(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: base, MaxConns: 512})
	if _, err := dispatch.Discover(context.Background(), c, pool.Keys(), "claude-sonnet-4-5"); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dcfg := dispatch.Config{Client: c, Keys: pool.Keys(), Logger: log, Lane: lane.ForTimeScale(s.Config().TimeScale),
		Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}}
	if o.Dispatch != nil {
		o.Dispatch(&dcfg)
	}
	d, err := dispatch.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go d.Serve(ctx)
	pcfg := proxy.Config{Dispatcher: d, Client: c, Pool: pool, Logger: log}
	if o.Proxy != nil {
		o.Proxy(&pcfg)
	}
	px, err := proxy.New(pcfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ts := httptest.NewServer(px)
	t.Cleanup(func() {
		ts.Close()
		px.Drain()
		d.Close()
		cancel()
		d.Abort()
		<-d.Done()
		px.Wait()
	})
	return &Env{Sim: s, Dispatcher: d, Proxy: px, URL: ts.URL, Logs: logs}
}

// InFlight is the number of attempts in flight on every lane.
func (e *Env) InFlight() int {
	_, lanes := e.Dispatcher.Snapshot()
	n := 0
	for _, l := range lanes {
		n += l.State.InFlight
	}
	return n
}
