package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// waitedOf returns each lane's Waited by org label.
func waitedOf(d *dispatch.Dispatcher) map[string][lane.NumWaits]time.Duration {
	_, views := d.Snapshot()
	out := map[string][lane.NumWaits]time.Duration{}
	for _, v := range views {
		out[v.Org] = v.State.Stats.Waited
	}
	return out
}

// gate answers each request once its key's channel is closed: ok for
// high_prio's key, 401 for batch's.
func gate(a, b <-chan struct{}, keyB string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-api-key") == keyB {
			<-b
			w.WriteHeader(401)
			w.Write(api.NewErrorBody(api.ErrAuthentication, "req_b", "invalid x-api-key").Marshal())
			return
		}
		<-a
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
	})
}

// TestWaitedStopsWhenNothingWaits: a lane's waiting period ends when the
// last queued request leaves (withdrawn here), not when the next request
// comes — the report's binding limit must not count idle time.
func TestWaitedStopsWhenNothingWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		d, _, _ := pipeDispatcher(t, gate(release, nil, "none"), dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 1},
			Lane: lane.Config{Start: 1}}, map[string]string{"high_prio": "org-a"})
		reqs := requests(2, "claude-sonnet-4-5")
		results := make(chan dispatch.Result, 2)
		cb := func(r dispatch.Result) { results <- r }
		if err := d.SubmitSend(t.Context(), reqs[0], nil, cb); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // reqs[0] holds the only slot
		ctx, cancel := context.WithCancel(t.Context())
		if err := d.SubmitSend(ctx, reqs[1], nil, cb); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // reqs[1] waits on the cap
		time.Sleep(10 * time.Second)
		cancel() // the queue is empty from here on
		synctest.Wait()
		time.Sleep(20 * time.Second)
		if got := waitedOf(d)["high_prio"][lane.WaitCap]; got != 10*time.Second {
			t.Errorf("waited on the cap %v, want 10 s (the withdrawal ends the wait)", got)
		}
		close(release)
		for range 2 {
			<-results
		}
	})
}

// TestWaitedStopsWhenALaneDies: a lane whose key died holds nothing back
// from then on, though the pool's queue stays full on the other lanes.
func TestWaitedStopsWhenALaneDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releaseA, releaseB := make(chan struct{}), make(chan struct{})
		orgs := map[string]string{"high_prio": "org-a", "batch": "org-b"}
		// pipeDispatcher's key for batch (the second of its three).
		d, _, _ := pipeDispatcher(t, gate(releaseA, releaseB, "sk-ant-test-fake-key-0000000002"),
			dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 1}, Lane: lane.Config{Start: 1}}, orgs)
		reqs := requests(3, "claude-sonnet-4-5")
		results := make(chan dispatch.Result, 3)
		for _, q := range reqs {
			if err := d.SubmitSend(t.Context(), q, nil, func(r dispatch.Result) { results <- r }); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		// Each lane holds one request; the third waits on both caps.
		time.Sleep(5 * time.Second)
		close(releaseB) // org-b's key dies; its request joins the queue
		synctest.Wait()
		time.Sleep(15 * time.Second)
		w := waitedOf(d)
		if got := w["batch"][lane.WaitCap]; got != 5*time.Second {
			t.Errorf("the dead lane waited %v on its cap, want 5 s (until it died)", got)
		}
		if got := w["high_prio"][lane.WaitCap]; got != 20*time.Second {
			t.Errorf("the live lane waited %v on its cap, want 20 s", got)
		}
		close(releaseA)
		for range 3 {
			<-results
		}
	})
}

// TestWaitedStopsWhenTheRunStops: once the dispatcher stops admitting,
// the drain of the requests in flight is nobody's wait.
func TestWaitedStopsWhenTheRunStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		serve, stop := context.WithCancel(context.Background())
		d, _, _ := pipeDispatcherCtx(t, serve, gate(release, nil, "none"), dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 1},
			Lane: lane.Config{Start: 1}}, map[string]string{"high_prio": "org-a"})
		reqs := requests(2, "claude-sonnet-4-5")
		results := make(chan dispatch.Result, 2)
		for _, q := range reqs {
			if err := d.SubmitSend(t.Context(), q, nil, func(r dispatch.Result) { results <- r }); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // reqs[0] takes the slot, reqs[1] waits on the cap
		}
		time.Sleep(10 * time.Second)
		stop() // an interrupt: reqs[0] may finish, reqs[1] never goes
		synctest.Wait()
		time.Sleep(20 * time.Second)
		if got := waitedOf(d)["high_prio"][lane.WaitCap]; got != 10*time.Second {
			t.Errorf("waited on the cap %v, want 10 s (the stop ends the wait)", got)
		}
		close(release)
		for range 2 {
			<-results
		}
	})
}
