package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/testkit/budgettest"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
	"github.com/sluice-dev/sluice/internal/testkit/redisproc"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// suiteBudgets returns a budgettest constructor over the fleet at url: a
// new member and a new lane per call, on the caller's clock (the suite
// runs in fake time).
func suiteBudgets(url string) func(t *testing.T) budget.Budget {
	var n atomic.Int64
	return func(t *testing.T) budget.Budget {
		f := join(t, Config{URL: url, Clock: CallerClock, Now: func() time.Time { return t0 }, Caps: map[api.Family]int{api.FamilySonnet: 1000},
			Timeout: time.Minute}) // no refusal for a slow call on a loaded machine
		return f.NewBudget(fmt.Sprintf("org-suite-%d", n.Add(1)), api.PoolSonnet4)
	}
}

// join joins the fleet with the heartbeat off (tests call tick) and
// closes the member when the test ends.
func join(t *testing.T, cfg Config) *Fleet {
	t.Helper()
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = -1
	}
	f, err := Join(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSuiteRedisServer(t *testing.T) {
	srv := redisproc.ForTest(t)
	budgettest.Run(t, suiteBudgets(srv.URL()))
}

func TestSuiteMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	budgettest.Run(t, suiteBudgets("redis://"+mr.Addr()+"/0"))
}

// world is a miniredis on fake time shared by several members.
type world struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	now time.Time
}

func newWorld(t *testing.T) *world {
	mr := miniredis.RunT(t)
	w := &world{t: t, mr: mr, now: t0}
	mr.SetTime(t0)
	return w
}

func (w *world) url() string { return "redis://" + w.mr.Addr() + "/0" }

// advance moves Redis's clock (and the members' Now) forward.
func (w *world) advance(d time.Duration) {
	w.now = w.now.Add(d)
	w.mr.SetTime(w.now)
}

// member joins the world's fleet on Redis's clock with a Sonnet cap. Its
// Redis calls may take long (a loaded CI machine): a call past the 250 ms
// default would count as Redis failing and refuse a permit the test
// expects (tests of slow or failing Redis use memberVia).
func (w *world) member(capSonnet int, log *slog.Logger) *Fleet {
	return join(w.t, Config{URL: w.url(), Caps: map[api.Family]int{api.FamilySonnet: capSonnet},
		Now: func() time.Time { return w.now }, Logger: log, Timeout: time.Minute})
}

var unit = budget.Demand{1, 10, 10}

// takeN takes permits at now until one is refused; it returns how many.
func takeN(b budget.Budget, now time.Time, limit int) int {
	n := 0
	for {
		if _, r, _ := b.TryTake(now, limit, 0, unit); r != budget.Granted {
			return n
		}
		n++
	}
}

func TestLeaseExpiresWithoutHeartbeat(t *testing.T) {
	w := newWorld(t)
	a, b := w.member(4, nil), w.member(4, nil)
	la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	if n := takeN(la, w.now, 4); n != 4 {
		t.Fatalf("a alone took %d of a cap of 4", n)
	}
	_, r, wait := lb.TryTake(w.now, 4, 0, unit)
	if r != budget.ByConcurrency || wait != 50*time.Millisecond {
		t.Fatalf("b while a holds the cap: %v wait %v, want ByConcurrency and the 50ms poll", r, wait)
	}
	// a's requests last long: its heartbeat keeps its permits.
	for range 3 {
		w.advance(8 * time.Second)
		a.tick(t.Context())
		if _, r, _ := lb.TryTake(w.now, 4, 0, unit); r != budget.ByConcurrency {
			t.Fatalf("b at +%v while a heartbeats: %v, want ByConcurrency", w.now.Sub(t0), r)
		}
	}
	// a dies: no heartbeat. Within the TTL its permits still count...
	w.advance(9 * time.Second)
	if _, r, _ := lb.TryTake(w.now, 4, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("b 9s after a's last heartbeat: %v, want ByConcurrency", r)
	}
	// ...and after it they come back on their own.
	w.advance(1*time.Second + time.Millisecond)
	if n := takeN(lb, w.now, 4); n != 4 {
		t.Fatalf("b took %d after a's lease expired, want the whole cap of 4", n)
	}
	rep, err := ReadStatus(t.Context(), w.url())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Members) != 1 || rep.Members[0].ID != b.ID() || len(rep.Lanes) != 1 || rep.Lanes[0].InUse != 4 || rep.Lanes[0].Held[a.ID()] != 0 {
		t.Fatalf("status after a expired: %+v", rep)
	}
}

