package plan

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/cost"
)

// Priority is what a job wants most.
type Priority string

// The priorities.
const (
	// PreferLatency picks the route with the least predicted wall-clock.
	PreferLatency Priority = "latency"
	// PreferCost picks the cheapest route that meets the deadline.
	PreferCost Priority = "cost"
	// PreferBalanced minimizes cost + value of time × wall-clock.
	PreferBalanced Priority = "balanced"
)

// ParsePriority accepts "latency", "cost" or "balanced".
func ParsePriority(s string) (Priority, error) {
	switch p := Priority(s); p {
	case PreferLatency, PreferCost, PreferBalanced:
		return p, nil
	}
	return "", fmt.Errorf("plan: priority must be latency, cost or balanced, got %q", s)
}

// Route is how the requests are sent.
type Route string

// The routes.
const (
	RouteSync  Route = "sync"  // the dispatch engine, every request a Messages call
	RouteBatch Route = "batch" // Message Batches, at api.BatchDiscount
	RouteSplit Route = "split" // both at once, a share each
)

// Job is the shape of the work.
type Job struct {
	// N is the number of requests.
	N int
	// Model is the model id or alias; it names the pool, the family (and
	// so the etiquette cap) and the prices.
	Model string
	// MeanInput is the mean uncached input tokens per request (what counts
	// toward ITPM and is billed at the input price).
	MeanInput float64
	// MeanOutput is the mean output tokens per request; 0 takes the
	// world's output model at MaxTokens.
	MeanOutput float64
	MaxTokens  int
	// Cached is what the job's shared prompt prefixes let the prompt cache
	// spare (cache.go); zero for none.
	Cached CachedPrefix
	// Long is the part of the job over the model's long-context threshold,
	// when the lines are known (sluice plan --input): each request is
	// billed in its own band, so a few long lines cost their multiple
	// however low the mean. Zero: every request is priced in the band of
	// MeanInput.
	Long LongPart
}

// LongPart is a job's requests over the model's long-context threshold:
// their share of the job and their mean input tokens.
type LongPart struct {
	Share     float64
	MeanInput float64
}

// Options are the caller's preferences. The zero value is the balanced
// priority with the default rules.
type Options struct {
	// Priority is PreferBalanced when empty.
	Priority Priority
	// Deadline > 0 rules out every route predicted (central value) to
	// take longer.
	Deadline time.Duration
	// ValueOfTime is the balanced priority's price of an hour of
	// wall-clock, in USD (DefaultValueOfTime when 0).
	ValueOfTime float64
	// MinBatch is the fewest requests worth sending to the batch route
	// (DefaultMinBatch when 0).
	MinBatch int
	// Chunk and Window > 0 force the batch size and the batches in flight
	// per org instead of the planner's rules.
	Chunk, Window int
	// StuckFactor scales the stuck-batch threshold (DefaultStuckFactor
	// when 0).
	StuckFactor float64
}

// Defaults of Options.
const (
	// DefaultValueOfTime is an assumption: about what an hour of a
	// researcher waiting on results costs.
	DefaultValueOfTime = 50.0
	// DefaultMinBatch: fewer requests are not worth a queue whose first
	// result comes minutes (and may come hours) later.
	DefaultMinBatch = 100
	// MaxCrossover bounds the crossover search.
	MaxCrossover = 10_000_000
	// minGain: a more complex route (batch over sync, split over either)
	// must improve the priority's objective by at least this fraction.
	minGain = 0.05
)

func (o Options) withDefaults() Options {
	if o.Priority == "" {
		o.Priority = PreferBalanced
	}
	if o.ValueOfTime <= 0 {
		o.ValueOfTime = DefaultValueOfTime
	}
	if o.MinBatch <= 0 {
		o.MinBatch = DefaultMinBatch
	}
	if o.StuckFactor <= 0 {
		o.StuckFactor = DefaultStuckFactor
	}
	return o
}

// Range is a predicted wall-clock: Mid is the model's central value, Low
// and High its optimistic and pessimistic ends (docs/plan.md says how each
// route's are built).
type Range struct {
	Low, Mid, High time.Duration
}

func addRange(a, b Range) Range {
	return Range{Low: a.Low + b.Low, Mid: a.Mid + b.Mid, High: a.High + b.High}
}

func maxRange(a, b Range) Range {
	return Range{Low: max(a.Low, b.Low), Mid: max(a.Mid, b.Mid), High: max(a.High, b.High)}
}

