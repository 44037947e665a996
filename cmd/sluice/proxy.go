package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/keys"
)

// proxyListen opens the proxy's listener (tests replace it).
var proxyListen = net.Listen

// proxyOwnMemory is what the proxy process holds besides request bodies
// (the dispatcher, its queues, buffers, the runtime), with room to spare:
// the Go memory limit is --max-body-memory plus this.
const proxyOwnMemory = 256 << 20

// envProxyToken holds the token callers must send when it is set. A token
// is a secret: it is read from the environment, never from a flag.
const envProxyToken = "SLUICE_PROXY_TOKEN"

func proxyCmd() *cobra.Command {
	var (
		eng         engineFlags
		listen      string
		maxWait     time.Duration
		maxAttempts int
		grace       time.Duration
		stateDir    string
		cachePath   string
		cacheMode   string
		prefer      string
		limits      string
		obsPath     string
		noProbe     bool
		idle        time.Duration
		writeStall  time.Duration
		noAuth      bool
		metricsPub  bool
		connIdle    time.Duration
		bodyTimeout time.Duration
		writeTime   time.Duration
		bodyMemory  byteSize = proxy.DefaultMaxBodyMemory
		sf          seeFlags
	)
	cmd := &cobra.Command{
		Use:   "proxy --listen 127.0.0.1:8787",
		Short: "Serve an Anthropic-compatible gateway that runs every call on every key at once",
		Long: `proxy serves the Messages API (plain and streaming), count_tokens, models and
Message Batches on a local address. Point an SDK at it with
ANTHROPIC_BASE_URL=http://127.0.0.1:8787 and every call gets sluice's lanes:
all keys at once, header pacing, the etiquette caps, AIMD, retries. A call
waits for capacity (up to --max-wait) instead of failing with a 429.

Callers never hold the real keys: they send the proxy's token as their API
key (ANTHROPIC_API_KEY=$(sluice proxy token)), which the proxy checks and
throws away. The token is SLUICE_PROXY_TOKEN when set, else a random one kept
in --state-dir (file "token", 0600). --no-auth serves without a token, on a
loopback address only. Keys come from ANTHROPIC_API_KEY, ANTHROPIC_BATCH_KEY,
ANTHROPIC_API_KEY_LOW_PRIO, ANTHROPIC_API_KEYS, ./.env or --keys-file.

One proxy owns a state dir: a second one refuses to start while the first
serves, before it probes a key, and waits (up to --grace + 15 s; Ctrl-C
ends the wait) while it drains.

Message Batches created through it are routed by the planner
(--batch-prefer, default cost): sync, Message Batches at half price, or a
split; the batch part keeps a journal in --state-dir, so a restart adopts
its batches instead of paying twice.

GET /metrics (Prometheus) and GET /healthz report what it does (with the
token, unless --metrics-public). SIGINT or SIGTERM drains: requests in
flight finish (up to --grace); a second signal aborts them. See
docs/proxy.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			restoreModels, err := useCatalog(eng.models)
			if err != nil {
				return err
			}
			defer restoreModels()
			if _, err := plan.ParsePriority(prefer); err != nil {
				return fmt.Errorf("--batch-prefer: %w", err)
			}
			token, tokenFrom, err := proxyToken(stateDir, noAuth)
			if err != nil {
				return err
			}
			out := cmd.ErrOrStderr()
			// The state dir's owner first: a second proxy is refused
			// before it binds a port or spends a probe, and a restart
			// waits here for its predecessor's drain (Ctrl-C ends the
			// wait). Released last, once the cache is closed.
			var (
				lock *proxy.StateLock
				px   *proxy.Proxy
			)
			if stateDir != "" {
				lockWait := grace + 15*time.Second
				lock, err = proxy.LockState(cmd.Context(), stateDir, lockWait, func(holder string) {
					fmt.Fprintf(out, "sluice proxy: the state dir %s is held by a proxy that is draining (%s); waiting for it to finish, up to %s\n", stateDir, holder, lockWait)
				})
				if err != nil {
					if cmd.Context().Err() != nil {
						return &exitError{code: exitInterrupted, err: fmt.Errorf("proxy: interrupted while waiting for the state dir %s", stateDir)}
					}
					return err
				}
				defer func() {
					if px != nil {
						px.Close()
					}
					lock.Release()
				}()
			}
			// The address actually bound decides, not the name asked for:
			// a name may resolve beyond loopback.
			ln, err := proxyListen("tcp", listen)
			if err != nil {
				return fmt.Errorf("proxy: %w", err)
			}
			defer ln.Close()
			if err := lock.SetAddr("http://" + ln.Addr().String()); err != nil {
				return fmt.Errorf("proxy: state dir lock: %w", err)
			}
			if token == "" && !addrIsLoopback(ln.Addr()) {
				return fmt.Errorf("proxy: --no-auth: %s listens on %s, which is not a loopback address: drop --no-auth (callers then send the proxy's token as their API key), or listen on 127.0.0.1", listen, ln.Addr())
			}
			if token == "" {
				fmt.Fprintln(out, "sluice proxy: WARNING: --no-auth: any program of any user on this machine can spend the organizations' keys and read every virtual batch through this proxy")
			}
			if os.Getenv("GOMEMLIMIT") == "" && bodyMemory > 0 {
				// Freed bodies go back to the system rather than waiting
				// for the heap to double (docs/proxy.md, "Bounds").
				debug.SetMemoryLimit(int64(bodyMemory) + proxyOwnMemory)
			}
			log := newLogger()
			pool, c, err := eng.keysAndClient(log)
			if err != nil {
				return err
			}
			if _, err := dispatch.Discover(cmd.Context(), c, pool.Keys(), "claude-sonnet-4-5"); err != nil {
				return err
			}
			for _, w := range pool.SameOrgWarnings() {
				log.Warn(w)
			}
			dcfg := eng.dispatchConfig(c, pool, log)
			dcfg.StreamIdle = idle
			d, err := dispatch.New(dcfg)
			if err != nil {
				return err
			}
			var ch *cache.Cache
			if cachePath != "" {
				mode := cache.On
				if cmd.Flags().Changed("cache-mode") {
					if mode, err = cache.ParseMode(cacheMode); err != nil {
						return err
					}
				}
				if ch, err = cache.Open(cachePath, mode); err != nil {
					return err
				}
				defer ch.Close()
			}
			// Virtual batches are routed by the planner, for the
			// organizations as observed (a probe for one never seen,
			// recorded — its failure too — so it is sent once a day at
			// most), or as --limits-file says.
			rf := routeFlags{route: "auto", prefer: prefer, limitsFile: limits, observations: obsPath, noProbe: noProbe}
			world := func(j plan.Job) (plan.World, error) { return rf.world(pool.Keys(), c, nil, j, log) }
			planner := route.Planner(route.Options{Route: "auto", Prefer: prefer, Log: log, World: world})
			maxBody := int64(bodyMemory)
			if maxBody == 0 {
				maxBody = -1 // no bound
			}
			px, err = proxy.New(proxy.Config{Dispatcher: d, Client: c, Pool: pool, Token: token, MetricsPublic: metricsPub,
				MaxWait: maxWait, MaxAttempts: maxAttempts, StreamWriteTimeout: writeStall,
				BodyTimeout: bodyTimeout, WriteTimeout: writeTime, MaxBodyMemory: maxBody,
				StateDir: stateDir, Lock: lock, Cache: ch, Logger: log, Plan: planner})
			if err != nil {
				return err
			}
			// The history lives in the state dir, which is this process's
			// (its lock): opened only now.
			hist := ""
			if stateDir != "" {
				hist = filepath.Join(stateDir, "proxy.history")
			}
			see, err := sf.start("proxy", "", hist, "sluice proxy on "+ln.Addr().String(), cmd.ErrOrStderr(), log)
			if err != nil {
				return err
			}
			defer see.stop()
			live := pool.Live()
			fmt.Fprintf(out, "sluice proxy: serving on http://%s (%d live keys in %d organizations)\n", ln.Addr(), len(live), len(pool.GroupByOrg()))
			fmt.Fprintf(out, "  point an SDK at it: export ANTHROPIC_BASE_URL=http://%s ANTHROPIC_API_KEY=%s\n", ln.Addr(), tokenFrom)
			for _, k := range pool.Keys() {
				fmt.Fprintf(out, "  key %s  org %s\n", k, k.Org())
			}

			dctx, dstop := context.WithCancel(context.Background())
			defer dstop()
			go d.Serve(dctx)
			see.w.Start(job.Live{Snapshot: d.Snapshot, Keys: pool.Keys(), Cost: px.Cost})
			// Key rotation (SIGHUP, the keys file changed): new keys join,
			// removed ones drain and leave, without a restart.
			rotations := eng.watchKeys(dctx, pool, log)
			rotator := dispatch.NewRotator(c, pool.Keys(), "claude-sonnet-4-5", log)
			go func() {
				cur := pool
				for {
					var rot keys.Rotation
					select {
					case rot = <-rotations:
					case <-dctx.Done():
						return
					}
					if _, err := rotator.Apply(dctx, rot, d); err != nil && dctx.Err() == nil {
						log.Warn("key rotation failed", "err", err)
					}
					// The pool drops the keys that retired, not every
					// removed one: a removed key its org still needs
					// stays in use (dispatch.Rotator).
					var retired []*keys.Key
					for _, k := range cur.Keys() {
						if k.Retired() {
							retired = append(retired, k)
						}
					}
					cur = cur.Rotated(rot.Added, retired)
					px.SetPool(cur)
					see.w.KeysJoined(rot.Added)
				}
			}()
			srv := &http.Server{Handler: px, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: connIdle,
				ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				px.Drain()
				d.Close()
				dstop()
				<-d.Done()
				px.Wait()
				return fmt.Errorf("proxy: %w", err)
			case <-cmd.Context().Done():
			}
			err = drainProxy(cmd.Context(), out, srv, px, d, dstop, grace)
			if serr := see.finish(nil, nil, err, "", out); serr != nil {
				log.Warn("the proxy's history", "err", serr)
			}
			_, views := d.Snapshot() // what the lanes saw, for the next plan
			recordObservations(rf.observations, views, batch.Stats{}, 0, log)
			return err
		},
	}
	eng.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:8787", "address to serve on (HOST:PORT)")
	fl.DurationVar(&maxWait, "max-wait", 60*time.Second, "how long a call may wait for capacity before it gets a 429 with retry-after")
	fl.IntVar(&maxAttempts, "max-attempts", proxy.DefaultMaxAttempts, "upstream attempts per call at most (then the last 429/529/5xx goes back to the caller with retry-after); negative: no bound but the retry budgets")
	fl.DurationVar(&grace, "grace", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish")
	fl.StringVar(&stateDir, "state-dir", defaultProxyStateDir(), "where virtual batches and the caller token are kept across restarts, by one proxy at a time (empty: in memory only; then the token must come from "+envProxyToken+")")
	fl.StringVar(&cachePath, "cache", "", "response cache file (bbolt) for plain Messages calls; hits cost nothing")
	fl.StringVar(&cacheMode, "cache-mode", "on", "with --cache: on, read-only or off")
	fl.StringVar(&prefer, "batch-prefer", "cost", "what the planner optimises for each Message Batch created through the proxy: cost, latency or balanced")
	fl.StringVar(&limits, "limits-file", "", "the organizations' limits for the batch planner (see sluice plan --help); default: what runs observed (--observations), else one max_tokens-1 probe per organization, sent once")
	registerObserveFlags(fl, &obsPath, &noProbe)
	fl.DurationVar(&idle, "stream-idle", dispatch.DefaultStreamIdle, "end a streamed answer that sends no event for this long (the API sends ping events)")
	sf.register(fl, false)
	fl.DurationVar(&writeStall, "stream-write-timeout", 60*time.Second, "end a stream whose caller's connection does not take one event for this long (it stopped reading), freeing its slot; 0: the default; negative: never")
	fl.BoolVar(&noAuth, "no-auth", false, "serve without a token (loopback only): any local program of any user can spend the keys")
	fl.BoolVar(&metricsPub, "metrics-public", false, "serve /metrics and /healthz without the token (a scraper on a trusted network)")
	fl.DurationVar(&connIdle, "idle-timeout", 2*time.Minute, "close a kept-alive connection idle this long")
	fl.DurationVar(&bodyTimeout, "body-timeout", proxy.DefaultBodyTimeout, "end a request whose body has not arrived within this long (408); negative: never")
	fl.DurationVar(&writeTime, "write-timeout", proxy.DefaultWriteTimeout, "end a non-streaming answer (a message, a batch, a results download) whose caller does not take one write for this long; negative: never")
	fl.Var(&bodyMemory, "max-body-memory", "request-body bytes held at once (e.g. 1GiB, 512MiB); past it callers wait up to --max-wait, then get a 429; 0: no bound")
	cmd.AddCommand(proxyTokenCmd())
	return cmd
}

// proxyToken is the token callers must send, and how the start message
// tells them to get it: SLUICE_PROXY_TOKEN when set, else the state dir's
// (created on first use), else none with --no-auth.
func proxyToken(stateDir string, noAuth bool) (token, from string, err error) {
	if t := os.Getenv(envProxyToken); t != "" {
		if noAuth {
			return "", "", fmt.Errorf("proxy: --no-auth and %s both given: choose one", envProxyToken)
		}
		return t, "$" + envProxyToken, nil
	}
	if noAuth {
		return "", "anything (--no-auth)", nil
	}
	if stateDir == "" {
		return "", "", fmt.Errorf("proxy: no --state-dir to keep the caller token in: set %s, or give a --state-dir (or --no-auth, loopback only)", envProxyToken)
	}
	t, err := proxy.StateToken(stateDir)
	if err != nil {
		return "", "", err
	}
	from = "$(sluice proxy token)"
	if stateDir != defaultProxyStateDir() {
		from = fmt.Sprintf("$(sluice proxy token --state-dir %s)", shellQuote(stateDir))
	}
	return t, from, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '~' || r == ':' || r == '+' || r == '=' || r == ',' || r == '@' ||
			('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// proxyTokenCmd is `sluice proxy token`: it prints the token callers send
// as their API key.
func proxyTokenCmd() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print the token callers of `sluice proxy` send as their API key",
		Long: `token prints the token a caller of 'sluice proxy' sends as its API key:
SLUICE_PROXY_TOKEN when set, else the one kept in --state-dir (created there,
0600, when there is none yet; the proxy uses the same one). Use it as

  export ANTHROPIC_API_KEY=$(sluice proxy token)

It is a secret: anyone who holds it can spend the organizations' keys
through the proxy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := os.Getenv(envProxyToken)
			if t == "" {
				var err error
				if t, err = proxy.StateToken(stateDir); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), t)
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultProxyStateDir(), "the proxy's state dir, where its token is kept")
	return cmd
}

