package dispatch_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
	"github.com/sluice-dev/sluice/keys"
)

// goid is the running goroutine's id, from its stack header.
func goid() int {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	n, _ := strconv.Atoi(string(f[1]))
	return n
}

// TestAttemptsReuseTheirGoroutines: attempts run on goroutines the
// dispatcher reuses — one after another on one, never more than were in
// flight at once — and a goroutine idle for longer than the workers' idle
// limit (5 s) is retired, not reused; every one ends with Serve (the
// bubble would not end otherwise).
func TestAttemptsReuseTheirGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _, _ := pipeDispatcher(t, gate(nil, nil, "none"), dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 3},
			Lane: lane.Config{Start: 3}}, map[string]string{"high_prio": "org-a"})
		var mu sync.Mutex
		var ran []int
		var hold chan struct{} // non-nil: attempts wait on it
		send := func(ctx context.Context, key *keys.Key) client.Outcome {
			mu.Lock()
			ran = append(ran, goid())
			h := hold
			mu.Unlock()
			if h != nil {
				<-h
			}
			return client.Outcome{Class: client.OK, Status: 200, ShouldRetry: -1,
				Body: []byte(`{"type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)}
		}
		one := func(q *dispatch.Request) {
			res := make(chan dispatch.Result, 1)
			if err := d.SubmitSend(t.Context(), q, send, func(r dispatch.Result) { res <- r }); err != nil {
				t.Fatal(err)
			}
			if r := <-res; r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		distinct := func(ids []int) map[int]bool {
			m := map[int]bool{}
			for _, id := range ids {
				m[id] = true
			}
			return m
		}
		reqs := requests(20, "claude-sonnet-4-5")
		for _, q := range reqs[:5] {
			one(q)
			time.Sleep(time.Second) // idle, but not for long
		}
		if n := len(distinct(ran)); n != 1 {
			t.Fatalf("5 attempts one after another ran on %d goroutines, want 1: %v", n, ran)
		}
		first := ran[0]

		// Three at once: three goroutines, the idle one among them.
		mu.Lock()
		hold, ran = make(chan struct{}), nil
		mu.Unlock()
		res := make(chan dispatch.Result, 3)
		for _, q := range reqs[5:8] {
			if err := d.SubmitSend(t.Context(), q, send, func(r dispatch.Result) { res <- r }); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		close(hold)
		for range 3 {
			<-res
		}
		mu.Lock()
		hold, three := nil, distinct(ran)
		ran = nil
		mu.Unlock()
		if len(three) != 3 || !three[first] {
			t.Fatalf("3 attempts at once ran on %v, want 3 goroutines including the idle %d", three, first)
		}
		for _, q := range reqs[8:14] {
			one(q)
		}
		if again := distinct(ran); len(again) != 1 || !three[ran[0]] {
			t.Fatalf("attempts after the peak ran on %v, want one of %v", again, three)
		}

		// Idle past the limit: retired when the loop next wakes.
		mu.Lock()
		ran = nil
		mu.Unlock()
		time.Sleep(6 * time.Second)
		one(reqs[14])
		if three[ran[0]] {
			t.Fatalf("after 6 s idle the attempt ran on goroutine %d, one that should have been retired (%v)", ran[0], three)
		}
	})
}

// TestLongAttemptWorkerIsReused: a worker's idle time starts when its
// attempt ends, not when the loop last woke — an attempt that ran longer
// than the idle limit leaves a worker the next attempt reuses.
func TestLongAttemptWorkerIsReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _, _ := pipeDispatcher(t, gate(nil, nil, "none"), dispatch.Config{Caps: map[api.Family]int{api.FamilySonnet: 3},
			Lane: lane.Config{Start: 3}}, map[string]string{"high_prio": "org-a"})
		var ran []int
		slow := true
		send := func(ctx context.Context, key *keys.Key) client.Outcome {
			ran = append(ran, goid())
			if slow {
				time.Sleep(6 * time.Second) // longer than the idle limit
			}
			return client.Outcome{Class: client.OK, Status: 200, ShouldRetry: -1,
				Body: []byte(`{"type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)}
		}
		for _, q := range requests(2, "claude-sonnet-4-5") {
			res := make(chan dispatch.Result, 1)
			if err := d.SubmitSend(t.Context(), q, send, func(r dispatch.Result) { res <- r }); err != nil {
				t.Fatal(err)
			}
			if r := <-res; r.Err != nil {
				t.Fatal(r.Err)
			}
			slow = false
		}
		if ran[0] != ran[1] {
			t.Fatalf("the attempt after a 6 s one ran on goroutine %d, not on the slow one's %d", ran[1], ran[0])
		}
	})
}
