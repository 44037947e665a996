// Package fleet shares lane budgets between sluice processes through Redis:
// the per-organization concurrency caps and the RPM / ITPM / OTPM buckets
// hold across every process that names the same fleet. See docs/fleet.md.
//
// A Fleet is one process's membership. Its NewBudget is a
// dispatch.Config.NewBudget; the budgets it returns implement budget.Budget
// with permits held in Redis as leases (renewed by the member's heartbeat),
// fair shares between the jobs active on a lane, and a fallback to local
// limits scaled by 1/N of the last known N members while Redis is away.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	neturl "net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// Clock picks whose time the scripts run on.
type Clock int

const (
	// ServerClock: Redis's TIME, one clock for the whole fleet whatever
	// the machines' clocks say. The default.
	ServerClock Clock = iota
	// CallerClock: the now passed to each Budget method (and Config.Now for
	// the heartbeat). For tests in fake time.
	CallerClock
)

// DefaultCap is the cap of a lane whose family Config.Caps does not name.
const DefaultCap = 40

// Config configures a Fleet. Zero fields take the defaults noted.
type Config struct {
	// URL is redis://[:password@]HOST:PORT/DB (required).
	URL string
	// Caps are the etiquette caps on concurrency per family, for the whole
	// fleet per organization; a family not named uses FamilyUnknown's, else
	// DefaultCap. Members should agree on them.
	Caps map[api.Family]int
	// TTL is a member's lease: a process silent for this long is dead and
	// its permits return (default 10 s).
	TTL time.Duration
	// Heartbeat is how often the lease is renewed (default TTL/4);
	// negative: never (tests call the heartbeat themselves).
	Heartbeat time.Duration
	// ActiveWindow is how long after its last request for a permit a job
	// still counts toward the fair share (default 1 s).
	ActiveWindow time.Duration
	// Poll is the wait reported after a fleet-wide concurrency refusal:
	// the permits waited for may be another process's (default 50 ms).
	Poll time.Duration
	// Timeout bounds every Redis call; a slower answer counts as Redis
	// being away (default 250 ms).
	Timeout time.Duration
	// Retry is how often Redis is probed during an outage (default 1 s).
	Retry time.Duration
	// Clock, and Now for the heartbeat under CallerClock (default time.Now).
	Clock Clock
	Now   func() time.Time
	// Job names the job this member works for: the fair share of a lane
	// is per job, so a job split over several processes (machines) shares
	// one share. Empty: this process is a job of its own.
	Job string
	// Label describes this member's work in `sluice fleet status`.
	Label  string
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.TTL / 4
	}
	if c.ActiveWindow <= 0 {
		c.ActiveWindow = time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 50 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 250 * time.Millisecond
	}
	if c.Retry <= 0 {
		c.Retry = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Key names (docs/fleet.md).
const (
	prefix        = "sluice:fleet:"
	keyMembers    = prefix + "members"
	keyMemberInfo = prefix + "member-info"
	keyMemberJob  = prefix + "member-job"
	keyLanes      = prefix + "lanes"
)

// laneKeys are a lane script's KEYS (scripts.go).
func laneKeys(name string) []string {
	p := prefix + "lane:" + name + ":"
	return []string{keyMembers, p + "state", p + "held", p + "active", keyLanes, p + "limits", p + "acks", keyMemberJob}
}

// Indexes into laneKeys.
const (
	kState  = 1
	kHeld   = 2
	kActive = 3
	kLimits = 5
	kAcks   = 6
)

// provisionalPrefix starts the org of a key whose probe named none
// (dispatch.Discover): such a lane is never shared.
const provisionalPrefix = "key:"

// laneName is how a lane is named in Redis: organization id and pool.
func laneName(org string, pool api.Pool) string { return org + "|" + string(pool) }

// Fleet is one process's membership of a fleet. It is safe for concurrent
// use. Create it with Join; Close it when done.
type Fleet struct {
	cfg  Config
	rdb  *redis.Client
	addr string // HOST:PORT/DB, never a password
	id   string
	job  string // the fair-share identity: Config.Job, else id
	info string

	members  atomic.Int64 // last known live members, ≥ 1
	rank     atomic.Int64 // live members whose id sorts before this one's
	outageN  atomic.Int64 // members known when the last outage began
	degraded atomic.Bool
	// suspected: a hot-path call failed; no Redis call from the hot path
	// (requests wait) until the heartbeat's probe says whether Redis is away.
	suspected atomic.Bool
	// probation: until then (Config.Now time) a recovered member keeps the
	// scaled-down caps, while the others re-register their permits.
	probation atomic.Int64 // unix ns
	// lastOK is the end of the last successful script (Config.Now time,
	// unix ns): the lease is live until lastOK + TTL, as far as the member
	// knows. leaseEnd is one TTL after the end of the last script tried,
	// answered or not: until then Redis may still count this member.
	lastOK, leaseEnd atomic.Int64

	since atomic.Int64 // start of the outage, unix ns (Config.Now time)

	// mu guards budgets. No lock is held across a Redis call but a lane's
	// own, by that lane's TryTake and Observe.
	mu      sync.Mutex
	budgets map[string]*laneBudget

	kick      chan struct{} // wakes the heartbeat to probe at once
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// ParseURL checks a fleet URL and returns its display form, HOST:PORT/DB
// (without any password).
func ParseURL(url string) (string, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL may hold a password
		}
		return "", fmt.Errorf("fleet: bad URL (want redis://HOST:PORT/DB): %w", err)
	}
	return fmt.Sprintf("%s/%d", opt.Addr, opt.DB), nil
}

