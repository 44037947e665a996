package judgejob_test

import (
	"context"
	"fmt"
	"net"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/judgejob"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// Judge asks the judge model about each item with a rubric (here the
// default one) and returns one classified verdict per item and a summary
// per group. Here the API is the simulator, which answers judge requests
// with verdicts in the rubric's shape.
func ExampleJudge() {
	cfg := sim.Default()
	cfg.Faults = sim.Faults{}
	cfg.TimeScale = 20 // simulated latency 20× shorter: the example runs in a fraction of a second
	cfg.Verdicts.Enabled = true
	s, _ := sim.New(cfg)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	defer s.Close()

	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: cfg.Orgs[0].Keys[0].Key})})
	if err != nil {
		panic(err)
	}
	items := []judge.Item{
		{ID: "a", Fields: map[string]string{"question": "2+2?", "completion": "4"}, Groups: []string{"math"}},
		{ID: "b", Fields: map[string]string{"question": "Capital of France?", "completion": "Paris"}, Groups: []string{"geo"}},
	}
	res, err := judgejob.Judge(context.Background(), items, judgejob.Config{Job: job.Options{
		Dispatch: dispatch.Config{BaseURL: "http://" + ln.Addr().String(), Keys: pool.Keys()},
	}})
	if err != nil {
		panic(err)
	}
	for _, v := range res.Verdicts {
		fmt.Println(v.ID, v.Class, v.Groups)
	}
	fmt.Println(res.Judged, "judged,", res.Pending, "pending,", res.Report.Succeeded, "calls")
	// Output:
	// a ok [math]
	// b ok [geo]
	// 2 judged, 0 pending, 2 calls
}