// Decision is the planner's answer for one job.
type Decision struct {
	World    string
	Job      Job // with MeanOutput filled in
	Priority Priority
	Deadline time.Duration
	Route    Route
	// SyncN and BatchN are the requests on each route (SyncN + BatchN = N).
	SyncN, BatchN int
	// Orgs are the organizations used, in the world's order.
	Orgs []string
	// Lanes are the sync lanes used (none on the batch route), in the
	// world's order; SyncRate is their steady rate in requests per second.
	Lanes    []Lane
	SyncRate float64
	// LastSend is when the sync route's last request is sent; the central
	// wall-clock adds the tail to its last answer (tail.go).
	LastSend time.Duration
	// RampTime is how long, from the first sends (after the header probe
	// and any hold), the slowest used lane's ramp runs: until it reaches
	// its steady concurrency, or — spending a known bucket's burst — until
	// the burst is spent or it reaches its cap;
	// Latency is the mean latency of one request.
	RampTime, Latency time.Duration
	// Batch is the batch part (nil on the sync route): chunk size, orgs,
	// batches in flight per org.
	Batch *BatchRun
	// StuckAfter: a batch with no end this long after its create is
	// stuck (cancel it and re-drive its requests on sync). Zero on the
	// sync route.
	StuckAfter time.Duration
	// Wall and Cost are the chosen route's.
	Wall Range
	Cost float64
	// Unpriced names the job's model when the catalog has no price for it:
	// then Cost, SyncCost and BatchCost are the catalog's highest prices,
	// used to compare routes only, and every rendering says the cost is
	// unknown (FormatCost).
	Unpriced string
	// SyncWall, SyncCost, BatchWall and BatchCost are the whole job on
	// each route (BatchWall is zero when N < MinBatch).
	SyncWall, BatchWall Range
	SyncCost, BatchCost float64
	// Binding is what bounds the chosen route's wall-clock.
	Binding string
	// Crossover is the smallest N (to 1 %) at which this priority sends
	// part or all of a job of this shape to the batch route; 0 when it
	// never does up to MaxCrossover.
	Crossover int
	// CacheEffect says what the prompt cache changes (the route, the
	// binding limit, wall-clock and cost against the job uncached); empty
	// when the job has no cached prefix.
	CacheEffect string
	Why         string
	Warnings    []string
}

// candidate is one route with m requests on batch.
type candidate struct {
	route Route
	m     int
	sync  *syncRun
	batch *batchPlan
	wall  Range
	cost  float64
}

// planner holds what every candidate of one decision shares.
type planner struct {
	w     World
	j     Job
	o     Options
	lanes []laneModel
}

func newPlanner(w World, j Job, o Options) (*planner, error) {
	j, err := w.resolve(j)
	if err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if _, err := ParsePriority(string(o.Priority)); err != nil {
		return nil, err
	}
	if o.Chunk > MaxBatchRequests {
		return nil, fmt.Errorf("plan: a batch holds at most %d requests, got chunk %d", MaxBatchRequests, o.Chunk)
	}
	return &planner{w: w, j: j, o: o, lanes: laneModels(w, j)}, nil
}

// costOf is the cost of n requests of the job's shape.
func (p *planner) costOf(n int, batch bool) float64 {
	if n <= 0 {
		return 0
	}
	if p.j.Cached.active() {
		return p.cachedCost(n, batch)
	}
	if l := p.j.Long; l.Share > 0 && l.Share < 1 && l.MeanInput > p.j.MeanInput {
		// Each band by its own mean: the long requests', and the rest's
		// (the job's mean less theirs).
		nl := int(math.Round(float64(n) * l.Share))
		short := (p.j.MeanInput - l.Share*l.MeanInput) / (1 - l.Share)
		lu, _ := cost.EstimateN(p.j.Model, nl, l.MeanInput, p.j.MeanOutput, batch)
		su, _ := cost.EstimateN(p.j.Model, n-nl, math.Max(0, short), p.j.MeanOutput, batch)
		return lu + su
	}
	usd, _ := cost.EstimateN(p.j.Model, n, p.j.MeanInput, p.j.MeanOutput, batch)
	return usd
}

// eval predicts the job with m requests on batch and the rest on sync.
func (p *planner) eval(m int) candidate {
	c := candidate{m: m, route: RouteSplit}
	switch m {
	case 0:
		c.route = RouteSync
	case p.j.N:
		c.route = RouteBatch
	}
	if n := p.j.N - m; n > 0 {
		s := planSync(p.w, p.lanes, p.j, n)
		c.sync, c.wall = &s, s.wall
	}
	if m > 0 {
		b := planBatch(p.w, m, p.o.Chunk, p.o.Window, p.o.StuckFactor)
		if p.j.Cached.batchActive() {
			b.wall = addRange(b.wall, seedTurnaround(p.w, p.o.Window))
		}
		c.batch, c.wall = &b, maxRange(c.wall, b.wall)
	}
	c.cost = p.costOf(p.j.N-m, false) + p.costOf(m, true)
	return c
}

