package dispatch_test

import (
	"context"
	"fmt"
	"net"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// A Dispatcher sends Messages calls over every organization's keys, each on
// the lane with the most headroom, and owns every retry. New probes each
// key for its organization; run Serve, then Submit a stream of requests or
// Do one.
func ExampleDispatcher_Do() {
	cfg := sim.Default()
	cfg.Faults = sim.Faults{}
	cfg.TimeScale = 20
	s, _ := sim.New(cfg)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	defer s.Close()

	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key, keys.EnvBatch: cfg.Orgs[1].Keys[0].Key})})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, err := dispatch.New(ctx, dispatch.Config{BaseURL: "http://" + ln.Addr().String(), Keys: pool.Keys()})
	if err != nil {
		panic(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	go d.Serve(serveCtx)

	res := d.Do(ctx, &dispatch.Request{ID: "q-1", Model: "claude-sonnet-4-5", MaxTokens: 64,
		Params: []byte(`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)})
	fmt.Println(res.Class, res.Status, res.Usage.OutputTokens > 0)
	d.Close()
	<-d.Done()
	fmt.Println(d.Stats().OK, "ok")
	// Output:
	// ok 200 true
	// 1 ok
}