func TestFairShare(t *testing.T) {
	w := newWorld(t)
	a, b := w.member(10, nil), w.member(10, nil)
	la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	if n := takeN(la, w.now, 10); n != 10 {
		t.Fatalf("a lone job took %d, want the whole cap of 10", n)
	}
	if _, r, _ := lb.TryTake(w.now, 10, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("b with the cap held: %v", r)
	}
	// As a's requests finish, a may not take the freed permit back while b
	// is below its share of ⌈10/2⌉ = 5: b gets it.
	for i := range 5 {
		w.advance(60 * time.Millisecond) // past b's poll
		la.Settle(w.now, budget.Grant{Taken: unit}, unit)
		if _, r, _ := la.TryTake(w.now, 10, 0, unit); r != budget.ByConcurrency {
			t.Fatalf("round %d: a above its share took a permit b is owed: %v", i, r)
		}
		if _, r, _ := lb.TryTake(w.now, 10, 0, unit); r != budget.Granted {
			t.Fatalf("round %d: b below its share refused: %v", i, r)
		}
	}
	if ia, ib := la.Snapshot(w.now).InUse, lb.Snapshot(w.now).InUse; ia != 5 || ib != 5 {
		t.Fatalf("in use a %d b %d, want 5 and 5", ia, ib)
	}
	// At equal shares a freed permit goes back to its owner.
	la.Settle(w.now, budget.Grant{Taken: unit}, unit)
	if _, r, _ := la.TryTake(w.now, 10, 0, unit); r != budget.Granted {
		t.Fatalf("a below its share: %v", r)
	}
	// b stops asking (its job is in its tail): after the active window a
	// is alone again and gets b's share as b's permits come back.
	for range 5 {
		lb.Settle(w.now, budget.Grant{Taken: unit}, unit)
	}
	b.tick(t.Context()) // b's heartbeat sends the Settles no other call carried
	w.advance(1100 * time.Millisecond)
	if n := takeN(la, w.now, 10); n != 5 {
		t.Fatalf("a took %d more once b was idle, want 5 (the whole cap)", n)
	}
}

// logBuffer is a slog text logger into a buffer.
func logBuffer() (*slog.Logger, *logbuf.Buffer) {
	var b logbuf.Buffer
	return b.Logger(slog.LevelInfo), &b
}

