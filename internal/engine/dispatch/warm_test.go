package dispatch_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/sim"
)

// prefixed returns n requests of group that share the system prompt rubric
// with a breakpoint at its end (as cacheprefix injects it), marked with
// prefix (0: not marked, so the dispatcher does not warm it).
func prefixed(n int, prefix uint64, group, rubric string) []*dispatch.Request {
	out := make([]*dispatch.Request, n)
	for i := range out {
		p, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64,
			"system":   []map[string]any{{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral"}}},
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Answer number %d.", i)}}})
		out[i] = &dispatch.Request{ID: fmt.Sprintf("%s-%d", group, i), Params: p, Model: "claude-sonnet-4-5", MaxTokens: 64,
			EstInput: int64(len(p) / 4), CachePrefix: prefix}
	}
	return out
}

// TestPrefixWarmedOncePerOrg: a job of two groups, each sharing its own
// prefix, writes each prefix once per organization — its first request
// there, then the rest read it. Without warming the first group is still
// written once (each lane's header probe goes alone), but the second
// group's requests reach lanes already open wide: all those sent before
// the first of them answers miss (the entry is visible only once its
// writer's answer begins) and pay the write.
func TestPrefixWarmedOncePerOrg(t *testing.T) {
	a := strings.Repeat("Judge whether the answer is right. ", 290) // ≈ 2,500 tokens
	b := strings.Repeat("Rate how helpful the answer is. ", 320)
	writes := func(mark bool) (perOrg map[string]int64, reads int64) {
		w := loopbackWorld(t, func(c *sim.Config) { c.TimeScale = 20 }) // a 25 ms window before an entry is visible: wide enough for a burst even under -race
		d := w.dispatcher(t, dispatch.Config{})
		pa, pb := uint64(0), uint64(0)
		if mark {
			pa, pb = 1, 2
		}
		reqs := append(prefixed(400, pa, "a", a), prefixed(400, pb, "b", b)...)
		got := runAll(t, d, reqs, nil)
		checkAnswers(t, reqs, got)
		perOrg = map[string]int64{}
		for _, r := range got {
			if r.Usage.CacheCreationInputTokens > 0 {
				perOrg[r.Org+" "+r.Request.ID[:1]]++
			}
			reads += r.Usage.CacheReadInputTokens
		}
		return perOrg, reads
	}
	warmed, reads := writes(true)
	if len(warmed) < 2 {
		t.Fatalf("writes by org and group %v: want both groups written", warmed)
	}
	for k, n := range warmed {
		if n != 1 {
			t.Errorf("warmed: %s wrote its prefix %d times, want once", k, n)
		}
	}
	if reads == 0 {
		t.Error("warmed: no request read a prefix")
	}
	cold, _ := writes(false)
	most := int64(0)
	for _, n := range cold {
		most = max(most, n)
	}
	t.Logf("writes with warming %v, without %v", warmed, cold)
	if most < 2 {
		t.Errorf("without warming an org wrote a group's prefix at most %d times (%v): the test no longer shows what warming saves", most, cold)
	}
}

// TestHeldPrefixDoesNotHoldTheQueue: while a prefix is being written on
// the only lane, its other requests are set aside and the requests behind
// them go at once, instead of waiting at the head of the queue for the
// writer's answer. (Fake time: every answer takes the same latency L.)
func TestHeldPrefixDoesNotHoldTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, func(c *sim.Config) {
			for k, l := range c.Latency {
				l.Sigma = 0
				c.Latency[k] = l
			}
		})
		d := oneOrgServing(t, w)
		defer d.Close()
		// submit returns when the request was first sent: its answer's
		// time less its latency (first send to answer).
		submit := func(r *dispatch.Request) <-chan time.Time {
			done := make(chan time.Time, 1)
			if err := d.Submit(t.Context(), r, func(res dispatch.Result) {
				if res.Class != "ok" {
					t.Errorf("%s: %s %v", r.ID, res.Class, res.Err)
				}
				done <- time.Now().Add(-res.Latency)
			}); err != nil {
				t.Fatal(err)
			}
			return done
		}
		// Open the lane first (its header probe goes alone).
		<-submit(requests(1, "claude-sonnet-4-5")[0])
		a := prefixed(2, 7, "a", strings.Repeat("Judge whether the answer is right. ", 290))
		other := requests(2, "claude-sonnet-4-5")[1]
		start := time.Now()
		a1, a2, n1 := submit(a[0]), submit(a[1]), submit(other)
		sA1, sN1, sA2 := <-a1, <-n1, <-a2
		if sA1.Sub(start) > 0 || sN1.Sub(start) > 0 {
			t.Errorf("the writer was sent %v in, the request behind the held one %v in: want both at once", sA1.Sub(start), sN1.Sub(start))
		}
		if !sA2.After(start) {
			t.Errorf("the held request was sent at once, not after its prefix's writer answered")
		}
	})
}

// TestParkedRequestsCanBeReclaimed: requests parked behind their prefix's
// writer are queued and never attempted, so a re-plan can take them back
// like any other queued request.
func TestParkedRequestsCanBeReclaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := pipeWorld(t, nil)
		d := oneOrgServing(t, w)
		defer d.Close()
		results := make(chan dispatch.Result, 64)
		cb := func(res dispatch.Result) { results <- res }
		if err := d.Submit(t.Context(), requests(1, "claude-sonnet-4-5")[0], cb); err != nil { // opens the lane
			t.Fatal(err)
		}
		<-results
		for _, r := range prefixed(20, 9, "p", strings.Repeat("Judge whether the answer is right. ", 290)) {
			if err := d.Submit(t.Context(), r, cb); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // the writer is out, the other 19 parked
		if n, err := d.Reclaimable(t.Context()); err != nil || n != 19 {
			t.Fatalf("reclaimable %d (%v), want the 19 parked behind the writer", n, err)
		}
		got, err := d.Reclaim(t.Context(), func(*dispatch.Request) bool { return true })
		if err != nil || len(got) != 19 {
			t.Fatalf("reclaimed %d (%v), want 19", len(got), err)
		}
		if res := <-results; res.Class != "ok" || res.Request.ID != "p-0" {
			t.Errorf("the writer: %s %s", res.Request.ID, res.Class)
		}
	})
}

// oneOrgServing is a dispatcher serving w's first organization only (so
// every request of a prefix meets the same lane), its loop running.
func oneOrgServing(t *testing.T, w *world) *dispatch.Dispatcher {
	t.Helper()
	ks := w.pool.Keys()[:1]
	if _, err := dispatch.Discover(t.Context(), w.client, ks, "claude-sonnet-4-5"); err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Config{Client: w.client, Keys: ks})
	if err != nil {
		t.Fatal(err)
	}
	go d.Serve(t.Context())
	return d
}
