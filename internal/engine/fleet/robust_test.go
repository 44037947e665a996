package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// Tests of the fleet's behaviour when calls fail, replies are lost, Redis
// restarts, and of the fair share's rounding. All run on miniredis in fake
// time (Redis's clock is the world's).

// memberVia joins the world's fleet through a fault proxy.
func (w *world) memberVia(p *faultProxy, cfg Config) *Fleet {
	cfg.URL = p.url()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return w.now }
	}
	return join(w.t, cfg)
}

func sonnet(c int) map[api.Family]int { return map[api.Family]int{api.FamilySonnet: c} }

// heldInRedis is what Redis counts for member m on the lane.
func heldInRedis(w *world, lane string, m *Fleet) string {
	return w.mr.HGet(laneKeys(lane)[kHeld], m.ID())
}

func TestHotPathFailureRefusesAndFallbackKeepsRedisCount(t *testing.T) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(8)})
	b := w.member(8, nil)
	lane := laneName("org-1", api.PoolSonnet4)
	la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	if n := takeN(lb, w.now, 7); n != 7 {
		t.Fatalf("b alone took %d, want 7 (its limit)", n)
	}
	if _, r, _ := la.TryTake(w.now, 8, 0, unit); r != budget.Granted {
		t.Fatalf("a below its share: %v", r)
	}
	// The fleet holds the cap: a 1, b 7. One of a's calls fails (Redis ran
	// it, the reply was lost).
	p.dropNextReply()
	if _, r, wait := la.TryTake(w.now, 8, 0, unit); r != budget.ByConcurrency || wait <= 0 {
		t.Fatalf("a's take whose call failed: %v wait %v; want a refusal (a local grant would put 9 permits out on a cap of 8)", r, wait)
	}
	if a.Degraded() {
		t.Fatal("degraded by one failed call")
	}
	// Until the probe answers, a makes no Redis call and grants nothing.
	if _, r, _ := la.TryTake(w.now, 8, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("a while suspecting Redis: %v", r)
	}
	a.tick(t.Context()) // the probe succeeds
	if a.Degraded() || a.suspected.Load() {
		t.Fatalf("after a successful probe: degraded %v, suspected %v", a.Degraded(), a.suspected.Load())
	}
	w.advance(60 * time.Millisecond)
	if _, r, _ := la.TryTake(w.now, 8, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("a with the cap held: %v", r)
	}

	// Now a loses Redis for good: a failed call, then a failed probe.
	p.setDown(true)
	if _, r, _ := la.TryTake(w.now, 8, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("a's first call into the outage: %v", r)
	}
	a.tick(t.Context())
	if !a.Degraded() {
		t.Fatal("not degraded after the probe failed")
	}
	// b, still connected, sees a's 1 permit until a's lease runs out, and
	// fills the rest; a holds no more than that 1 meanwhile.
	if n := takeN(la, w.now, 8); n != 0 {
		t.Fatalf("a in the fallback within its lease took %d, want 0 (Redis counts 1 for it, b holds 7)", n)
	}
	if got := heldInRedis(w, lane, a); got != "1" {
		t.Fatalf("Redis counts %q for a, want 1", got)
	}
	for range 11 { // a probes every second, in vain; the probes renew nothing
		w.advance(time.Second)
		a.tick(t.Context())
	}
	// a's lease is over: b may take a's share (the partition case of
	// docs/fleet.md), a runs at cap ÷ 2 members.
	if n := takeN(la, w.now, 8); n != 3 {
		t.Fatalf("a in the fallback after its lease took %d more, want 3 (cap 8 ÷ 2 − 1 held)", n)
	}
}