func TestFallbackScalesDownAndRecovers(t *testing.T) {
	w := newWorld(t)
	const password = "s3cret-fleet-pw"
	w.mr.RequireAuth(password)
	log, logs := logBuffer()
	url := "redis://:" + password + "@" + w.mr.Addr() + "/0"
	cfg := func(l *slog.Logger) Config {
		return Config{URL: url, Caps: map[api.Family]int{api.FamilySonnet: 90}, Now: func() time.Time { return w.now }, Logger: l}
	}
	a, _, _ := join(t, cfg(log)), join(t, cfg(nil)), join(t, cfg(nil))
	la := a.NewBudget("org-1", api.PoolSonnet4)
	la.Observe(w.now, budget.View{budget.Requests: {Known: true, Limit: 6000, Depth: 6000, Remaining: 6000}}, budget.Grant{})
	if n := takeN(la, w.now, 10); n != 10 || a.Members() != 3 {
		t.Fatalf("before the outage: took %d (want 10), %d members known (want 3)", n, a.Members())
	}

	w.mr.Close()
	// The call that meets the outage is refused, not granted locally: a
	// single failed call says nothing yet, and Redis may still count a's
	// 10 permits while the others fill the rest of the cap.
	if _, r, wait := la.TryTake(w.now, 90, 0, unit); r != budget.ByConcurrency || wait <= 0 {
		t.Fatalf("the call meeting the outage: %v wait %v, want ByConcurrency with a wait", r, wait)
	}
	if a.Degraded() {
		t.Fatal("degraded by a hot-path failure alone: only a failed probe means Redis is away")
	}
	a.tick(t.Context()) // the heartbeat's probe fails too
	if !a.Degraded() {
		t.Fatal("not degraded after Redis went away")
	}
	// Until a's lease has surely run out in Redis (one TTL after its last
	// call), a holds no more than Redis counted for it: 10.
	if n := takeN(la, w.now, 90); n != 0 {
		t.Fatalf("in the fallback, within the lease, a took %d more, want 0 (Redis counts 10 for it)", n)
	}
	w.advance(10*time.Second + time.Millisecond)
	// Then a's cap is 90/3 = 30, of which it holds 10.
	if n := takeN(la, w.now, 90); n != 20 {
		t.Fatalf("in the fallback a took %d more, want 20 (cap 90 / 3 members − 10 held)", n)
	}
	if s := la.Snapshot(w.now); s.InUse != 30 || !s.Buckets[budget.Requests].Known || s.Buckets[budget.Requests].Limit != 2000 {
		t.Fatalf("fallback snapshot %+v: want 30 in use and an RPM bucket of 6000/3", s)
	}
	if l := logs.String(); !strings.Contains(l, "Redis unreachable") || !strings.Contains(l, "divided by 3") || strings.Count(l, "Redis unreachable") != 1 {
		t.Fatalf("the outage must be logged once, naming the scale:\n%s", l)
	}

	// Redis comes back empty, as a restarted server without persistence.
	if err := w.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	w.mr.FlushAll()
	for i := 0; i < 3 && a.Degraded(); i++ {
		a.tick(t.Context())
	}
	if a.Degraded() {
		t.Fatal("still degraded after Redis came back")
	}
	if l := logs.String(); !strings.Contains(l, "Redis is back") || !strings.Contains(l, "peak_permits=30 scaled_cap=30") {
		t.Fatalf("recovery not logged with the outage peak:\n%s", l)
	}
	// The heartbeat re-registered the permits taken in the fallback.
	if got := w.mr.HGet(laneKeys(laneName("org-1", api.PoolSonnet4))[2], a.ID()); got != "30" {
		t.Fatalf("after recovery Redis counts %q permits for a, want 30", got)
	}
	// Probation: the scaled cap holds for one TTL — by the 3 members known
	// before the outage, though a is the only one registered yet — then
	// the shared cap.
	if a.Members() != 1 {
		t.Fatalf("members after an empty restart: %d, want 1", a.Members())
	}
	if _, r, _ := la.TryTake(w.now, 90, 0, unit); r != budget.ByConcurrency {
		t.Fatalf("in probation: %v, want ByConcurrency at the scaled cap", r)
	}
	w.advance(10*time.Second + time.Millisecond)
	a.tick(t.Context())
	if _, r, _ := la.TryTake(w.now, 90, 0, unit); r != budget.Granted {
		t.Fatalf("after probation: %v, want Granted", r)
	}
	if l := logs.String(); strings.Contains(l, password) {
		t.Fatalf("the log holds the Redis password:\n%s", l)
	}
}

