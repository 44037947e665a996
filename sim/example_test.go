package sim_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/sim"
)

// The simulator is a documented-API stand-in for tests: serve it on
// loopback and point any Anthropic client at its URL, with one of its fake
// keys. Its limits, bucket depths, faults and time scale are the Config's.
func Example() {
	cfg := sim.Default()
	cfg.Faults = sim.Faults{} // no injected 5xx or 529 in this example
	s, err := sim.New(cfg)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go s.Serve(ln)
	defer s.Close()

	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/messages", strings.NewReader(
		`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", cfg.Orgs[0].Keys[0].Key)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("anthropic-ratelimit-requests-limit") != "", strings.Contains(string(body), `"type":"message"`))
	// Output: 200 true true
}