// TestFairShareRounding: jobs wait for permits as they free up; nobody
// stays at 0 (or below ⌊cap ÷ jobs⌋) while the others hold more.
func TestFairShareRounding(t *testing.T) {
	for _, tc := range []struct{ cap, jobs int }{{4, 3}, {40, 3}, {40, 7}, {10, 4}} {
		t.Run(fmt.Sprintf("cap %d, %d jobs", tc.cap, tc.jobs), func(t *testing.T) {
			w := newWorld(t)
			var ls []budget.Budget
			held := make([]int, tc.jobs)
			for range tc.jobs {
				ls = append(ls, w.member(tc.cap, nil).NewBudget("org-1", api.PoolSonnet4))
			}
			take := func(i int) {
				held[i] += takeN(ls[i], w.now, tc.cap)
			}
			take(0) // alone: the whole cap
			if held[0] != tc.cap {
				t.Fatalf("a lone job took %d of %d", held[0], tc.cap)
			}
			for i := 1; i < tc.jobs; i++ {
				take(i) // refused, but now active
			}
			for range 3 * tc.cap {
				// The job holding the most finishes a request; then every
				// job, the first always first, takes what it may.
				most := 0
				for i := range held {
					if held[i] > held[most] {
						most = i
					}
				}
				ls[most].Settle(w.now, budget.Grant{Taken: unit}, unit)
				held[most]--
				w.advance(60 * time.Millisecond) // past the poll
				for i := range ls {
					take(i)
				}
			}
			total, lo := 0, tc.cap
			for _, h := range held {
				total += h
				lo = min(lo, h)
			}
			if fair := tc.cap / tc.jobs; lo < fair {
				t.Fatalf("held %v: a job has %d, below ⌊%d ÷ %d⌋ = %d while others hold more", held, lo, tc.cap, tc.jobs, fair)
			}
			if total < tc.cap-1 {
				t.Fatalf("held %v: %d of the cap %d in use", held, total, tc.cap)
			}
		})
	}
}

func TestFairShareIsPerJob(t *testing.T) {
	w := newWorld(t)
	cfg := func(job string) Config {
		return Config{URL: w.url(), Caps: sonnet(12), Job: job, Now: func() time.Time { return w.now }}
	}
	a1, a2, b := join(t, cfg("eval-42")), join(t, cfg("eval-42")), join(t, cfg(""))
	l1, l2, lb := a1.NewBudget("org-1", api.PoolSonnet4), a2.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	if _, r, _ := lb.TryTake(w.now, 12, 0, unit); r != budget.Granted {
		t.Fatalf("b: %v", r)
	}
	n1 := takeN(l1, w.now, 12)
	n2 := takeN(l2, w.now, 12)
	nb := takeN(lb, w.now, 12)
	// Two jobs: eval-42 (two processes) and b's. Each gets 6.
	if n1+n2 != 6 || 1+nb != 6 {
		t.Fatalf("job eval-42 took %d+%d, job b %d; want 6 and 6 (the share is per job, not per process)", n1, n2, 1+nb)
	}
	rep, err := ReadStatus(t.Context(), w.url())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Lanes) != 1 || len(rep.Lanes[0].ActiveJobs) != 2 || !slices.Contains(rep.Lanes[0].ActiveJobs, "eval-42") {
		t.Fatalf("status: %+v, want 2 active jobs, eval-42 one of them", rep.Lanes)
	}
	var out strings.Builder
	rep.Print(&out)
	if !strings.Contains(out.String(), "eval-42") {
		t.Fatalf("status does not name the job:\n%s", out.String())
	}
}

func TestLostReplyAppliesOnce(t *testing.T) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(10)})
	lane := laneName("org-1", api.PoolSonnet4)
	la := a.NewBudget("org-1", api.PoolSonnet4)
	otpm := func(rem float64) budget.View {
		return budget.View{budget.OutputTokens: {Known: true, Limit: 10000, Depth: 10000, Remaining: rem}}
	}
	level := func() float64 {
		rep, err := ReadStatus(t.Context(), w.url())
		if err != nil {
			t.Fatal(err)
		}
		return rep.Lanes[0].Buckets[budget.OutputTokens].Level
	}
	la.Observe(w.now, otpm(5000), budget.Grant{})
	taken, r, _ := la.TryTake(w.now, 10, 0, budget.Demand{1, 0, 4000})
	if r != budget.Granted || level() != 1000 {
		t.Fatalf("take: %v, level %v", r, level())
	}
	la.Settle(w.now, taken, budget.Demand{1, 0, 1000}) // a refund of 3000 to send
	p.dropNextReply()
	la.Observe(w.now, otpm(10000), budget.Grant{}) // Redis applies the refund; the reply is lost
	if got := level(); got != 4000 {
		t.Fatalf("level %v after the call whose reply was lost, want 4000", got)
	}
	a.tick(t.Context()) // the heartbeat carries the refunds again
	a.tick(t.Context())
	if got := level(); got != 4000 {
		t.Fatalf("level %v after the heartbeats, want 4000: the refund of 3000 was applied twice", got)
	}

	// A take whose reply is lost: Redis granted, a does not know it. Redis
	// over-counts a until its next call, never under-counts.
	w.advance(60 * time.Millisecond)
	p.dropNextReply()
	if _, r, _ := la.TryTake(w.now, 10, 0, budget.Demand{1, 0, 100}); r == budget.Granted {
		t.Fatal("a take whose reply was lost reported granted")
	}
	if got := heldInRedis(w, lane, a); got != "1" {
		t.Fatalf("Redis counts %q for a after the lost grant, want 1", got)
	}
	a.tick(t.Context())
	if got := heldInRedis(w, lane, a); got != "" {
		t.Fatalf("Redis counts %q for a after its heartbeat, want none", got)
	}
}

