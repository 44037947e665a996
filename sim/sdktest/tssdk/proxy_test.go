package tssdk_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/testkit/proxytest"
	"github.com/sluice-dev/sluice/sim"
)

// TestTypeScriptSDKThroughProxy runs js/proxy.test.mjs with the official
// TypeScript SDK against `sluice proxy` (package proxy) in front of the
// simulator, the proxy's token as the SDK's key (as `sluice proxy`
// requires by default): messages, streams, a batch round trip and errors
// as the SDK's own classes.
func TestTypeScriptSDKThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: shells out to node and npm")
	}
	node, npm := requireTools(t)
	ensureNodeModules(t, npm)

	fast := proxytest.Start(t, proxytest.Options{Proxy: func(c *proxy.Config) { c.StateDir = t.TempDir() }})
	// One slot, answers that take 2 s, a 20 ms wait limit: a second call
	// while the first is in flight gets the proxy's 429.
	slow := proxytest.Start(t, proxytest.Options{
		World: func(c *sim.Config) {
			c.TimeScale = 1
			for k := range c.Latency {
				c.Latency[k] = sim.LatencyModel{TTFT: sim.Duration(2 * time.Second), TokensPerSec: 1e6}
			}
		},
		Dispatch: func(c *dispatch.Config) { c.Keys = c.Keys[:1]; c.Caps = map[api.Family]int{api.FamilySonnet: 1} },
		Proxy:    func(c *proxy.Config) { c.MaxWait = 20 * time.Millisecond },
	})

	runNodeTest(t, node, "proxy.test.mjs",
		"PROXY_URL="+fast.URL,
		"PROXY_TOKEN="+proxytest.Token,
		"PROXY_SLOW_URL="+slow.URL,
		"SIM_MODEL="+model,
	)
}
