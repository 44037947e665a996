package sim

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// zeroLatencyUnlimited is the world for measuring the simulator itself:
// no latency, no limits, so the only cost is the server's own.
func zeroLatencyUnlimited() Config {
	c := Default()
	for name := range c.Latency {
		c.Latency[name] = LatencyModel{TokensPerSec: 1e12}
	}
	for i := range c.Orgs {
		c.Orgs[i].Limits = nil
		c.Orgs[i].DefaultLimits = nil
	}
	c.PromptCache = false
	return c
}

// BenchmarkLoopback measures requests per second the simulator answers over
// real loopback TCP from 64 concurrent keep-alive clients, small bodies,
// zero latency. The client shares the machine's cores, so this is a floor
// for what the server can do.
//
//	go test ./sim -run '^$' -bench Loopback -benchtime 50000x
func BenchmarkLoopback(b *testing.B) {
	s, err := New(zeroLatencyUnlimited())
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Shutdown(b.Context())
	const clients = 64
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	client := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/v1/messages"
	keys := []string{FakeKeyHighPrio, FakeKeyBatch, FakeKeyLowPrio}
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(clients / runtime.GOMAXPROCS(0))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			body := fmt.Appendf(nil, `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"item %d"}]}`, n)
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set(api.HeaderAPIKey, keys[n%3])
			req.Header.Set(api.HeaderVersion, api.VersionDefault)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