func TestRefundsNotCrossedInFallbackAndProbation(t *testing.T) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(10)})
	la := a.NewBudget("org-1", api.PoolSonnet4)
	lb := la.(*laneBudget)
	la.Observe(w.now, budget.View{budget.OutputTokens: {Known: true, Limit: 6000, Depth: 6000, Remaining: 3000}}, budget.Grant{})
	d := budget.Demand{1, 0, 500}
	var tk [4]budget.Grant
	for i := range tk {
		var r budget.Refusal
		if tk[i], r, _ = la.TryTake(w.now, 10, 0, d); r != budget.Granted {
			t.Fatalf("take %d: %v", i, r)
		}
	}
	level := func() float64 {
		rep, err := ReadStatus(t.Context(), w.url())
		if err != nil {
			t.Fatal(err)
		}
		return rep.Lanes[0].Buckets[budget.OutputTokens].Level
	}
	if got := level(); got != 1000 {
		t.Fatalf("Redis level %v after 4 × 500, want 1000", got)
	}
	p.setDown(true)
	la.TryTake(w.now, 10, 0, d)
	a.tick(t.Context())
	if !a.Degraded() {
		t.Fatal("not degraded")
	}
	localLevel := func() float64 { return lb.local.Snapshot(w.now).Buckets[budget.OutputTokens].Level }
	if got := localLevel(); got != 3000 {
		t.Fatalf("local level %v, want the 3000 of the headers", got)
	}
	// A refund of a permit Redis granted: not into the local buckets.
	la.Settle(w.now, tk[0], budget.Demand{1, 0, 100})
	if got, inUse := localLevel(), lb.local.Snapshot(w.now).InUse; got != 3000 || inUse != 0 {
		t.Fatalf("after a refund in the fallback: local level %v (want 3000), local permits %d (want 0)", got, inUse)
	}
	// A charge (usage above the estimate) is applied.
	la.Settle(w.now, tk[1], budget.Demand{1, 0, 800})
	if got, inUse := localLevel(), lb.local.Snapshot(w.now).InUse; got != 2700 || inUse != 0 {
		t.Fatalf("after a charge of 300 in the fallback: local level %v (want 2700), local permits %d", got, inUse)
	}
	// Redis is back: probation. A refund is not sent, a charge is.
	p.setDown(false)
	a.tick(t.Context())
	if a.Degraded() || !a.restricted() {
		t.Fatalf("after recovery: degraded %v, probation %v", a.Degraded(), a.restricted())
	}
	la.Settle(w.now, tk[2], budget.Demand{1, 0, 100})
	la.Settle(w.now, tk[3], budget.Demand{1, 0, 700})
	a.tick(t.Context())
	if got := level(); got != 800 {
		t.Fatalf("Redis level %v after a refund of 400 and a charge of 200 in probation, want 800 (the charge only)", got)
	}
}

