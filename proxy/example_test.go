package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/proxy"
	"github.com/sluice-dev/sluice/sim"
)

// A Proxy is an http.Handler that speaks the Anthropic API: point an SDK's
// base URL at it and every Messages call (and virtual Message Batch) runs
// over all the organizations' keys. Shut down in order: the HTTP server,
// then the Proxy.
func Example() {
	cfg := sim.Default()
	cfg.Faults = sim.Faults{}
	cfg.TimeScale = 20
	s, _ := sim.New(cfg)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	defer s.Close()

	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key})})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	px, err := proxy.New(ctx, proxy.Config{
		Dispatch: dispatch.Config{BaseURL: "http://" + ln.Addr().String(), Keys: pool.Keys()},
		Token:    "local-token-of-this-example",
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(px)

	// What an SDK sends, with the proxy's token in place of an API key.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(
		`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", "local-token-of-this-example")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"type":"message"`))

	srv.Close()
	if err := px.Shutdown(ctx); err != nil {
		panic(err)
	}
	// Output: 200 true
}
