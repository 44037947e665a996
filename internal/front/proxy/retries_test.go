package proxy_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/sim"
)

// TestPersistentOverloadIsBoundedPerCall: with every upstream call a 529,
// five caller requests make at most five × MaxAttempts upstream attempts,
// and each caller gets a 529 back with a retry-after: the API's, or —
// for a caller the breaker's spaced probes never reached within MaxWait —
// sluice's own (TestUnsentCallerOfAnOverloadedAPIGets529).
func TestPersistentOverloadIsBoundedPerCall(t *testing.T) {
	e := newEnv(t, options{world: func(c *sim.Config) { c.Faults.P529 = 1 }, keysEnv: onlyHighPrio,
		proxy: func(c *proxy.Config) { c.MaxWait = 20 * time.Second }})
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("call %d", i)))
			ra, err := strconv.Atoi(resp.Header.Get(api.HeaderRetryAfter))
			if resp.StatusCode != 529 || errorOf(t, b).Err.Type != api.ErrOverloaded || err != nil || ra < 1 {
				t.Errorf("call %d: %d %s retry-after %q, want a 529 with retry-after", i, resp.StatusCode, b, resp.Header.Get(api.HeaderRetryAfter))
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	var attempts int64
	for _, o := range e.sim.Stats().Orgs {
		attempts += o.Pools[api.PoolSonnet4].Overloaded
	}
	if attempts > 5*proxy.DefaultMaxAttempts || attempts < 5 {
		t.Errorf("5 caller requests made %d upstream attempts, want at most %d", attempts, 5*proxy.DefaultMaxAttempts)
	}
}

// TestUnsentCallerOfAnOverloadedAPIGets529: with every upstream call a
// 529 and one slot, callers queued behind the lane's open breaker wait
// out MaxWait without an attempt of their own. Each still hears the
// API's condition — a 529 overloaded_error with a retry-after — not a
// 429 that would tell its SDK the rate limits were at fault.
func TestUnsentCallerOfAnOverloadedAPIGets529(t *testing.T) {
	e := newEnv(t, options{world: func(c *sim.Config) { c.Faults.P529 = 1 }, keysEnv: onlyHighPrio, dispatch: oneSlot,
		proxy: func(c *proxy.Config) { c.MaxWait = 3 * time.Second }})
	const n = 12
	var wg sync.WaitGroup
	var own atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := e.do("POST", "/v1/messages", message(fmt.Sprintf("unsent %d", i)))
			ra, err := strconv.Atoi(resp.Header.Get(api.HeaderRetryAfter))
			eb := errorOf(t, b)
			if resp.StatusCode != api.StatusOverloaded || eb.Err.Type != api.ErrOverloaded || err != nil || ra < 1 {
				t.Errorf("caller %d: %d %s retry-after %q, want a 529 overloaded_error with retry-after", i, resp.StatusCode, b, resp.Header.Get(api.HeaderRetryAfter))
			}
			if strings.HasPrefix(eb.Err.Message, "sluice:") {
				own.Add(1)
			}
		}()
	}
	wg.Wait()
	if own.Load() == 0 {
		t.Errorf("every caller got an attempt of its own; the test did not reach the case it is for")
	}
}

