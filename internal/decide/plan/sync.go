package plan

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

// The sync model: one lane per organization for the job's pool. A lane's
// concurrency ceiling c(t) = min(cap, start · 2^(t/doubling)) sends c(t) ÷
// L requests per second (L the mean latency), at most the refill rate of
// its binding rate-limit bucket. The first start requests of every lane go
// out at once. The job is done one latency after its last request is sent.
//
// A lane whose limit is below cap ÷ L first spends what its binding bucket
// holds above the reserve when its sending reaches the refill — its start
// state, the refill while the probe is out and what the ramp left unspent,
// less the first wave, at most a full bucket's (1 − reserve) · window ·
// refill — before it is paced (withBurst). A lane never sends more than
// its bucket has given (laneModel.total). The low end of the
// range counts on that burst; the central value only when the buckets'
// depth and level were configured or read (World.BucketsKnown), since a
// colleague may have spent an assumed burst and the API may enforce a
// limit over a shorter window than assumed (docs/plan.md).

// What binds a lane or a route.
const (
	BindCap        = "etiquette cap"
	BindRPM        = "RPM"
	BindITPM       = "ITPM"
	BindOTPM       = "OTPM"
	BindLatency    = "latency" // every request fits in the first wave
	BindRamp       = "ramp"    // the job ends before the lanes are warm
	BindProcessing = "batch processing rate"
	BindAdmission  = "batch admission"
	BindStarvation = "starvation"
	BindWindow     = "batch window"
)

// Lane is the plan of one organization's sync lane for a job.
type Lane struct {
	Org string
	// Cap is the etiquette cap, Start the first ramp ceiling.
	Cap, Start int
	// Rate is the steady-state rate in requests per second:
	// min(cap ÷ L, RPM ÷ 60, ITPM ÷ 60 ÷ in, OTPM ÷ 60 ÷ out).
	Rate float64
	// Binding is what bounds Rate: BindCap, BindRPM, BindITPM or BindOTPM.
	Binding string
	// Steady is the concurrency at the steady rate, min(cap, Rate · L).
	Steady int
	// Peak is the most requests in flight this job is predicted to reach
	// on the lane (0 when the lane is not used).
	Peak int
	// Burst is how many requests the lane can send beyond the refill rate
	// before its binding bucket runs dry, counted from when its sending
	// first reaches the refill: what the bucket then holds above the
	// reserve (its start state, the refill while the probe is out and the
	// ramp's unspent refill, at most (1 − reserve) · window · Rate) when a
	// bucket binds, 0 when the cap does.
	Burst float64
}

// laneModel is a Lane with the arithmetic of its send curve; times are in
// seconds from the start of the job.
type laneModel struct {
	Lane
	cap, s, d, lat float64
	rCap, rb       float64 // cap ÷ L; the binding bucket's refill (+Inf: none)
	tc             float64 // the ramp reaches the cap
	t0, td         float64 // c(t) ÷ L passes the refill; the burst is spent (+Inf: never)
	room           float64 // requests the binding bucket holds above the reserve when the sends begin (+Inf: no bucket binds)
}

