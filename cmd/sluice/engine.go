package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/keys"
)

// engineFlags configure keys, the client and the lanes, shared by every
// command that calls the API. Keys never come from flags: only from the
// environment, .env or --keys-file.
type engineFlags struct {
	baseURL      string
	http2        bool
	keysFile     string
	noDotEnv     bool
	auth         string
	version      string
	models       string
	caps         map[api.Family]*int
	reserve      float64
	maxRetryWait time.Duration
	keyDeadAfter time.Duration
	seed         uint64
	fleet        fleetFlags
}

func (f *engineFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	f.registerAPI(fl)
	f.caps = map[api.Family]*int{}
	for _, fam := range []api.Family{api.FamilySonnet, api.FamilyHaiku, api.FamilyOpus, api.FamilyUnknown} {
		v := new(int)
		def := dispatch.DefaultCaps[fam]
		if e, ok := os.LookupEnv("SLUICE_CAP_" + strings.ToUpper(string(fam))); ok {
			if n, err := strconv.Atoi(e); err == nil && n > 0 {
				def = n
			}
		}
		fl.IntVar(v, "cap-"+string(fam), def, fmt.Sprintf("concurrency cap per key (per organization: keys of one org share it) for %s models (env SLUICE_CAP_%s)", fam, strings.ToUpper(string(fam))))
		f.caps[fam] = v
	}
	fl.Float64Var(&f.reserve, "reserve", 0.15, "share of every rate-limit bucket (of its depth, learned from the headers) left for colleagues")
	fl.DurationVar(&f.maxRetryWait, "max-retry-after", dispatch.DefaultMaxRetryAfter, "honour an API retry-after up to this long (a longer one is logged and capped)")
	fl.DurationVar(&f.keyDeadAfter, "key-dead-after", keys.DefaultHealth.DeadAfter, "a key refused (401, or 403 for a model) is held back and re-probed; it is dead only once its refusals have lasted this long (and number 3)")
	fl.Uint64Var(&f.seed, "jitter-seed", 1, "seed of the backoff jitter")
	f.fleet.register(cmd, f)
}

// registerAPI registers the flags that say which API and which keys:
// every command that talks to the API (and sluice plan, which probes it).
func (f *engineFlags) registerAPI(fl *pflag.FlagSet) {
	fl.StringVar(&f.baseURL, "base-url", "", "API base URL (default $ANTHROPIC_BASE_URL, else https://api.anthropic.com)")
	fl.StringVar(&f.keysFile, "keys-file", "", "file of label=key lines (keys are also read from ANTHROPIC_API_KEY, ANTHROPIC_BATCH_KEY, ANTHROPIC_API_KEY_LOW_PRIO, ANTHROPIC_API_KEYS and .env)")
	fl.BoolVar(&f.noDotEnv, "no-dotenv", false, "do not read ./.env")
	fl.StringVar(&f.auth, "auth", "x-api-key", "auth header style: x-api-key or bearer")
	fl.StringVar(&f.version, "anthropic-version", api.VersionDefault, "anthropic-version header to send (input lines are checked against what that version refuses before anything is sent: sluice models)")
	fl.StringVar(&f.models, "models", "", modelsFlagUsage)
	fl.BoolVar(&f.http2, "http2", false, "send over HTTP/2 where the API offers it (many requests on few connections) instead of one kept-alive HTTP/1.1 connection per request in flight: for thousands in flight at once (docs/engine.md)")
}

// loadKeys reads the key pool and logs its warnings.
func (f *engineFlags) loadKeys(log *slog.Logger) (*keys.Pool, error) {
	p, err := f.loadPool()
	if err != nil {
		return nil, err
	}
	redact := p.Redact
	logRedact.Store(&redact)
	for _, w := range p.Warnings() {
		log.Warn(w)
	}
	return p, nil
}

// loadPool reads the key sources into a pool with the run's refusal rule.
func (f *engineFlags) loadPool() (*keys.Pool, error) {
	p, err := keys.Load(keys.LoadOptions{KeysFile: f.keysFile, NoDotEnv: f.noDotEnv})
	if err != nil {
		return nil, err
	}
	if f.keyDeadAfter < 0 {
		return nil, fmt.Errorf("--key-dead-after %v: must not be negative", f.keyDeadAfter)
	}
	p.SetHealth(keys.Health{DeadAfter: f.keyDeadAfter})
	return p, nil
}

// keysAndClient loads the key pool and builds a client with enough
// connections for every key's lanes at their caps (run, judge, proxy).
func (f *engineFlags) keysAndClient(log *slog.Logger) (*keys.Pool, *client.Client, error) {
	pool, err := f.loadKeys(log)
	if err != nil {
		return nil, nil, err
	}
	conns := f.totalConns(len(pool.Keys()))
	c, err := f.client(conns)
	if err != nil {
		return nil, nil, err
	}
	if lim := openFilesLimit(); !f.http2 && lim > 0 && uint64(conns)+256 > lim {
		log.Warn("the caps allow more requests in flight than this process may open connections (one each over HTTP/1.1): raise the open-files limit (ulimit -n) or pass --http2",
			"in_flight_at_caps", conns, "open_files_limit", lim)
	}
	return pool, c, nil
}

// client builds the tuned client.
func (f *engineFlags) client(maxConns int) (*client.Client, error) {
	style, err := keys.ParseAuthStyle(f.auth)
	if err != nil {
		return nil, err
	}
	base := f.baseURL
	if base == "" {
		base = os.Getenv("ANTHROPIC_BASE_URL")
	}
	return client.New(client.Config{BaseURL: base, Version: f.version, Auth: style, MaxConns: maxConns, HTTP2: f.http2}), nil
}

// dispatchConfig builds the engine configuration for pool p.
func (f *engineFlags) dispatchConfig(c *client.Client, p *keys.Pool, log *slog.Logger) dispatch.Config {
	caps := f.capsByFamily()
	cfg := dispatch.Config{
		Client: c, Keys: p.Keys(), Caps: caps, Seed: f.seed, Logger: log,
		Lane: lane.Config{Reserve: reserveFlag(f.reserve)}, MaxRetryAfter: f.maxRetryWait,
	}
	f.fleet.wire(&cfg)
	return cfg
}

// reserveFlag maps the user's 0 ("no reserve") to lane's "none" (-1).
func reserveFlag(r float64) float64 {
	if r <= 0 {
		return -1
	}
	return r
}

func (f *engineFlags) totalConns(nKeys int) int { return dispatch.ConnsFor(f.capsByFamily(), nKeys) }

// capsByFamily is the --cap flags as the engine takes them (the fable
// family, which has no flag of its own, takes the other models' cap).
func (f *engineFlags) capsByFamily() map[api.Family]int {
	caps := map[api.Family]int{}
	for fam, v := range f.caps {
		caps[fam] = *v
	}
	caps[api.FamilyFable] = caps[api.FamilyUnknown]
	return caps
}

// logRedact is the loaded key pool's Redact, once there is one: every
// logger newLogger made passes every line through it (keys.RedactingHandler),
// so a key value a lower layer logs — a raw error body, a URL error — is
// never printed.
var logRedact atomic.Pointer[func(string) string]

// redactLoaded redacts every key loaded so far (rotations included).
func redactLoaded(s string) string {
	if f := logRedact.Load(); f != nil {
		return (*f)(s)
	}
	return s
}

func newLogger() *slog.Logger {
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	return slog.New(keys.RedactingHandler(h, func(s string) string {
		if f := logRedact.Load(); f != nil {
			return (*f)(s)
		}
		return s
	}))
}