// TestRateLimitedAfter529sIsNot529: after a short burst of 529s (fewer
// than open the breaker), the upstream answers only 429s with a long
// retry-after, so the lane is paused by its rate limits. A caller that
// waits out MaxWait unsent hears sluice's 429 (no capacity), not a 529
// that blames the API's load: the lane's 529 share decays only on clean
// answers, and must not speak for a lane whose last answers were 429s.
func TestRateLimitedAfter529sIsNot529(t *testing.T) {
	var n atomic.Int32
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderRequestID, "req_x")
		w.Header().Set(api.HeaderOrganizationID, "org-fake")
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/v1/messages") {
			fmt.Fprint(w, `{"input_tokens":5}`)
			return
		}
		switch i := n.Add(1); {
		case i == 1: // the header probe
			fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
		case i <= 7:
			w.WriteHeader(api.StatusOverloaded)
			fmt.Fprint(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
		default:
			w.Header().Set(api.HeaderRetryAfter, "60")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`)
		}
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio, dispatch: oneSlot,
		proxy: func(c *proxy.Config) { c.MaxWait = 1500 * time.Millisecond }})
	for i := range 4 {
		e.do("POST", "/v1/messages", message(fmt.Sprintf("warm %d", i)))
	}
	before := n.Load()
	resp, b := e.do("POST", "/v1/messages", message("unsent"))
	if n.Load() != before {
		t.Fatalf("the caller was sent (%d upstream calls): the lane was not paused, the test did not reach its case", n.Load()-before)
	}
	if resp.StatusCode != 429 || errorOf(t, b).Err.Type != api.ErrRateLimit {
		t.Errorf("a caller held back by a 429 pause got %d %s, want sluice's 429 rate_limit_error", resp.StatusCode, b)
	}
}

// TestOwnRetryAfterSaysWhenCapacityIsExpected: callers queued behind one
// slot answering ten a second, who give up after 350 ms, are told to come
// back when the queue ahead of them will have drained — not in 1 s. In a
// synctest bubble on in-memory connections: the upstream's pace and the
// callers' patience are fake time.
func TestOwnRetryAfterSaysWhenCapacityIsExpected(t *testing.T) {
	synctest.Test(t, testOwnRetryAfterSaysWhenCapacityIsExpected)
}

func testOwnRetryAfterSaysWhenCapacityIsExpected(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Header().Set(api.HeaderRequestID, "req_slow")
		w.Header().Set(api.HeaderOrganizationID, "org-fake")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio, dispatch: oneSlot, pipe: true,
		proxy: func(c *proxy.Config) { c.MaxWait = 350 * time.Millisecond }})
	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var afters []int
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := e.do("POST", "/v1/messages", message(fmt.Sprintf("queued %d", i)))
			if resp.StatusCode == 429 {
				ra, _ := strconv.Atoi(resp.Header.Get(api.HeaderRetryAfter))
				mu.Lock()
				afters = append(afters, ra)
				mu.Unlock()
			}
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if len(afters) < n/2 {
		t.Fatalf("%d of %d callers got a 429, want most (one slot, 10 a second, 350 ms of patience)", len(afters), n)
	}
	// About 36 were waiting at 10 a second when the first gave up: 3–4 s.
	long := 0
	for _, ra := range afters {
		if ra >= 2 {
			long++
		}
	}
	if long < len(afters)/2 {
		t.Errorf("retry-after values %v: most callers, queued seconds deep, must be told to wait more than 1 s", afters)
	}
}

// TestRetryAfterBoundIsTheDispatchers: an upstream asking for two hours
// is passed on to the caller capped at the dispatcher's --max-retry-after,
// the one bound the lanes also use, not a constant of the proxy's own.
func TestRetryAfterBoundIsTheDispatchers(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderRequestID, "req_limited")
		w.Header().Set(api.HeaderOrganizationID, "org-fake")
		w.Header().Set(api.HeaderRetryAfter, "7200")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}`)
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio,
		dispatch: func(c *dispatch.Config) { c.MaxRetryAfter = 3 * time.Second },
		proxy:    func(c *proxy.Config) { c.MaxWait = 500 * time.Millisecond }})
	resp, b := e.do("POST", "/v1/messages", message("limited"))
	if resp.StatusCode != 429 {
		t.Fatalf("status %d %s, want the API's 429", resp.StatusCode, b)
	}
	if ra := resp.Header.Get(api.HeaderRetryAfter); ra != "3" {
		t.Errorf("retry-after %q, want 3 (the dispatcher's cap on the upstream's 7200)", ra)
	}
}
