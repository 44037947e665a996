package route_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// TestRerouteTakesEveryLineOnce: two feeders racing over the same input
// while the routing changes at random moments (sync, batch, splits) take
// every line exactly once, each by the side the routing named when it was
// taken, and both end — over many seeded interleavings.
func TestRerouteTakesEveryLineOnce(t *testing.T) {
	const lines = 3000
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			f, err := route.Open(route.Config{Routing: route.Routing{Route: route.Split, BatchShare: 0.5},
				Client: client.New(client.Config{BaseURL: "http://127.0.0.1:1"}), Journal: filepath.Join(t.TempDir(), "journal"), NoSync: true, Lines: lines,
				Sink: func(dispatch.Result, string) {}, Reroute: func(*dispatch.Request, string) {}})
			if err != nil {
				t.Fatal(err)
			}
			var owner [lines + 1]atomic.Int32 // 0 none, 1 sync, 2 batch
			var taken [2]atomic.Int64
			feeder := func(s route.Side, pause int) {
				defer f.Leave(s)
				for {
					gen := f.Generation()
					for n := 1; n <= lines; n++ {
						if f.Take(s, n, fmt.Sprintf("r%05d", n)) {
							if !owner[n].CompareAndSwap(0, int32(s)+1) {
								t.Errorf("line %d taken twice", n)
							}
							taken[s].Add(1)
						}
						if pause > 0 && n%pause == 0 {
							runtimeYield()
						}
					}
					again, err := f.PassDone(context.Background(), s, gen)
					if err != nil {
						t.Error(err)
						return
					}
					if !again {
						return
					}
				}
			}
			var wg sync.WaitGroup
			ps, pb := 1+rng.IntN(50), 1+rng.IntN(50)
			wg.Go(func() { feeder(route.SideSync, ps) })
			wg.Go(func() { feeder(route.SideBatch, pb) })
			routes := []route.Routing{{Route: route.Sync}, {Route: route.Batch}, {Route: route.Split, BatchShare: 0.2}, {Route: route.Split, BatchShare: 0.9}}
			changes := 1 + rng.IntN(6)
			for range changes {
				for range rng.IntN(200) {
					runtimeYield()
				}
				if _, err := f.Reroute(routes[rng.IntN(len(routes))], nil); err != nil {
					break // frozen: the feeders are done
				}
			}
			wg.Wait()
			for n := 1; n <= lines; n++ {
				if owner[n].Load() == 0 {
					t.Fatalf("line %d never taken (sync took %d, batch %d)", n, taken[0].Load(), taken[1].Load())
				}
			}
			if !f.Frozen() {
				t.Error("the feeders ended but the routing is not frozen")
			}
			if _, err := f.Reroute(route.Routing{Route: route.Sync}, nil); err == nil {
				t.Error("a Reroute after the feeders ended was accepted")
			}
		})
	}
}

// TestNoReplanOnePass: a run that does not re-plan (Lines 0) ends each
// feeder after one pass and refuses a Reroute.
func TestNoReplanOnePass(t *testing.T) {
	f, err := route.Open(route.Config{Routing: route.Routing{Route: route.Sync}, Journal: filepath.Join(t.TempDir(), "j")})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.PassDone(context.Background(), route.SideSync, f.Generation()); again || err != nil {
		t.Fatalf("PassDone = %v, %v; want one pass", again, err)
	}
	if _, err := f.Reroute(route.Routing{Route: route.Batch}, nil); err == nil {
		t.Fatal("Reroute accepted on a run that does not re-plan")
	}
	first, second := f.Take(route.SideSync, 1, "a"), f.Take(route.SideSync, 1, "a")
	if !first || !second || f.Take(route.SideBatch, 1, "a") {
		t.Fatal("without re-planning a line is the routing's side's every time (no bitset: one pass each)")
	}
}

func runtimeYield() { runtime.Gosched() }