// syncMid and batchMid are the central wall-clocks, in seconds, of n
// requests on each route: what the split searches compare.
func (p *planner) syncMid(n int) float64 {
	if n <= 0 {
		return 0
	}
	return planSync(p.w, p.lanes, p.j, n).wall.Mid.Seconds()
}

func (p *planner) batchMid(m int) float64 {
	if m <= 0 {
		return 0
	}
	orgs := batchOrgs(p.w)
	c := p.o.Chunk
	if c <= 0 {
		c = chunkFor(m, orgs)
	}
	wall := layout(m, c, p.o.Window, orgs, p.w.poll()).simulate(1, 1).End + p.w.BatchOverhead
	if p.j.Cached.batchActive() {
		wall += seedTurnaround(p.w, p.o.Window).Mid
	}
	return wall.Seconds()
}

// balancePoint is the batch share that makes both halves of a split end
// together: the split the latency priority wants. ok is false when no
// split is possible.
func (p *planner) balancePoint() (int, bool) {
	lo, hi := p.o.MinBatch, p.j.N-1
	if hi < lo {
		return 0, false
	}
	g := func(m int) bool { return p.batchMid(m) >= p.syncMid(p.j.N-m) }
	if g(lo) {
		return lo, true
	}
	if !g(hi) {
		return hi, true
	}
	for hi-lo > 1 { // g(lo) false, g(hi) true
		mid := lo + (hi-lo)/2
		if g(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	// The better of the last m whose batch part ends first and the first
	// whose sync part does.
	if math.Max(p.batchMid(lo), p.syncMid(p.j.N-lo)) < math.Max(p.batchMid(hi), p.syncMid(p.j.N-hi)) {
		return lo, true
	}
	return hi, true
}

// deadlinePoint is the largest batch share whose both halves meet the
// deadline: the cheapest route that does.
func (p *planner) deadlinePoint() (int, bool) {
	d := p.o.Deadline.Seconds()
	lo, hi := p.o.MinBatch, p.j.N
	if hi < lo || p.batchMid(lo) > d {
		return 0, false
	}
	if p.batchMid(hi) > d {
		for hi-lo > 1 { // batchMid(lo) ≤ d < batchMid(hi)
			mid := lo + (hi-lo)/2
			if p.batchMid(mid) <= d {
				lo = mid
			} else {
				hi = mid
			}
		}
		hi = lo
	}
	if p.syncMid(p.j.N-hi) > d {
		return 0, false
	}
	return hi, true
}

// objective is what the priority minimizes.
func (p *planner) objective(c candidate) float64 {
	switch p.o.Priority {
	case PreferLatency:
		return c.wall.Mid.Seconds()
	case PreferCost:
		return c.cost
	}
	return c.cost + p.o.ValueOfTime*c.wall.Mid.Hours()
}

// feasible reports whether c meets the deadline and no batch expires.
func (p *planner) feasible(c candidate) bool {
	if c.batch != nil && c.batch.run.Expired > 0 {
		return false
	}
	return p.o.Deadline <= 0 || c.wall.Mid <= p.o.Deadline
}

// choose evaluates the candidates and picks one. It returns the chosen
// candidate, the whole-job sync and batch candidates (batch nil when N <
// MinBatch) and whether the chosen one is feasible.
func (p *planner) choose() (best candidate, syncC candidate, batchC *candidate, ok bool) {
	syncC = p.eval(0)
	cands := []candidate{syncC}
	if p.j.N >= p.o.MinBatch {
		b := p.eval(p.j.N)
		batchC = &b
		cands = append(cands, b)
		if m, ok := p.balancePoint(); ok && m < p.j.N {
			cands = append(cands, p.eval(m))
		}
		if p.o.Deadline > 0 {
			if m, ok := p.deadlinePoint(); ok && m < p.j.N {
				cands = append(cands, p.eval(m))
			}
		}
	}
	// Candidates come simplest first; a later one must beat the best so
	// far by minGain.
	found := false
	for _, c := range cands {
		if !p.feasible(c) {
			continue
		}
		if !found || p.objective(c) < p.objective(best)*(1-minGain) {
			best, found = c, true
		}
	}
	if found {
		return best, syncC, batchC, true
	}
	// Nothing meets the deadline: the fastest route that completes.
	best = syncC
	for _, c := range cands[1:] {
		if (c.batch == nil || c.batch.run.Expired == 0) && c.wall.Mid < best.wall.Mid {
			best = c
		}
	}
	return best, syncC, batchC, false
}

// Decide plans job j in world w for the options o.
func Decide(w World, j Job, o Options) (Decision, error) {
	d, err := decide(w, j, o)
	if err != nil {
		return d, err
	}
	if d.Job.Cached.active() { // as resolved: an unknown model has none
		plain := j
		plain.Cached = CachedPrefix{}
		u, err := decide(w, plain, o)
		if err != nil {
			return d, err
		}
		d.CacheEffect = cacheEffect(d, u)
	}
	d.Crossover, err = Crossover(w, j, o)
	return d, err
}

// decide is Decide without the crossover.
func decide(w World, j Job, o Options) (Decision, error) {
	p, err := newPlanner(w, j, o)
	if err != nil {
		return Decision{}, err
	}
	best, syncC, batchC, ok := p.choose()
	d := Decision{
		World: w.Name, Job: p.j, Priority: p.o.Priority, Deadline: p.o.Deadline,
		Route: best.route, SyncN: p.j.N - best.m, BatchN: best.m,
		Latency:  seconds(p.w.latency(api.PoolOf(p.j.Model)).mean(p.j.MeanOutput)),
		Wall:     best.wall,
		Cost:     best.cost,
		SyncWall: syncC.wall, SyncCost: syncC.cost,
		BatchCost: p.costOf(p.j.N, true),
	}
	if batchC != nil {
		d.BatchWall = batchC.wall
	}
	used := map[string]bool{}
	var binds []string
	if s := best.sync; s != nil {
		d.Lanes, d.SyncRate, d.RampTime, d.LastSend = s.lanes, s.rate, seconds(s.ramp), seconds(s.send)
		for _, l := range s.lanes {
			used[l.Org] = true
		}
		binds = append(binds, s.binding)
	}
	if b := best.batch; b != nil {
		run := b.run
		d.Batch, d.StuckAfter = &run, b.stuck
		for _, o := range run.Orgs {
			used[o.Org] = true
		}
		binds = append(binds, run.Binding)
	}
	for _, o := range w.Orgs {
		if used[o.Name] {
			d.Orgs = append(d.Orgs, o.Name)
		}
	}
	d.Binding = binds[0]
	if len(binds) == 2 {
		d.Binding = "sync: " + binds[0] + "; batch: " + binds[1]
	}
	if _, priced := cost.Price(p.j.Model); !priced {
		// The route is still chosen on the catalog's highest prices (a
		// comparison of routes); no figure is shown as this job's cost.
		d.Unpriced = p.j.Model
	}
	if !ok {
		if p.o.Deadline > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("no route meets the deadline %s: the fastest is chosen", fmtDuration(p.o.Deadline)))
		} else {
			d.Warnings = append(d.Warnings, "every batch route would expire: sync is chosen")
		}
	}
	if p.o.Deadline > 0 && ok && d.Wall.High > p.o.Deadline {
		d.Warnings = append(d.Warnings, fmt.Sprintf("the high end of the prediction (%s) is past the deadline %s", fmtDuration(d.Wall.High), fmtDuration(p.o.Deadline)))
	}
	if b := d.Batch; b != nil {
		if b.Expired > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("%d batches would expire before they end", b.Expired))
		}
		for _, o := range w.Orgs {
			if s := w.batchModel(o).StarveAbove; used[o.Name] && s > 0 && b.Chunk > s {
				d.Warnings = append(d.Warnings, fmt.Sprintf("chunk %d is above %s's starvation size %d: expect a wait of %s before it starts", b.Chunk, o.Name, s, fmtDuration(w.batchModel(o).StarveFor)))
			}
		}
	}
	d.Why = p.why(d, best, batchC)
	return d, nil
}