// newLaneModel builds the lane of org o for job j (resolved) in world w.
func newLaneModel(w World, o Org, j Job) laneModel {
	p := api.PoolOf(j.Model)
	c := w.cap(api.FamilyOf(j.Model))
	lat := w.latency(p).mean(j.MeanOutput)
	lim := o.limits(p)
	m := laneModel{
		cap: float64(c), d: w.Ramp.doubling(lat), lat: lat,
		rCap: float64(c) / lat, rb: math.Inf(1),
	}
	m.Org, m.Cap = o.Name, c
	m.Binding = BindCap
	for _, b := range []struct {
		name string
		v    float64
	}{
		{BindRPM, lim.RPM / 60},
		{BindITPM, lim.ITPM / 60 / math.Max(j.itpmInput(len(w.Orgs)), 1)},
		{BindOTPM, lim.OTPM / 60 / math.Max(j.MeanOutput, 1)},
	} {
		if b.v > 0 && b.v < m.rb {
			m.rb = b.v
			if b.v < m.rCap {
				m.Binding = b.name
			}
		}
	}
	m.Start = w.Ramp.start(c)
	if w.Ramp.Start <= 0 && w.BucketDrained <= 0 && !math.IsInf(m.rb, 1) {
		// The engine's start from full buckets (internal/engine/lane/start.go): a second
		// of the binding limit at once, then the limit's rate, within the
		// cap; modelled as a first wave of what it has let go by its
		// first latency's end (at least one request, not Start).
		m.Start = min(c, max(1, int(m.rb*(1+lat))))
	}
	m.s = float64(m.Start)
	m.Rate = math.Min(m.rCap, m.rb)
	m.Steady = int(math.Round(math.Min(m.cap, m.Rate*lat)))
	m.tc = m.d * math.Log2(m.cap/m.s)
	m.t0, m.td, m.room = math.Inf(1), math.Inf(1), math.Inf(1)
	if m.rb < m.rCap {
		m.t0 = math.Max(0, m.d*math.Log2(m.rb*lat/m.s))
	}
	return m
}

// withBurst returns m with Burst and td set for sends that begin start
// seconds after the job does (the header probe, the hold). Burst is what
// the binding bucket holds above the engine's reserve when the lane's
// sending first passes the refill, at t0: the start state, plus the refill
// while the probe is out, less the first wave, plus what the ramp leaves
// unspent below the refill, never more than a full bucket above the
// reserve. The bucket then drains at c(t) ÷ L − refill: td is when it is
// dry and the lane is paced.
func (m laneModel) withBurst(w World, start float64) laneModel {
	if math.IsInf(m.t0, 1) {
		return m
	}
	depth := w.BucketWindow.Seconds() * m.rb // requests
	level := math.Min(depth, (1-w.BucketDrained)*depth+start*m.rb)
	reserve := w.Reserve // the engine spends a full bucket's reserve for one latency only (internal/engine/lane/start.go): not modelled
	m.room = math.Max(0, level-reserve*depth)
	ramp := m.rb*m.t0 - m.conc(m.t0) - m.s // unspent refill by t0 (the first wave goes at 0)
	m.Burst = math.Min((1-reserve)*depth, math.Max(0, m.room+ramp))
	// g grows by at least rCap − rb per second once the ramp is over.
	g := func(t float64) float64 { return m.conc(t) - m.conc(m.t0) - m.rb*(t-m.t0) - m.Burst }
	lo, hi := m.t0, math.Max(m.t0, m.tc)+m.Burst/(m.rCap-m.rb)+1
	m.td = bisect(g, lo, hi)
	return m
}

// ceiling is the ramp's concurrency ceiling at t.
func (m *laneModel) ceiling(t float64) float64 {
	return math.Min(m.cap, m.s*math.Exp2(t/m.d))
}

// conc is ∫₀ᵗ ceiling ÷ L: the requests the concurrency alone lets the lane
// send by t beyond its first wave.
func (m *laneModel) conc(t float64) float64 {
	k := m.d / (m.lat * math.Ln2)
	if t <= m.tc {
		return m.s * k * (math.Exp2(t/m.d) - 1)
	}
	return m.s*k*(math.Exp2(m.tc/m.d)-1) + (t-m.tc)*m.cap/m.lat
}

// sent is the requests the lane has sent by t beyond its first wave,
// spending the buckets' initial burst or not.
func (m *laneModel) sent(t float64, burst bool) float64 {
	td := m.t0
	if burst {
		td = m.td
	}
	if t <= td {
		return m.conc(t)
	}
	return m.conc(td) + m.rb*(t-td)
}

// total is every request the lane has sent by t, its first wave included,
// at efficiency e: what its concurrency lets it send (sent), but never
// more than its bucket has given above the reserve — room at the start
// and the refill since — so a first wave bigger than the room, or a ramp
// faster than the refill from a bucket at its reserve, waits for tokens.
// (Past the burst the refill term is the larger one: sent already paces
// the lane at the refill.)
func (m *laneModel) total(t, e float64, burst bool) float64 {
	return math.Min(m.s+e*m.sent(t, burst), m.room+e*m.rb*t)
}

