// Package proxytest serves a sluice proxy in front of a simulator, both on
// real loopback HTTP, for the SDK conformance tests of the proxy.
package proxytest

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// Options shape the world, the dispatcher and the proxy.
type Options struct {
	World    func(*sim.Config)
	Dispatch func(*dispatch.Config)
	Proxy    func(*proxy.Config)
}

// Token is the proxy's token in Start's Env unless o.Proxy changes it:
// callers send it as their API key, as `sluice proxy` requires by default.
const Token = "sluice-proxy-test-token-0123456789"

// Env is a running simulator and the proxy in front of it.
type Env struct {
	Sim        *sim.Server
	Dispatcher *dispatch.Dispatcher
	Proxy      *proxy.Proxy
	URL        string // the proxy's base URL
	Token      string // the token callers send as their key ("": none needed)
	Logs       *logbuf.Buffer
}

// Start serves the three-org simulator at time scale 1000 (changed by
// o.World), a dispatcher over its keys and a proxy that requires Token
// (o.Proxy may change it), until the test ends. The proxy logs at debug
// level into Env.Logs.
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
	token := Token
	st := Serve(t, pool, dispatch.Config{Client: c, Keys: pool.Keys(),
		Retry: dispatch.RetryPolicy{BaseBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}}, o.Dispatch, func(c *proxy.Config) {
		c.Token = Token
		if o.Proxy != nil {
			o.Proxy(c)
		}
		token = c.Token
	})
	return &Env{Sim: s, Dispatcher: st.Dispatcher, Proxy: st.Proxy, URL: st.Server.URL, Token: token, Logs: st.Logs}
}

// Stack is a serving dispatcher and a proxy over it on loopback HTTP.
type Stack struct {
	Dispatcher *dispatch.Dispatcher
	Proxy      *proxy.Proxy
	Server     *httptest.Server
	Logs       *logbuf.Buffer // the dispatcher's and the proxy's log, at debug level
	// Close stops it all in the order a server shuts down: no new
	// connections, drain, the dispatcher's end, the proxy's background
	// work. It runs at the end of the test; calling it earlier is a stop
	// (a restart test serves a new Stack after it).
	Close func()
	// CloseWithin is Close bounded by d: false when the stop had not
	// ended after d (a hang). The test's end then no longer waits for it
	// (the test has a failure to report, not a stop to wait for).
	CloseWithin func(d time.Duration) bool
}

// Serve starts a dispatcher on dcfg (its Logger set to the Stack's log;
// dispatchOpt, if set, changes dcfg then) and a proxy over it with pool's
// keys (proxyOpt changes its Config), until the test ends.
func Serve(t testing.TB, pool *keys.Pool, dcfg dispatch.Config, dispatchOpt func(*dispatch.Config), proxyOpt func(*proxy.Config)) *Stack {
	t.Helper()
	return ServeOn(t, nil, pool, dcfg, dispatchOpt, proxyOpt)
}

// ServeOn is Serve with the proxy listening on ln (nil: loopback TCP). On
// an in-memory listener (internal/testkit/pipenet) and a dcfg whose client dials
// one, the whole stack runs inside a testing/synctest bubble, in fake time.
func ServeOn(t testing.TB, ln net.Listener, pool *keys.Pool, dcfg dispatch.Config, dispatchOpt func(*dispatch.Config), proxyOpt func(*proxy.Config)) *Stack {
	t.Helper()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dcfg.Logger = log
	if dispatchOpt != nil {
		dispatchOpt(&dcfg)
	}
	d, err := dispatch.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go d.Serve(ctx)
	pcfg := proxy.Config{Dispatcher: d, Client: dcfg.Client, Pool: pool, Logger: log}
	if proxyOpt != nil {
		proxyOpt(&pcfg)
	}
	px, err := proxy.New(pcfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(px)
	if ln != nil {
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	st := &Stack{Dispatcher: d, Proxy: px, Server: srv, Logs: logs}
	var once sync.Once
	closed := make(chan struct{})
	var abandoned atomic.Bool
	stop := func() {
		once.Do(func() {
			go func() {
				defer close(closed)
				st.Server.Close()
				px.Drain()
				d.Close()
				cancel()
				d.Abort()
				<-d.Done()
				px.Wait()
				px.Close()
			}()
		})
	}
	st.Close = func() {
		stop()
		<-closed
	}
	st.CloseWithin = func(d time.Duration) bool {
		stop()
		select {
		case <-closed:
			return true
		case <-time.After(d):
			abandoned.Store(true)
			return false
		}
	}
	t.Cleanup(func() {
		if !abandoned.Load() {
			st.Close()
		}
	})
	return st
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
