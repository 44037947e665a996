package job_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// Run takes a requests file in the Message Batches format and writes one
// results line per request, durably; running it again resumes. Here the
// API is the simulator on loopback, and the keys come from an environment
// map (a real run reads ANTHROPIC_API_KEY and friends, a .env or a keys
// file).
func ExampleRun() {
	cfg := sim.Default()
	cfg.Faults = sim.Faults{}
	cfg.TimeScale = 20 // simulated latency 20× shorter: the example runs in a fraction of a second
	s, _ := sim.New(cfg)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	defer s.Close()

	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "requests.jsonl"), filepath.Join(dir, "results.jsonl")
	f, _ := os.Create(in)
	for i := range 3 {
		fmt.Fprintf(f, `{"custom_id":"q-%d","params":{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, i)
	}
	f.Close()

	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key})})
	if err != nil {
		panic(err)
	}
	api := dispatch.Config{BaseURL: "http://" + ln.Addr().String(), Keys: pool.Keys()}
	rep, err := job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api})
	if err != nil {
		panic(err)
	}
	lines := 0
	r, _ := os.Open(out)
	defer r.Close()
	for sc := bufio.NewScanner(r); sc.Scan(); {
		lines++
	}
	fmt.Println(rep.Succeeded, "succeeded;", lines, "results lines")

	// The same call again finds every request done and sends nothing.
	rep, _ = job.Run(context.Background(), job.Options{Input: in, Output: out, Dispatch: api})
	fmt.Println(rep.AlreadyDone, "already done,", rep.Written, "written")
	// Output:
	// 3 succeeded; 3 results lines
	// 3 already done, 0 written
}