// bisect returns t in [lo, hi] where the nondecreasing g crosses 0 (lo if
// g(lo) ≥ 0, hi if g(hi) < 0).
func bisect(g func(float64) float64, lo, hi float64) float64 {
	if g(lo) >= 0 {
		return lo
	}
	if g(hi) < 0 {
		return hi
	}
	for range 200 {
		mid := (lo + hi) / 2
		if hi-lo <= 1e-9*math.Max(1, hi) {
			break
		}
		if g(mid) >= 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// syncRun is the sync route's prediction for n requests on some lanes.
type syncRun struct {
	n       int
	lanes   []Lane // the lanes used, with Peak set
	rate    float64
	send    float64 // the last request is sent (s)
	ramp    float64 // the slowest used lane reaches its steady concurrency (s)
	lat     Latency
	out     float64
	wall    Range
	binding string
}

// sendTime is when the n-th request is sent on lanes ms at efficiency e
// (the fraction of every lane's sending rate the job gets), with or without
// the initial burst.
func sendTime(ms []laneModel, n int, e float64, burst bool) float64 {
	total := func(t float64) float64 {
		s := 0.0
		for i := range ms {
			s += ms[i].total(t, e, burst)
		}
		return s - float64(n)
	}
	if total(0) >= 0 {
		return 0 // the first waves hold them all
	}
	hi := 1.0
	for total(hi) < 0 {
		hi *= 2
	}
	return bisect(total, 0, hi)
}

// efficiency is World.Efficiency, 1 when unset.
func (w World) efficiency() float64 {
	if w.Efficiency > 0 {
		return w.Efficiency
	}
	return 1
}

// highEfficiency is the fraction of the modelled sending rate the high end
// of the sync range assumes: colleagues may spend the reserve's share.
func highEfficiency(w World) float64 { return 1 - math.Max(w.Reserve, DefaultReserve) }

// p99 is the standard normal's 99th percentile.
const p99 = 2.326

// sendStart is when the sends beyond the header probes begin, in seconds
// from the start of a job of n requests on lanes ms.
//
// Each lane sends one header probe first and its first wave when the
// probe's answer has come back (lane: before any answer the buckets are
// unknown). The queue goes to whichever lane answers first, so the sends
// beyond the probes start, in expectation, at the first of k probe
// answers: the latency's 1/(k+1) quantile.
//
// Buckets that start below the reserve hold every lane that has one until
// they have refilled to it: the engine takes only from a bucket above its
// reserve (budget.BucketState.Wait), and the lanes of a world share its
// buckets' start state. The refill runs while the probes are out, so the
// sends start at the later of the two, and the tail is measured from
// there.
func sendStart(w World, ms []laneModel, j Job, n int) float64 {
	start := 0.0
	for _, m := range ms {
		if !math.IsInf(m.rb, 1) { // a known limit: a bucket to refill
			start = math.Max(0, w.BucketDrained+w.Reserve-1) * w.BucketWindow.Seconds()
		}
	}
	if n > len(ms) {
		lat := w.latency(api.PoolOf(j.Model))
		probe := lat.quantile(j.MeanOutput, math.Sqrt2*math.Erfinv(2/float64(len(ms)+1)-1))
		start = math.Max(start, probe)
	}
	return start
}

// runSync predicts n requests on lanes ms (all of them).
func runSync(w World, ms []laneModel, j Job, n int) syncRun {
	lat := w.latency(api.PoolOf(j.Model))
	r := syncRun{n: n, lat: lat, out: j.MeanOutput}
	start := sendStart(w, ms, j, n)
	// The burst is counted at the low end always, in the central value
	// only when the buckets' depth and level are known (a colleague may
	// have spent an assumed one, and the API may enforce a limit over a
	// shorter window than assumed), at the high end never.
	bs := make([]laneModel, len(ms))
	for i, m := range ms {
		bs[i] = m.withBurst(w, start)
	}
	e := w.efficiency()
	send := sendTime(bs, n, e, w.BucketsKnown) // from the start of the sends
	low := sendTime(bs, n, e, true)
	high := sendTime(bs, n, e*highEfficiency(w), false)
	// The job ends with its slowest answer (tail.go): the central value
	// adds the expected overshoot of the last end past the last send, the
	// high end its 90th percentile after its own, slower sending.
	wave := 0 // requests sent at once, before any answer
	for _, m := range bs {
		wave += int(m.s)
	}
	over, _ := w.tail(lat, j.MaxTokens, n, wave, send)
	_, over90 := w.tail(lat, j.MaxTokens, n, wave, high)
	r.send = send + start
	r.wall = Range{
		Low:  seconds(low + start + lat.median(j.MeanOutput)),
		Mid:  seconds(r.send + over),
		High: seconds(high + start + math.Max(over90, lat.quantile(j.MeanOutput, p99))),
	}
	// Low ends on a median answer and Mid on the expected overshoot of the
	// last one, which for a slow stream of sends can be the shorter: the
	// range stays ordered.
	r.wall.Mid = max(r.wall.Mid, r.wall.Low)
	r.wall.High = max(r.wall.High, r.wall.Mid)
	first := 0
	votes := map[string]float64{}
	// The lanes' times (t0, td, tc) and r.ramp run from the start of the
	// sends, as send does; r.send is from the start of the job.
	for _, m := range bs {
		first += m.Start
		r.rate += e * m.Rate
		paced := m.t0 // the central value's lane meets its bucket's refill
		if w.BucketsKnown {
			paced = m.td // … once the burst is spent: the ramp goes on through it
		}
		r.ramp = math.Max(r.ramp, math.Min(m.tc, paced))
		l := m.Lane
		l.Peak = int(math.Round(math.Min(m.ceiling(math.Min(send, paced)), float64(n))))
		r.lanes = append(r.lanes, l)
		why := m.Binding
		if send <= paced && m.room >= m.s { // the ramp, not the bucket, held it (a first wave beyond the room waits for tokens)
			why = BindCap
		}
		votes[why] += m.Rate
	}
	switch {
	case send == 0: // every request in the first waves, at once
		r.binding = BindLatency
	case send < r.ramp:
		r.binding = BindRamp
	default:
		r.binding = vote(votes)
	}
	return r
}

// vote returns the key with the largest weight, the first in name order on
// ties.
func vote(votes map[string]float64) string {
	names := make([]string, 0, len(votes))
	for n := range votes {
		names = append(names, n)
	}
	sort.Strings(names)
	best, most := "", -1.0
	for _, n := range names {
		if votes[n] > most {
			best, most = n, votes[n]
		}
	}
	return best
}

// fewerOrgsTolerance: the sync route uses the fewest organizations (the
// fastest first) whose predicted wall-clock is within this fraction of
// the wall-clock on all of them, so a small job does not touch every
// shared key.
const fewerOrgsTolerance = 0.05

// planSync predicts the sync route for n requests on the fewest lanes,
// fastest first, that come within fewerOrgsTolerance of all of them. The
// lanes of the result are in the world's order.
func planSync(w World, all []laneModel, j Job, n int) syncRun {
	best := runSync(w, all, j, n)
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return all[order[a]].Rate > all[order[b]].Rate })
	for k := 1; k < len(all); k++ {
		pick := append([]int(nil), order[:k]...)
		sort.Ints(pick)
		some := make([]laneModel, k)
		for i, o := range pick {
			some[i] = all[o]
		}
		if r := runSync(w, some, j, n); r.wall.Mid.Seconds() <= best.wall.Mid.Seconds()*(1+fewerOrgsTolerance) {
			return r
		}
	}
	return best
}

