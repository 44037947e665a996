package judgejob_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/job"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/judgejob"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

func api(t *testing.T) dispatch.Config {
	t.Helper()
	s, base := simtest.Loopback(t, func(c *sim.Config) { c.Faults, c.TimeScale, c.Verdicts.Enabled = sim.Faults{}, 50, true })
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: s.Config().Orgs[0].Keys[0].Key})})
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.Config{BaseURL: base, Keys: pool.Keys()}
}

var items = []judge.Item{
	{ID: "a", Fields: map[string]string{"question": "2+2?", "completion": "4"}},
	{ID: "b", Fields: map[string]string{"question": "Capital of France?", "completion": "Paris"}},
}

// A response cache answers the second job: the same verdicts, no call.
func TestCacheFileAnswersAgain(t *testing.T) {
	a := api(t)
	cfg := judgejob.Config{CacheFile: filepath.Join(t.TempDir(), "cache.db"), Job: job.Options{Dispatch: a}}
	first, err := judgejob.Judge(context.Background(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := judgejob.Judge(context.Background(), items, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.Report.Succeeded != 2 || second.Report.FromCache != 2 || second.Report.Succeeded != 0 {
		t.Fatalf("first %+v\nsecond %+v: want 2 calls, then none: 2 from the cache", *first.Report, *second.Report)
	}
	for i := range items {
		if first.Verdicts[i].Class != second.Verdicts[i].Class || second.Verdicts[i].Class != judge.OK {
			t.Fatalf("verdict %d: %v then %v", i, first.Verdicts[i].Class, second.Verdicts[i].Class)
		}
	}
}

// An item without what the rubric asks for is an ItemError, and nothing
// is sent.
func TestItemErrorIsPromised(t *testing.T) {
	bad := []judge.Item{{ID: "x", Fields: map[string]string{"question": "no completion"}}}
	_, err := judgejob.Judge(context.Background(), bad, judgejob.Config{Job: job.Options{Dispatch: api(t)}})
	var ie *judgejob.ItemError
	if !errors.As(err, &ie) || ie.Total != 1 {
		t.Fatalf("err %v: want a judgejob.ItemError naming one item", err)
	}
}