// newClient makes the go-redis client: short timeouts, no retries of its
// own (an error means "Redis is away" and the fleet falls back), RESP2, no
// CLIENT SETINFO or maintenance notifications (Redis 7.0 has neither).
func newClient(url string, timeout time.Duration) (*redis.Client, string, error) {
	addr, err := ParseURL(url)
	if err != nil {
		return nil, "", err
	}
	opt, _ := redis.ParseURL(url)
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), addr, nil
}

// redisLogger routes go-redis's own messages (pool errors while Redis is
// away) to a logger at debug level: the fleet logs outages itself, once.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.Debug("fleet: go-redis: " + fmt.Sprintf(format, v...))
}

var setLoggerOnce sync.Once

// Join registers this process as a member of the fleet at cfg.URL and
// starts its heartbeat. It fails if Redis does not answer: without a last
// known membership there is nothing safe to fall back to.
func Join(ctx context.Context, cfg Config) (*Fleet, error) {
	cfg.defaults()
	setLoggerOnce.Do(func() { redis.SetLogger(redisLogger{cfg.Logger}) })
	rdb, addr, err := newClient(cfg.URL, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	var rnd [4]byte
	rand.Read(rnd[:])
	f := &Fleet{
		cfg: cfg, rdb: rdb, addr: addr,
		id:      fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(rnd[:])),
		budgets: map[string]*laneBudget{},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}), done: make(chan struct{}),
	}
	f.job = cfg.Job
	if f.job == "" {
		f.job = f.id
	}
	info, _ := json.Marshal(MemberInfo{Host: host, PID: os.Getpid(), Job: cfg.Job, Label: cfg.Label, Started: cfg.Now().UTC()})
	f.info = string(info)
	f.members.Store(1)
	hb, err := f.heartbeat(ctx)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("fleet: cannot join the fleet at %s: %w", addr, err)
	}
	f.renewed(hb.members, false)
	f.rank.Store(hb.rank)
	cfg.Logger.Info("fleet: joined", "redis", addr, "member", f.id, "members", f.members.Load())
	if cfg.Heartbeat > 0 {
		go f.loop()
	} else {
		close(f.done)
	}
	return f, nil
}

// ID is this member's id: host/pid/random.
func (f *Fleet) ID() string { return f.id }

// Members is the last known number of live members (at least 1).
func (f *Fleet) Members() int { return int(f.members.Load()) }