// laneModels builds every org's lane for job j (resolved).
func laneModels(w World, j Job) []laneModel {
	ms := make([]laneModel, 0, len(w.Orgs))
	for _, o := range w.Orgs {
		ms = append(ms, newLaneModel(w, o, j))
	}
	return ms
}

// SyncRate returns the steady-state ceiling of job j's sync route on every
// organization of w, in requests per second: the sum over orgs of
// min(cap ÷ L, RPM ÷ 60, ITPM ÷ 60 ÷ in, OTPM ÷ 60 ÷ out), and what binds
// most of it (weighted by rate; BindCap, BindRPM, BindITPM or BindOTPM).
// L is the mean latency (TTFT + out ÷ tokens/s) · exp(σ²/2).
func (w World) SyncRate(j Job) (rate float64, binding string, err error) {
	j, err = w.resolve(j)
	if err != nil {
		return 0, "", err
	}
	votes := map[string]float64{}
	for _, m := range laneModels(w, j) {
		rate += m.Rate
		votes[m.Binding] += m.Rate
	}
	return rate, vote(votes), nil
}

// Lanes returns job j's sync lane on every organization of w, in the
// world's order, with Peak unset and Burst as if all of them sent j.N
// requests (a Decision's lanes are the ones it uses, for its sync share,
// so their Burst can differ: the probes' wait depends on how many lanes
// there are).
func (w World) Lanes(j Job) ([]Lane, error) {
	j, err := w.resolve(j)
	if err != nil {
		return nil, err
	}
	var ls []Lane
	ms := laneModels(w, j)
	start := sendStart(w, ms, j, j.N)
	for _, m := range ms {
		ls = append(ls, m.withBurst(w, start).Lane)
	}
	return ls, nil
}

