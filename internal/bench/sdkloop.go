package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluice-dev/sluice/internal/testkit/simtest"
)

// LoopResult is what the impolite baseline got in a world: a plain loop
// over the official Go SDK (its default retries, no pacing), PerKey calls
// in flight on every key.
type LoopResult struct {
	Wall      time.Duration
	Steady    float64 // answers per second, 10 %–90 % of answers
	OK, Lost  int     // answered; failed after the SDK's retries
	Attempts  int64   // the simulator's count of the loop's calls
	Share429  float64 // of its calls
	Duplicate int64
}

// RunSDKLoop runs the world's job as a plain loop over the official Go SDK
// v1 with its defaults (two retries with its backoff, retry-after honoured
// up to 60 s), perKey calls in flight on each key of the world, and no
// pacing at all: the baseline sluice must match for speed and beat for
// cleanliness.
func (w World) RunSDKLoop(ctx context.Context, binary string, perKey int) (LoopResult, error) {
	var res LoopResult
	dir, err := os.MkdirTemp("", "sluice-loop-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	wl := w.Workload
	in := filepath.Join(dir, "requests.jsonl")
	if err := wl.WriteFile(in); err != nil {
		return res, err
	}
	var bodies []json.RawMessage
	f, err := os.Open(in)
	if err != nil {
		return res, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line struct {
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			f.Close()
			return res, err
		}
		bodies = append(bodies, line.Params)
	}
	f.Close()
	sp, err := StartSim(ctx, binary, w.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	keyEnv := simtest.KeyEnv(w.Sim)
	tr := &http.Transport{MaxIdleConns: 4 * perKey * len(keyEnv), MaxIdleConnsPerHost: 4 * perKey * len(keyEnv), IdleConnTimeout: 90 * time.Second}
	defer tr.CloseIdleConnections()
	var (
		next     atomic.Int64
		ok, lost atomic.Int64
		wg       sync.WaitGroup
	)
	steady := newSteadyWindow(len(bodies))
	start := time.Now()
	for _, key := range keyEnv {
		cl := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(sp.Base),
			option.WithAPIKey(key), option.WithHTTPClient(&http.Client{Transport: tr}))
		for range perKey {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(len(bodies)) || ctx.Err() != nil {
						return
					}
					var m anthropic.Message
					err := cl.Post(ctx, "/v1/messages", nil, &m, option.WithRequestBody("application/json", []byte(bodies[i])))
					if err != nil {
						var e *anthropic.Error
						if !errors.As(err, &e) && ctx.Err() != nil {
							return
						}
						lost.Add(1)
						continue
					}
					steady.observe(ok.Add(1))
				}
			})
		}
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.OK, res.Lost, res.Steady = int(ok.Load()), int(lost.Load()), steady.rate()
	st, err := sp.Stats()
	if err != nil {
		return res, err
	}
	var limited int64
	for _, o := range st.Orgs {
		for _, p := range o.Pools {
			res.Attempts += p.Admitted + p.RateLimited + p.Overloaded + p.ServerErrors
			limited += p.RateLimited
		}
	}
	if res.Attempts > 0 {
		res.Share429 = float64(limited) / float64(res.Attempts)
	}
	res.Duplicate = st.Bodies.ExtraAnswers
	return res, nil
}

// String is one line for the log.
func (r LoopResult) String() string {
	return fmt.Sprintf("%.1f s, %d answered, %d lost after the SDK's retries, steady %.1f req/s; 429s %.1f %% of %d calls, billed twice %d",
		r.Wall.Seconds(), r.OK, r.Lost, r.Steady, 100*r.Share429, r.Attempts, r.Duplicate)
}