// Degraded reports whether the fleet is in its local fallback.
func (f *Fleet) Degraded() bool { return f.degraded.Load() }

// NewBudget returns the budget of lane org × pool, shared through Redis.
// org is an organization id, never a key. Asked twice for one lane it
// returns the same budget (the process's permits on a lane are one count).
// Its signature is dispatch.Config.NewBudget's.
//
// A provisional org ("key:LABEL": the key's probe named none) is not
// shared: labels are not unique between users, so two keys could meet in
// one lane. Its budget is local, at the fallback's limits (the cap and the
// headers divided by the members), since other members may use the same
// key.
func (f *Fleet) NewBudget(org string, pool api.Pool) budget.Budget {
	name := laneName(org, pool)
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.budgets[name]; b != nil {
		return b
	}
	b := &laneBudget{f: f, name: name, org: org, pool: pool, cap: f.capFor(pool), keys: laneKeys(name), local: budget.NewLocal(),
		provisional: strings.HasPrefix(org, provisionalPrefix), doubt: math.MaxInt}
	f.budgets[name] = b
	return b
}

func (f *Fleet) capFor(p api.Pool) int {
	fam := api.FamilyOfPool(p)
	if c, ok := f.cfg.Caps[fam]; ok && c > 0 {
		return c
	}
	if c, ok := f.cfg.Caps[api.FamilyUnknown]; ok && c > 0 {
		return c
	}
	return DefaultCap
}

// assumed is the number of members to divide the limits by: the last
// known count, and during an outage and its probation at least the count
// when the outage began (a Redis that restarted empty counts only the
// members that have re-registered yet).
func (f *Fleet) assumed() int64 {
	n := f.members.Load()
	if f.restricted() {
		n = max(n, f.outageN.Load())
	}
	return max(1, n)
}

// scaled is this member's part of a cap c split between the assumed N
// members: ⌊c/N⌋, plus one for the members ranked below c mod N (by id,
// as of the last heartbeat before the outage). When the members agree on
// N and their ranks, the parts sum to c exactly; a member ranked beyond a
// cap smaller than N gets 0.
func (f *Fleet) scaled(c int) int {
	n := int(f.assumed())
	s := c / n
	if int(f.rank.Load()) < c%n {
		s++
	}
	return s
}

// restricted reports whether the scaled-down caps apply: during an outage
// and the probation after it.
func (f *Fleet) restricted() bool {
	return f.degraded.Load() || f.cfg.Now().UnixNano() < f.probation.Load()
}

// at is the time argument of a script: empty for Redis's own clock.
func (f *Fleet) at(now time.Time) string {
	if f.cfg.Clock == CallerClock {
		return strconv.FormatInt(now.UnixMicro(), 10)
	}
	return ""
}

func (f *Fleet) ttlMicros() string { return strconv.FormatInt(f.cfg.TTL.Microseconds(), 10) }