// RampTime is how long a lane with etiquette cap c and mean latency lat
// takes to warm up when saturated: doubling · log2(cap ÷ start).
func (r Ramp) RampTime(c int, lat time.Duration) time.Duration {
	s := r.start(c)
	return seconds(r.doubling(lat.Seconds()) * math.Log2(float64(c)/float64(s)))
}

// Mean returns the mean answer length for max_tokens k: E[min(U, k)] for
// U uniform on the integers [Min, Max] (k ≤ 0: no cap).
func (o OutputModel) Mean(k int) float64 {
	a, b, c := float64(o.Min), float64(o.Max), float64(k)
	if k <= 0 || c >= b {
		return (a + b) / 2
	}
	if c <= a {
		return c
	}
	n := b - a + 1
	below := c - a // values a..c-1 keep themselves
	return (below*(a+c-1)/2 + (n-below)*c) / n
}

// resolve checks j and fills its mean output from the world's output model.
func (w World) resolve(j Job) (Job, error) {
	if err := w.Validate(); err != nil {
		return j, err
	}
	switch {
	case j.N < 1:
		return j, fmt.Errorf("plan: N must be >= 1, got %d", j.N)
	case j.Model == "":
		return j, errors.New("plan: no model")
	case j.MeanInput < 0 || j.MeanOutput < 0 || j.MaxTokens < 0:
		return j, errors.New("plan: token counts must be >= 0")
	}
	if j.MeanOutput == 0 {
		if j.MaxTokens == 0 {
			return j, errors.New("plan: give the mean output tokens or max_tokens")
		}
		j.MeanOutput = w.Output.Mean(j.MaxTokens)
	}
	if j.MaxTokens > 0 && j.MeanOutput > float64(j.MaxTokens) {
		return j, fmt.Errorf("plan: mean output %.0f exceeds max_tokens %d", j.MeanOutput, j.MaxTokens)
	}
	if err := j.Cached.validate(j.MeanInput); err != nil {
		return j, err
	}
	if _, ok := cost.Price(j.Model); !ok {
		// No prices (or no cache rules) known: planned as written (the
		// route compared at the catalog's highest prices, the cost shown
		// as unknown), never with a relief that may not exist.
		j.Cached = CachedPrefix{}
	}
	return j, nil
}

// seconds converts seconds to a Duration (saturating far beyond any job).
func seconds(s float64) time.Duration {
	if s >= math.MaxInt64/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(s * float64(time.Second)))
}