func TestJoinFailsWithoutRedis(t *testing.T) {
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Join(t.Context(), Config{URL: fmt.Sprintf("redis://:pw-secret@127.0.0.1:%d/0", port), Timeout: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "cannot join") || strings.Contains(err.Error(), "pw-secret") {
		t.Fatalf("Join without Redis: %v", err)
	}
	for _, bad := range []string{"http://nope", "redis://:pw-secret@host:port/0", "redis://:pw-secret@127.0.0.1:1/x"} {
		if _, err := Join(t.Context(), Config{URL: bad}); err == nil || strings.Contains(err.Error(), "pw-secret") {
			t.Fatalf("Join(%q): %v; want an error without the password", strings.ReplaceAll(bad, "pw-secret", "…"), err)
		}
	}
}

func TestBucketsRunOnRedisClock(t *testing.T) {
	w := newWorld(t)
	a := w.member(100, nil)
	l := a.NewBudget("org-1", api.PoolSonnet4)
	l.Observe(w.now, budget.View{budget.Requests: {Known: true, Limit: 60, Depth: 60, Remaining: 0}}, budget.Grant{})
	// The caller's clock says an hour has passed; Redis's says none.
	if _, r, wait := l.TryTake(w.now.Add(time.Hour), 100, 0, unit); r != budget.ByRequests || wait != time.Second {
		t.Fatalf("empty 60 RPM bucket: %v wait %v, want ByRequests 1s on Redis's clock", r, wait)
	}
	w.advance(time.Second)
	if _, r, _ := l.TryTake(w.now, 100, 0, unit); r != budget.Granted {
		t.Fatalf("a second later on Redis's clock: %v", r)
	}
}

func TestSharedBucketsAndObserve(t *testing.T) {
	w := newWorld(t)
	a, b := w.member(100, nil), w.member(100, nil)
	la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
	la.Observe(w.now, budget.View{budget.OutputTokens: {Known: true, Limit: 6000, Depth: 6000, Remaining: 6000}}, budget.Grant{})
	// b never saw a header: a's observation governs b too.
	taken, r, _ := lb.TryTake(w.now, 100, 0, budget.Demand{1, 0, 4000})
	if r != budget.Granted || taken.Taken[budget.OutputTokens] != 4000 {
		t.Fatalf("b's take: %v %v", r, taken)
	}
	if _, r, _ := la.TryTake(w.now, 100, 0, budget.Demand{1, 0, 4000}); r != budget.ByOutputTokens {
		t.Fatalf("a after b spent 4000 of 6000: %v, want ByOutputTokens", r)
	}
	// b's answer used 1000: the refund reaches a, with b's next script or
	// heartbeat.
	lb.Settle(w.now, taken, budget.Demand{1, 0, 1000})
	if got := lb.Snapshot(w.now).Buckets[budget.OutputTokens].Level; got != 5000 {
		t.Fatalf("b's own view after its refund: %v, want 5000", got)
	}
	b.tick(t.Context())
	if _, r, _ := la.TryTake(w.now, 100, 0, budget.Demand{1, 0, 4000}); r != budget.Granted {
		t.Fatalf("a after b's refund: %v", r)
	}
	// A colleague outside the fleet spent: b's headers lower everyone's level.
	lb.Observe(w.now, budget.View{budget.OutputTokens: {Known: true, Limit: 6000, Depth: 6000, Remaining: 500}}, budget.Grant{})
	rep, err := ReadStatus(t.Context(), w.url())
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Lanes[0].Buckets[budget.OutputTokens].Level; got != 500 {
		t.Fatalf("shared OTPM level %v after b observed 500 remaining, want 500", got)
	}
	if got := rep.Lanes[0].InUse; got != 1 {
		t.Fatalf("fleet permits %d, want 1 (a's)", got)
	}
}

// TestNeverExceedsCap hammers one lane from several members on a real
// redis-server and tracks the true number of permits out at once.
func TestNeverExceedsCap(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	srv := redisproc.ForTest(t)
	const members, capacity = 4, 12
	var out, peak atomic.Int64
	grants := make([]atomic.Int64, members)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for m := range members {
		// A heartbeat every 2 ms: its absolute writes race the grants.
		// The TTL and the call timeout are far beyond any scheduling delay
		// of a loaded machine under -race: no lease lapses, no call fails,
		// so the shared cap is all this test measures.
		f := join(t, Config{URL: srv.URL(), Caps: map[api.Family]int{api.FamilySonnet: capacity}, Poll: time.Millisecond,
			TTL: time.Minute, Timeout: 30 * time.Second, Heartbeat: 2 * time.Millisecond})
		l := f.NewBudget("org-hammer", api.PoolSonnet4)
		limit := 2 + 2*m // 2, 4, 6, 8 requests at once, each its own goroutine
		for g := range limit {
			rng := rand.New(rand.NewPCG(uint64(m), uint64(g)))
			wg.Go(func() {
				for ctx.Err() == nil {
					taken, r, wait := l.TryTake(time.Now(), limit, 0, unit)
					if r != budget.Granted {
						time.Sleep(max(wait, 200*time.Microsecond))
						continue
					}
					n := out.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					grants[m].Add(1)
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
					out.Add(-1)
					l.Settle(time.Now(), taken, taken.Taken)
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > capacity || p < capacity/2 {
		t.Errorf("peak permits out at once %d, want ≤ the cap %d (and near it)", p, capacity)
	}
	var total int64
	for m := range members {
		total += grants[m].Load()
	}
	for m := range members {
		// The member with 2 goroutines cannot use its share of 3.
		if g := grants[m].Load(); float64(g) < 0.4*float64(total)/members {
			t.Errorf("member %d got %d of %d grants: starved", m, g, total)
		}
	}
	t.Logf("peak %d of cap %d; grants %d", peak.Load(), capacity, total)
}

func TestSettleRidesOnTheNextScript(t *testing.T) {
	h := budget.View{budget.Requests: {Known: true, Limit: 6000, Depth: 6000, Remaining: 5000}}
	for _, tc := range []struct {
		name string
		send func(t *testing.T, a *Fleet, la budget.Budget, now time.Time)
	}{
		{"observe", func(t *testing.T, a *Fleet, la budget.Budget, now time.Time) { la.Observe(now, h, budget.Grant{}) }},
		{"heartbeat", func(t *testing.T, a *Fleet, la budget.Budget, now time.Time) { a.tick(t.Context()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			a, b := w.member(2, nil), w.member(2, nil)
			la, lb := a.NewBudget("org-1", api.PoolSonnet4), b.NewBudget("org-1", api.PoolSonnet4)
			if n := takeN(la, w.now, 2); n != 2 {
				t.Fatalf("a took %d of 2", n)
			}
			la.Settle(w.now, budget.Grant{Taken: unit}, unit)
			if _, r, _ := lb.TryTake(w.now, 2, 0, unit); r != budget.ByConcurrency {
				t.Fatalf("b took the permit a's Settle alone released: %v; Redis counts it until a's next script", r)
			}
			tc.send(t, a, la, w.now)
			w.advance(60 * time.Millisecond) // past b's poll
			if _, r, _ := lb.TryTake(w.now, 2, 0, unit); r != budget.Granted {
				t.Fatalf("b after a's %s: %v, want Granted", tc.name, r)
			}
		})
	}
}

// BenchmarkRequest is one request's fleet traffic on a real redis-server:
// TryTake, then Settle and Observe (one script between them).
func BenchmarkRequest(b *testing.B) {
	srv := redisproc.ForTest(b)
	f, err := Join(b.Context(), Config{URL: srv.URL(), Heartbeat: -1, Caps: map[api.Family]int{api.FamilySonnet: 100}})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	l := f.NewBudget("org-bench", api.PoolSonnet4)
	h := budget.View{budget.Requests: {Known: true, Limit: 1e9, Depth: 1e9, Remaining: 1e9}}
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		taken, r, _ := l.TryTake(now, 100, 0.15, unit)
		if r != budget.Granted {
			b.Fatal(r)
		}
		l.Settle(now, taken, taken.Taken)
		l.Observe(now, h, budget.Grant{})
	}
}
