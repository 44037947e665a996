// Package simtest starts the simulator for tests and benchmarks and hands
// out its fake keys the way a user's environment would.
package simtest

import (
	"net"
	"testing"

	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// KeyEnv maps the standard key variables (ANTHROPIC_API_KEY,
// ANTHROPIC_BATCH_KEY, ANTHROPIC_API_KEY_LOW_PRIO) to the first key of the
// world's first three organizations: the environment a user would set.
func KeyEnv(cfg sim.Config) map[string]string {
	var first []string
	for _, o := range cfg.Orgs {
		first = append(first, o.Keys[0].Key)
	}
	return EnvOf(first)
}

// EnvOf maps the standard key variables, in that order, to the first
// three of ks (one key an organization): how a benchmark's upstream,
// the simulator or another, hands its keys to the engine.
func EnvOf(ks []string) map[string]string {
	env := map[string]string{}
	for i, name := range []string{keys.EnvAPIKey, keys.EnvBatch, keys.EnvLowPrio}[:min(len(ks), 3)] {
		env[name] = ks[i]
	}
	return env
}

// PoolOf loads the keys env names as `sluice run` would (never from a
// .env).
func PoolOf(env map[string]string) (*keys.Pool, error) {
	return keys.Load(keys.LoadOptions{Env: keys.EnvMap(env), NoDotEnv: true})
}

// Pool loads the world's keys as `sluice run` would (never from a .env).
func Pool(cfg sim.Config) (*keys.Pool, error) { return PoolOf(KeyEnv(cfg)) }

// Loopback serves a simulator of the three-org preset, changed by mutate,
// on real loopback TCP until the test ends. It returns the server and its
// base URL.
func Loopback(t testing.TB, mutate func(*sim.Config)) (*sim.Server, string) {
	t.Helper()
	cfg := sim.Default()
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	// Close, not Shutdown: a client's unused spare connections would hold
	// Shutdown for 5 s.
	t.Cleanup(func() { s.Close() })
	return s, "http://" + ln.Addr().String()
}