// expect is the scripts' expect argument: "1" while this member believes
// its lease is live (Redis not knowing it then means Redis lost it).
func (f *Fleet) expect() string {
	if last := f.lastOK.Load(); last != 0 && f.cfg.Now().UnixNano() < last+f.cfg.TTL.Nanoseconds() {
		return "1"
	}
	return "0"
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// run runs a script that renews the lease, with the call timeout, and
// keeps the lease's bounds: a failed call may still have renewed it.
func (f *Fleet) run(s *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	return f.runCtx(ctx, s, keys, args...)
}

func (f *Fleet) runCtx(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	v, err := s.Run(ctx, f.rdb, keys, args...).Result()
	end := f.cfg.Now()
	storeMax(&f.leaseEnd, end.Add(f.cfg.TTL).UnixNano())
	if err == nil {
		storeMax(&f.lastOK, end.UnixNano())
	}
	return v, err
}

// renewed takes in a script's count of live members, and whether Redis
// had lost this member.
func (f *Fleet) renewed(members int64, lost bool) {
	if lost {
		f.restarted()
	}
	f.members.Store(max(1, members))
}

// restarted: Redis did not know this member although its lease was live —
// it restarted and lost its data (or the lease lapsed). The other
// members' permits are unknown to it until they re-register: probation,
// with the scaled caps of the members known before.
func (f *Fleet) restarted() {
	now := f.cfg.Now()
	n := f.members.Load()
	if now.UnixNano() < f.probation.Load() {
		n = max(n, f.outageN.Load())
	}
	f.outageN.Store(n)
	was := f.restricted()
	f.probation.Store(now.Add(f.cfg.TTL).UnixNano())
	if !was {
		f.cfg.Logger.Warn(fmt.Sprintf("fleet: Redis had lost this member (restarted without its data?); every lane's cap and rate limits divided by %d (the last known members) for %s while members re-register", n, f.cfg.TTL),
			"redis", f.addr)
	}
	f.wake()
}

// wake asks the heartbeat to run at once.
func (f *Fleet) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// suspect: a hot-path call failed. Requests wait, without Redis calls,
// until the heartbeat's probe (at once) finds Redis there or away.
func (f *Fleet) suspect(err error) {
	if !f.suspected.Swap(true) {
		f.cfg.Logger.Debug("fleet: a Redis call failed; probing", "redis", f.addr, "err", err)
	}
	f.wake()
}

// fail enters the fallback (once per outage, logged). It takes no lock.
func (f *Fleet) fail(err error) {
	n := f.members.Load()
	if f.cfg.Now().UnixNano() < f.probation.Load() {
		n = max(n, f.outageN.Load()) // an outage within the last one's probation
	}
	f.outageN.Store(n)
	if f.degraded.Swap(true) {
		return
	}
	f.suspected.Store(false)
	f.since.Store(f.cfg.Now().UnixNano())
	f.cfg.Logger.Error(fmt.Sprintf("fleet: Redis unreachable; falling back to local limits: every lane's cap and rate limits divided by %d (the last known members) until it returns", n),
		"redis", f.addr, "err", err)
}

// recovered leaves the fallback after a successful heartbeat.
func (f *Fleet) recovered() {
	if !f.degraded.Load() {
		return
	}
	now := f.cfg.Now()
	f.probation.Store(now.Add(f.cfg.TTL).UnixNano())
	f.degraded.Store(false)
	out := now.Sub(time.Unix(0, f.since.Load()))
	f.mu.Lock()
	type peak struct {
		org, pool string
		peak, cap int
	}
	var peaks []peak
	for _, b := range f.budgets {
		if !b.provisional {
			peaks = append(peaks, peak{b.org, string(b.pool), b.endOutage(), f.scaled(b.cap)})
		}
	}
	f.mu.Unlock()
	sort.Slice(peaks, func(i, j int) bool { return peaks[i].org+peaks[i].pool < peaks[j].org+peaks[j].pool })
	f.cfg.Logger.Warn(fmt.Sprintf("fleet: Redis is back; lanes are shared again (scaled-down caps kept for %s while members re-register)", f.cfg.TTL),
		"redis", f.addr, "outage", out.Round(time.Millisecond), "members", f.Members())
	for _, p := range peaks {
		f.cfg.Logger.Info("fleet: during the outage", "org", p.org, "pool", p.pool, "peak_permits", p.peak, "scaled_cap", p.cap)
	}
}

// hbReply is the heartbeat's answer.
type hbReply struct {
	members, rank int64
	lost          bool
}

// heartbeat renews the lease, records the member's info and job, and
// posts its permits and refunds on every shared lane (absolutely: a Redis
// that lost its data learns them again). It holds no lane lock across the
// call: each lane's count is read with the next sequence number, and
// Redis ignores the post if a later call of the lane's (a TryTake while
// the heartbeat was on its way) has already posted.
func (f *Fleet) heartbeat(ctx context.Context) (hbReply, error) {
	f.mu.Lock()
	names := make([]string, 0, len(f.budgets))
	for name, b := range f.budgets {
		if !b.provisional {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	bs := make([]*laneBudget, len(names))
	for i, name := range names {
		bs[i] = f.budgets[name]
	}
	f.mu.Unlock()
	type post struct {
		seq    int64
		held   int
		refund budget.Demand
	}
	posts := make([]post, len(bs))
	keys := []string{keyMembers, keyMemberInfo, keyMemberJob}
	args := []any{f.at(f.cfg.Now()), f.id, f.ttlMicros(), f.expect(), f.info, f.job}
	for i, b := range bs {
		b.mu.Lock()
		b.seq++
		p := post{b.seq, b.inUse, b.refund}
		b.mu.Unlock()
		posts[i] = p
		keys = append(keys, b.keys[kState], b.keys[kHeld], b.keys[kAcks])
		args = append(args, p.seq, p.held)
		for _, x := range p.refund {
			args = append(args, fnum(x))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	v, err := f.runCtx(ctx, heartbeatScript, keys, args...)
	var s []string
	if err == nil {
		s, err = replyStrings(v, 3+2*len(bs))
	}
	if err != nil {
		for i, b := range bs {
			b.mu.Lock()
			b.failed(posts[i].seq, posts[i].held)
			b.mu.Unlock()
		}
		return hbReply{}, err
	}
	var r hbReply
	r.members, _ = strconv.ParseInt(s[0], 10, 64)
	r.lost = s[1] == "1"
	r.rank, _ = strconv.ParseInt(s[2], 10, 64)
	for i, b := range bs {
		seq, _ := strconv.ParseFloat(s[3+2*i], 64)
		held, _ := strconv.ParseFloat(s[4+2*i], 64)
		b.mu.Lock()
		// A TryTake answered after this post was read may have moved
		// applied on already: never move it back.
		if int64(seq) == posts[i].seq && posts[i].seq >= b.ackSeq {
			b.applied = posts[i].refund
		}
		b.ack(int64(seq), int(held))
		b.mu.Unlock()
	}
	return r, nil
}

// tick is one heartbeat. During an outage a PING comes first: a call that
// fails may still run in Redis later (renewing the lease, posting a
// count), so the fallback makes none that could until Redis answers.
func (f *Fleet) tick(ctx context.Context) {
	if f.degraded.Load() {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		err := f.rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return
		}
	}
	hb, err := f.heartbeat(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			f.fail(err)
		}
		return
	}
	f.recovered()
	f.suspected.Store(false)
	f.renewed(hb.members, hb.lost)
	if !f.restricted() {
		// Ranks split the caps in the fallback: keep those of the
		// membership the last known N counted.
		f.rank.Store(hb.rank)
	}
}

func (f *Fleet) loop() {
	defer close(f.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := time.NewTimer(f.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		case <-f.kick:
		}
		f.tick(ctx)
		t.Stop()
		if f.degraded.Load() {
			t.Reset(f.cfg.Retry)
		} else {
			t.Reset(f.cfg.Heartbeat)
		}
	}
}

// Close stops the heartbeat and leaves the fleet: this member's permits
// and claims are removed at once rather than at the end of its lease.
// Call it when no request is in flight any more.
func (f *Fleet) Close() error {
	var err error
	f.closeOnce.Do(func() {
		close(f.stop)
		<-f.done
		if !f.degraded.Load() {
			_, err = f.heartbeat(context.Background()) // the last refunds
		}
		f.mu.Lock()
		keys := []string{keyMembers, keyMemberInfo, keyMemberJob}
		for _, b := range f.budgets {
			if !b.provisional {
				keys = append(keys, b.keys[kHeld], b.keys[kActive], b.keys[kLimits], b.keys[kAcks])
			}
		}
		f.mu.Unlock()
		if err == nil && !f.degraded.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
			err = leaveScript.Run(ctx, f.rdb, keys, f.id).Err()
			cancel()
		}
		if cerr := f.rdb.Close(); err == nil {
			err = cerr
		}
	})
	return err
}