// drainProxy shuts the proxy down: no new connections, /healthz 503,
// requests in flight finish within grace; a second signal, or the end of
// grace, aborts what is left.
func drainProxy(sigCtx context.Context, out io.Writer, srv *http.Server, px *proxy.Proxy, d *dispatch.Dispatcher, dstop context.CancelFunc, grace time.Duration) error {
	fmt.Fprintf(out, "sluice proxy: draining — requests in flight may finish (up to %s); interrupt again to abort them\n", grace)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		select {
		case <-interruptedAgain(sigCtx):
			fmt.Fprintln(out, "sluice proxy: aborting requests in flight")
			cancel()
		case <-ctx.Done():
		}
	}()
	px.Drain()
	err := srv.Shutdown(ctx)
	if err != nil {
		// Grace is over: cut the connections and the attempts.
		srv.Close()
		d.Abort()
	}
	d.Close()
	select {
	case <-d.Done():
	case <-ctx.Done():
		dstop()
		d.Abort()
		<-d.Done()
	}
	px.Wait()
	st, _ := d.Snapshot()
	fmt.Fprintf(out, "sluice proxy: stopped (%d answered, %d final errors, %d gave up; %d × 429, %d × 529 and %d failures retried)\n",
		st.OK, st.Final, st.Transport, st.RetriesRateLimited, st.RetriesOverloaded, st.RetriesFailed)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &exitError{code: exitInterrupted, err: errors.New("proxy: requests in flight were aborted")}
	}
	return nil
}

// addrIsLoopback reports whether a bound address serves only this
// machine (an unspecified address, 0.0.0.0 or ::, serves every network).
func addrIsLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// defaultProxyStateDir is $XDG_STATE_HOME/sluice/proxy, else
// ~/.local/state/sluice/proxy, else "" (in memory).
func defaultProxyStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sluice", "proxy")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "sluice", "proxy")
	}
	return ""
}