func TestRedisRestartNoticedWithoutFailedCall(t *testing.T) {
	w := newWorld(t)
	log, logs := logBuffer()
	a := join(t, Config{URL: w.url(), Caps: sonnet(90), Now: func() time.Time { return w.now }, Logger: log})
	w.member(90, nil)
	w.member(90, nil)
	a.tick(t.Context())
	la := a.NewBudget("org-1", api.PoolSonnet4)
	// The headers: 45 requests left of 600 RPM; the fallback's buckets
	// hold a third: 15 of 200.
	la.Observe(w.now, budget.View{budget.Requests: {Known: true, Limit: 600, Depth: 600, Remaining: 45}}, budget.Grant{})
	if n := takeN(la, w.now, 10); n != 10 || a.Members() != 3 {
		t.Fatalf("took %d (want 10) with %d members (want 3)", n, a.Members())
	}
	// Redis restarts empty between two calls: no call fails.
	w.mr.FlushAll()
	w.advance(60 * time.Millisecond)
	if _, r, _ := la.TryTake(w.now, 90, 0, unit); r == budget.Granted {
		t.Fatal("granted on a Redis that had just lost every permit of the fleet")
	}
	if !a.restricted() || a.assumed() != 3 {
		t.Fatalf("after the restart: probation %v, members assumed %d; want probation with the 3 last known", a.restricted(), a.assumed())
	}
	if !strings.Contains(logs.String(), "Redis had lost this member") {
		t.Fatalf("the restart is not logged:\n%s", logs.String())
	}
	// Probation: at most the scaled cap (90 ÷ 3 = 30, 10 held), and the
	// scaled local buckets bind first (15 requests left).
	w.advance(60 * time.Millisecond)
	n := takeN(la, w.now, 90)
	if n != 15 {
		t.Fatalf("took %d in probation, want 15 (the local RPM bucket's third)", n)
	}
	if _, r, _ := la.TryTake(w.now, 90, 0, unit); r != budget.ByRequests {
		t.Fatalf("then: %v, want ByRequests from the local bucket", r)
	}
	w.advance(5 * time.Second) // the local bucket refills (by 16); the scaled cap binds
	if n := takeN(la, w.now, 90); n != 5 {
		t.Fatalf("took %d more, want 5 (scaled cap 30 − 25 held)", n)
	}
	// After the probation, the shared cap.
	w.advance(10 * time.Second)
	a.tick(t.Context())
	if _, r, _ := la.TryTake(w.now, 90, 0, unit); r != budget.Granted {
		t.Fatalf("after probation: %v", r)
	}
}

func TestFallbackSplitsASmallCapByRank(t *testing.T) {
	for _, c := range []int{2, 10} {
		t.Run(fmt.Sprint("cap ", c), func(t *testing.T) {
			w := newWorld(t)
			var fs []*Fleet
			for range 3 {
				fs = append(fs, w.member(c, nil))
			}
			for _, f := range fs {
				f.tick(t.Context())
			}
			w.mr.Close()
			total := 0
			var got []int
			for _, f := range fs {
				f.tick(t.Context())
				if !f.Degraded() {
					t.Fatal("not degraded")
				}
			}
			w.advance(10*time.Second + time.Millisecond) // past every lease
			for _, f := range fs {
				n := takeN(f.NewBudget("org-1", api.PoolSonnet4), w.now, c)
				got = append(got, n)
				total += n
			}
			if total != c {
				t.Fatalf("3 members in the fallback took %v: %d permits on a cap of %d", got, total, c)
			}
		})
	}
}

func TestHeartbeatHoldsNoLaneLock(t *testing.T) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(10), Timeout: time.Minute})
	la := a.NewBudget("org-1", api.PoolSonnet4)
	takeN(la, w.now, 2)
	held, release := p.holdRequests()
	defer release()
	done := make(chan struct{})
	go func() { a.tick(t.Context()); close(done) }()
	<-held // the heartbeat is waiting for Redis
	lb := la.(*laneBudget)
	if !lb.mu.TryLock() {
		t.Fatal("the heartbeat holds the lane's lock while it waits for Redis")
	}
	lb.mu.Unlock()
	release()
	<-done
}

func TestProvisionalLaneIsNotShared(t *testing.T) {
	w := newWorld(t)
	a, b := w.member(10, nil), w.member(10, nil)
	a.tick(t.Context())
	b.tick(t.Context())
	// Two users' keys, both labelled by their default variable name.
	la := a.NewBudget("key:ANTHROPIC_API_KEY", api.PoolSonnet4)
	lb := b.NewBudget("key:ANTHROPIC_API_KEY", api.PoolSonnet4)
	na, nb := takeN(la, w.now, 10), takeN(lb, w.now, 10)
	if na != 5 || nb != 5 {
		t.Fatalf("provisional lanes took %d and %d, want 5 each (cap ÷ members, locally)", na, nb)
	}
	if lanes, _ := w.mr.Members(prefix + "lanes"); len(lanes) != 0 {
		t.Fatalf("a provisional lane reached Redis: %v", lanes)
	}
}

func TestStatusActiveJobsUseTheWindow(t *testing.T) {
	w := newWorld(t)
	a := w.member(10, nil)
	takeN(a.NewBudget("org-1", api.PoolSonnet4), w.now, 1)
	active := func() (int, int) {
		rep, err := ReadStatus(t.Context(), w.url())
		if err != nil {
			t.Fatal(err)
		}
		return len(rep.Lanes[0].Active), len(rep.Lanes[0].ActiveJobs)
	}
	if m, j := active(); m != 1 || j != 1 {
		t.Fatalf("just after a request: %d active members, %d jobs; want 1 and 1", m, j)
	}
	w.advance(1100 * time.Millisecond)
	a.tick(t.Context())
	if m, j := active(); m != 0 || j != 0 {
		t.Fatalf("past the 1 s window: %d active members, %d jobs; want 0", m, j)
	}
}