// Crossover returns the smallest N, to 1 %, at which the priority in o
// sends part or all of a job shaped like j (j.N is ignored) to the batch
// route, or 0 when it never does up to MaxCrossover. It scans N by
// doublings from MinBatch and bisects the first change, so it assumes the
// choice changes once.
func Crossover(w World, j Job, o Options) (int, error) {
	o = o.withDefaults()
	usesBatch := func(n int) (bool, error) {
		j.N = n
		d, err := decide(w, j, o)
		return d.BatchN > 0, err
	}
	lo, hi := 0, 0
	for n := o.MinBatch; n <= MaxCrossover; n *= 2 {
		b, err := usesBatch(n)
		if err != nil {
			return 0, err
		}
		if b {
			hi = n
			break
		}
		lo = n
	}
	if hi == 0 {
		return 0, nil
	}
	if lo == 0 {
		return hi, nil
	}
	for hi-lo > max(1, hi/100) {
		mid := lo + (hi-lo)/2
		b, err := usesBatch(mid)
		if err != nil {
			return 0, err
		}
		if b {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// why is the decision's paragraph.
func (p *planner) why(d Decision, best candidate, batchC *candidate) string {
	var b strings.Builder
	n := d.Job.N
	switch d.Route {
	case RouteSync:
		fmt.Fprintf(&b, "Sync: %s requests on %s.", fmtInt(n), orgList(d.Orgs))
	case RouteBatch:
		fmt.Fprintf(&b, "Batch: %s requests on %s.", fmtInt(n), orgList(d.Orgs))
	case RouteSplit:
		how := "both halves are predicted to end together"
		if s, bt := best.sync.wall.Mid.Seconds(), best.batch.wall.Mid.Seconds(); math.Abs(s-bt) > 0.05*math.Max(s, bt) {
			how = "the batch share is the most that batch finishes within the deadline"
		}
		fmt.Fprintf(&b, "Split: %s requests (%.0f%%) to batch, %s to sync, on %s; %s.",
			fmtInt(d.BatchN), 100*float64(d.BatchN)/float64(n), fmtInt(d.SyncN), orgList(d.Orgs), how)
	}
	if len(d.Lanes) > 0 {
		l := d.Lanes[0]
		fmt.Fprintf(&b, " Sync lanes ramp from %d toward their cap of %d for %s and then send %s requests/s in total, bound by %s (mean latency %s).",
			l.Start, l.Cap, fmtDuration(d.RampTime), fmtRate(d.SyncRate), laneBindings(d.Lanes), fmtDuration(d.Latency))
	}
	if r := d.Batch; r != nil {
		part := "the batch part"
		if d.Route == RouteBatch {
			part = "the job"
		}
		fmt.Fprintf(&b, " Batches of %s requests, at most %d in flight per organization; %s ends in about %s, bound by %s; a batch with no end %s after its create is stuck.",
			fmtInt(r.Chunk), r.Orgs[0].Window, part, fmtDuration(r.End+p.w.BatchOverhead), r.Binding, fmtDuration(d.StuckAfter))
	}
	alt := func() string {
		s := fmt.Sprintf("the whole job on sync: %s for %s", fmtDuration(d.SyncWall.Mid), d.FormatCost(d.SyncCost))
		if batchC != nil {
			s += fmt.Sprintf("; on batch: %s for %s", fmtDuration(d.BatchWall.Mid), d.FormatCost(d.BatchCost))
		}
		return s
	}()
	switch d.Priority {
	case PreferLatency:
		fmt.Fprintf(&b, " Latency priority takes the least predicted wall-clock (%s).", alt)
	case PreferCost:
		fmt.Fprintf(&b, " Cost priority takes the cheapest route that meets the deadline (%s).", alt)
	case PreferBalanced:
		fmt.Fprintf(&b, " Balanced priority minimizes cost + $%g per hour of wall-clock (%s).", p.o.ValueOfTime, alt)
	}
	if batchC == nil {
		fmt.Fprintf(&b, " Fewer than %d requests are not worth a batch queue.", p.o.MinBatch)
	} else if batchC.batch.run.Expired > 0 {
		fmt.Fprintf(&b, " Batches of %s requests would expire before they end, which rules the batch route out.", fmtInt(batchC.batch.run.Chunk))
	} else if p.o.Deadline > 0 && d.BatchWall.Mid > p.o.Deadline {
		fmt.Fprintf(&b, " The deadline of %s rules the batch route out.", fmtDuration(p.o.Deadline))
	}
	return b.String()
}

// laneBindings names what binds the lanes, with counts when they differ.
func laneBindings(ls []Lane) string {
	count := map[string]int{}
	var order []string
	for _, l := range ls {
		if count[l.Binding] == 0 {
			order = append(order, l.Binding)
		}
		count[l.Binding]++
	}
	if len(order) == 1 {
		if len(ls) == 1 {
			return "its " + order[0]
		}
		return "each one's " + order[0]
	}
	parts := make([]string, len(order))
	for i, b := range order {
		parts[i] = fmt.Sprintf("%s on %d", b, count[b])
	}
	return strings.Join(parts, ", ")
}

func orgList(orgs []string) string {
	if len(orgs) == 1 {
		return "1 organization (" + orgs[0] + ")"
	}
	return fmt.Sprintf("%d organizations (%s)", len(orgs), strings.Join(orgs, ", "))
}