func TestVanishedMemberPermitsReturn(t *testing.T) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(6)})
	b := w.member(6, nil)
	la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	if n := takeN(la, w.now, 6); n != 6 {
		t.Fatalf("a took %d", n)
	}
	// a vanishes: no more calls reach Redis (a crash, a cut cable).
	p.setDown(true)
	w.advance(9 * time.Second)
	if n := takeN(lb, w.now, 6); n != 0 {
		t.Fatalf("b took %d within a's lease", n)
	}
	w.advance(time.Second + time.Millisecond)
	if n := takeN(lb, w.now, 6); n != 6 {
		t.Fatalf("b took %d after a's lease, want the whole cap of 6", n)
	}
	rep, err := ReadStatus(t.Context(), w.url())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Members) != 1 || rep.Lanes[0].InUse != 6 || rep.Lanes[0].Held[a.ID()] != 0 {
		t.Fatalf("status: %+v", rep)
	}
}

// TestFallbackPermitRefundNeverReachesRedis: a permit the fallback granted
// (from the local buckets) that settles after the probation has ended
// must not refund Redis tokens Redis never gave.
func TestFallbackPermitRefundNeverReachesRedis(t *testing.T) {
	// Whichever settles first: the fallback's permit, or the one Redis
	// granted while it was out.
	for _, redisFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "fallback first", true: "redis first"}[redisFirst], func(t *testing.T) {
			fallbackRefundNeverReachesRedis(t, redisFirst)
		})
	}
}

func fallbackRefundNeverReachesRedis(t *testing.T, redisFirst bool) {
	w := newWorld(t)
	p := newFaultProxy(t, w.mr.Addr())
	a := w.memberVia(p, Config{Caps: sonnet(10)})
	la := a.NewBudget("org-1", api.PoolSonnet4)
	la.Observe(w.now, budget.View{budget.OutputTokens: {Known: true, Limit: 6000, Depth: 6000, Remaining: 3000}}, budget.Grant{})
	d := budget.Demand{1, 0, 500}
	p.setDown(true)
	la.TryTake(w.now, 10, 0, d) // the failed call refuses and wakes the heartbeat
	a.tick(t.Context())
	if !a.Degraded() {
		t.Fatal("not degraded")
	}
	// Past the lease Redis last confirmed, the fallback grants on its own.
	var tk budget.Grant
	r := budget.ByConcurrency
	for i := 0; r != budget.Granted && i < 100; i++ {
		w.advance(time.Second)
		a.tick(t.Context())
		tk, r, _ = la.TryTake(w.now, 10, 0, d)
	}
	if r != budget.Granted || !a.Degraded() {
		t.Fatalf("the fallback refused: %v (degraded %v)", r, a.Degraded())
	}
	p.setDown(false)
	a.tick(t.Context())
	for i := 0; a.restricted() && i < 100; i++ {
		w.advance(time.Second)
		a.tick(t.Context())
	}
	if a.Degraded() || a.restricted() {
		t.Fatal("probation did not end")
	}
	level := func() float64 {
		rep, err := ReadStatus(t.Context(), w.url())
		if err != nil {
			t.Fatal(err)
		}
		return rep.Lanes[0].Buckets[budget.OutputTokens].Level
	}
	// A permit Redis grants, held meanwhile.
	tk2, r, _ := la.TryTake(w.now, 10, 0, d)
	if r != budget.Granted {
		t.Fatalf("Redis refused: %v", r)
	}
	before := level()
	first, second := tk, tk2
	if redisFirst {
		first, second = tk2, tk
	}
	la.Settle(w.now, first, budget.Demand{1, 0, 100})
	la.Settle(w.now, second, budget.Demand{1, 0, 100})
	a.tick(t.Context())
	if after := level(); after != before {
		t.Fatalf("Redis level %v → %v: a refund reached Redis while a fallback permit was out", before, after)
	}
	// With no fallback permit out any more, refunds flow again.
	tk3, r, _ := la.TryTake(w.now, 10, 0, d)
	if r != budget.Granted {
		t.Fatalf("Redis refused: %v", r)
	}
	before = level()
	la.Settle(w.now, tk3, budget.Demand{1, 0, 100})
	a.tick(t.Context())
	if after := level(); after != before+400 {
		t.Fatalf("Redis level %v → %v: a Redis permit's refund of 400 was not applied", before, after)
	}
}
