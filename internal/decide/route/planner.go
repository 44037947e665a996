package route

// The planner hook: the planner's decision for a surveyed input, as a
// Routing. `sluice run`, `sluice judge`, the demo, the benchmarks and the
// proxy's virtual batches share it, so they all route a job the same way.

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
)

// Options are a run's routing choices (the command's --route, --prefer,
// --deadline, --chunk, --window and --stuck-after).
type Options struct {
	// Route is auto (the planner decides), sync or batch.
	Route string
	// Prefer is what auto optimises: latency, cost or balanced.
	Prefer     string
	Deadline   time.Duration
	Chunk      int
	Window     int
	StuckAfter time.Duration
	// TimeScale is the simulator's (0 or 1 against the real API): the
	// batch path's poll intervals and the stuck floor run on its clock.
	TimeScale float64
	// World returns the planner's view of the organizations for the job
	// (its model and token shape: what a probe of the organizations asks
	// about); called once, when the run has surveyed its input.
	World func(plan.Job) (plan.World, error)
	Log   *slog.Logger
	// OnDecision, if set, sees the planner's decision (benchmarks report
	// it beside the measurement).
	OnDecision func(plan.Decision)
	// Now reads the clock a Deadline counts from (default time.Now).
	Now func() time.Time
}

// Planner returns the hook that routes a surveyed input for o
// (job.Options.Plan, proxy.Config.Plan): NewRouter(o).Route.
func Planner(o Options) func(jsonl.Summary, int) (Routing, error) {
	return NewRouter(o).Route
}

// Router makes a run's routing decisions: the first, for the surveyed
// input (Route), and, on `--route auto`, the re-plans from what the run
// measures (Replan; docs/route.md, "Re-planning mid-run"). One Router
// serves one run; its methods are safe for concurrent use.
type Router struct {
	o      Options
	scaled func(time.Duration) time.Duration
	k      float64

	mu       sync.Mutex
	decided  bool
	world    plan.World // the first plan's
	job      plan.Job
	started  time.Time
	decision plan.Decision // the plan in force
	routing  Routing
	// prior is the decision and routing a route change replaced, kept
	// until the run applies the change or refuses it (Refused).
	prior   *applied
	noBatch bool // the run refused a route with batch in it (Refused)
	replans int  // re-plans that changed the route
	checks  int  // every re-plan, kept routes included
	first   bool // the first-answers re-plan has run
	off     int  // consecutive checks with the sync rate more than replanOff away
	since   time.Time
	history []ratePoint
}

// applied is a plan in force: its decision and routing.
type applied struct {
	decision plan.Decision
	routing  Routing
}

// ratePoint is the count of sync answers at a time.
type ratePoint struct {
	at time.Time
	n  int64
}

// The re-plan rules (docs/route.md, "Re-planning mid-run").
const (
	// maxReplans bounds the re-plans of one run that change its route.
	maxReplans = 4
	// maxReplanChecks bounds every re-plan, those that keep the route
	// included: they cost nothing but a log line, and must not use up the
	// changes a later collapse of the sync side needs.
	maxReplanChecks = 16
	// replanOff is how far the measured sync rate may stay from the plan's.
	replanOff = 0.2
	// replanShare is how far a split's batch share must move to count as
	// another routing.
	replanShare = 0.1
	// firstAnswersMin is the fewest answers the first re-plan waits for
	// (and at least two per lane), unless firstAnswersWait passes first.
	firstAnswersMin  = 10
	firstAnswersWait = 30 * time.Second
	// rateWindowMin and rateWindowLatencies: the sync rate is measured over
	// at least this long and this many mean latencies.
	rateWindowMin       = 20 * time.Second
	rateWindowLatencies = 10
)

// NewRouter returns the Router for a run with options o.
func NewRouter(o Options) *Router {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	k := o.TimeScale
	if k <= 0 {
		k = 1
	}
	return &Router{o: o, k: k, scaled: func(d time.Duration) time.Duration { return time.Duration(float64(d) / k) }}
}

// JobOf is the planner's job for a surveyed input with pending requests
// to send: its main model, mean estimated input and max_tokens, the part
// over the model's long-context threshold (billed in its own band), and what
// its shared prompt prefixes let the cache spare (s.Prefix, counted over
// the pending requests the survey found sharing one).
func JobOf(s jsonl.Summary, pending int) plan.Job {
	j := plan.Job{N: pending, Model: s.MainModel(), MeanInput: s.MeanEstInputTokens(), MaxTokens: int(s.MeanMaxTokens())}
	j.Cached = CachedOf(s.Prefix, s.BatchPrefix, pending, j.MeanInput)
	share, mean := s.LongShare()
	j.Long = plan.LongPart{Share: share, MeanInput: mean}
	return j
}

// CachedOf is the planner's cached prefix of a job of pending requests
// whose mean estimated input is meanInput, of which sp share one at the
// sync route's threshold and bp at the batch route's: the shares, the mean
// prefixes (part of the input, never more than it), the prefixes.
func CachedOf(sp, bp cacheprefix.Reach, pending int, meanInput float64) plan.CachedPrefix {
	one := func(p cacheprefix.Reach) (share, tokens float64, prefixes int) {
		if p.Requests <= 0 || pending <= 0 {
			return 0, 0, 0
		}
		share, tokens = math.Min(1, float64(p.Requests)/float64(pending)), float64(p.Tokens)/float64(p.Requests)
		if share*tokens > meanInput {
			tokens = meanInput / share
		}
		return share, tokens, max(p.Prefixes, 1)
	}
	var c plan.CachedPrefix
	c.Share, c.Tokens, c.Prefixes = one(sp)
	if c.Share > 0 {
		c.BatchShare, c.BatchTokens, c.BatchPrefixes = one(bp)
		c.BatchShare = math.Min(c.BatchShare, c.Share)
	}
	return c
}

// Route decides the routing of a surveyed input with pending requests to
// send.
func (p *Router) Route(s jsonl.Summary, pending int) (Routing, error) {
	o := p.o
	switch o.Route {
	case "sync":
		return Routing{Route: Sync, Why: "--route sync"}, nil
	case "batch", "auto":
	default:
		return Routing{}, fmt.Errorf("--route must be auto, sync or batch, got %q", o.Route)
	}
	prio, err := plan.ParsePriority(o.Prefer)
	if err != nil {
		return Routing{}, err
	}
	j := JobOf(s, pending)
	w, err := o.World(j)
	if err != nil {
		return Routing{}, err
	}
	opts := plan.Options{Priority: prio, Deadline: o.Deadline, Chunk: o.Chunk, Window: o.Window}
	if o.Route == "batch" {
		opts.MinBatch = 1
	}
	d, err := plan.Decide(w, j, opts)
	if err != nil {
		return Routing{}, err
	}
	for _, warn := range d.Warnings {
		o.Log.Warn("plan: " + warn)
	}
	if o.Route == "batch" && (d.Batch == nil || d.Route != plan.RouteBatch) {
		// The planner would not send it all to batch; size the chunks and
		// the window as it would, or as asked.
		br, err := w.SimulateBatch(pending, o.Chunk, o.Window)
		if err != nil {
			return Routing{}, err
		}
		d.Batch = &br
	}
	r := p.routingFor(d, w, pending)
	if o.Route == "batch" {
		r.Route, r.Why, r.Predicted, r.BatchShare = Batch, "--route batch", d.BatchWall.Mid, 0
		r.PredictedBand = [2]time.Duration{d.BatchWall.Low, d.BatchWall.High}
	}
	if o.OnDecision != nil {
		o.OnDecision(d)
	}
	p.mu.Lock()
	p.decided, p.world, p.job, p.decision, p.routing = true, w, j, d, r
	p.started, p.since = o.Now(), o.Now()
	p.mu.Unlock()
	o.Log.Info("route chosen", "route", r.Route, "predicted", r.Predicted.Round(time.Second), "why", r.Why)
	return r, nil
}

// routingFor turns decision d, made in world w for pending requests, into a
// Routing.
func (p *Router) routingFor(d plan.Decision, w plan.World, pending int) Routing {
	o, k := p.o, p.k
	r := Routing{Route: string(d.Route), Why: d.Why, Predicted: d.Wall.Mid, PredictedBand: [2]time.Duration{d.Wall.Low, d.Wall.High}}
	if d.Route == plan.RouteSync {
		r.SyncOrgs = d.Orgs // a small job needs fewer organizations
	}
	if pending > 0 && r.Route == Split {
		r.BatchShare = float64(d.BatchN) / float64(pending)
	}
	if d.Route == plan.RouteSync && o.Route != "batch" {
		return r
	}
	// The planner's stuck threshold, floored: against the real API a
	// healthy batch may take far longer than its prediction, and a
	// needless escape re-drives it at full price.
	bc := batch.Config{StuckAfter: max(d.StuckAfter, p.scaled(batch.MinStuckAfter))}
	// The batch path polls as the planner modelled it: a world's own
	// schedule (a limits file's poll_min/poll_max, or a simulator's,
	// scaled), else the defaults on the simulator's clock.
	switch pl := w.Poll; {
	case pl.Min > 0 && (pl.Min != plan.DefaultPollMin || pl.Max != plan.DefaultPollMax):
		bc.PollMin, bc.PollMax = pl.Min, pl.Max
	case k != 1:
		bc.PollMin, bc.PollMax = p.scaled(batch.DefaultPollMin), p.scaled(batch.DefaultPollMax)
	}
	if d.Batch != nil {
		bc.ChunkSize, bc.WindowByOrg, bc.Turnaround = d.Batch.Chunk, d.Batch.WindowByOrg(), d.Batch.MaxTurnaround
		bc.WindowPerOrg = d.Batch.MinWindowRequests()
	}
	if o.StuckAfter != 0 {
		bc.StuckAfter = o.StuckAfter
	}
	if o.Deadline > 0 {
		bc.Deadline = p.started.Add(o.Deadline)
		if p.started.IsZero() {
			bc.Deadline = o.Now().Add(o.Deadline)
		}
	}
	r.Batch = bc
	return r
}

// Measure is what a run hands Replan about once a second.
type Measure struct {
	// At is now, on the Router's clock (Options.Now).
	At time.Time
	// Lanes are the dispatcher's lanes now (Dispatcher.Snapshot).
	Lanes []dispatch.LaneView
	// Unsent counts the pending requests no side has taken yet.
	Unsent int
	// SyncAnswered counts the sync answers of this run so far.
	SyncAnswered int64
	// SyncBacklog: the sync side still has requests to send (its feeder
	// has not reached the end of the input); a draining queue is not a slow
	// world.
	SyncBacklog bool
}

// Replan re-decides the route of the unsent requests when a rule says it
// is time: the first answers are in, or the measured sync rate stays more
// than 20 % off the plan. It returns the new Routing and true when the
// route changes (the caller applies it with Fanout.Reroute). It never
// re-plans a run whose route was forced, or one not yet routed.
func (p *Router) Replan(m Measure) (Routing, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.o.Route != "auto" || !p.decided || p.replans >= maxReplans || p.checks >= maxReplanChecks || m.Unsent <= 0 {
		return Routing{}, false
	}
	pool := api.PoolOf(p.job.Model)
	var answers int64
	lanes := 0
	latency := time.Duration(0)
	for _, v := range m.Lanes {
		if v.Pool != pool || v.Dead {
			continue
		}
		lanes++
		answers += v.OK
		latency = max(latency, v.State.Latency)
	}
	p.history = append(p.history, ratePoint{m.At, m.SyncAnswered})
	var why string
	efficiency := 0.0
	if !p.first {
		waited := m.At.Sub(p.started) >= p.scaled(firstAnswersWait)
		if answers < int64(max(firstAnswersMin, 2*lanes)) && (answers == 0 || !waited) {
			return Routing{}, false
		}
		p.first = true
		why = fmt.Sprintf("the first %d answers are in", answers)
	} else {
		measured, ok := p.syncRate(m, latency)
		if !ok {
			return Routing{}, false
		}
		expected := p.decision.SyncRate
		if expected <= 0 || math.Abs(measured/expected-1) <= replanOff {
			p.off = 0
			return Routing{}, false
		}
		if p.off++; p.off < 2 {
			return Routing{}, false
		}
		why = fmt.Sprintf("the sync side ran at %.1f req/s, the plan said %.1f", measured, expected)
		efficiency = measured
	}
	p.checks++
	p.off = 0
	p.since = m.At
	p.history = p.history[:0]
	return p.replanLocked(m, why, efficiency)
}

// syncRate is the sync answers' rate over the last window, once the
// window since the last re-plan is long enough and the sync side still
// has work.
func (p *Router) syncRate(m Measure, latency time.Duration) (float64, bool) {
	if !m.SyncBacklog || p.decision.SyncN == 0 {
		p.off = 0
		return 0, false
	}
	window := max(p.scaled(rateWindowMin), rateWindowLatencies*latency)
	if m.At.Sub(p.since) < window {
		return 0, false
	}
	// The oldest point inside the window, and history trimmed to it.
	i := 0
	for i < len(p.history)-1 && m.At.Sub(p.history[i+1].at) >= window {
		i++
	}
	p.history = p.history[i:]
	first := p.history[0]
	dt := m.At.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0, false
	}
	return float64(m.SyncAnswered-first.n) / dt, true
}

// replanLocked plans the unsent requests in the world the lanes show;
// measured > 0 is the sync rate measured, which the world then carries as
// its efficiency.
func (p *Router) replanLocked(m Measure, why string, measured float64) (Routing, bool) {
	log := p.o.Log
	w, prov, err := observe.Live(p.world, m.Lanes, p.job.Model, p.job.MaxTokens, m.At)
	if err != nil {
		log.Warn("re-plan skipped", "why", why, "err", err)
		return Routing{}, false
	}
	for _, line := range prov {
		log.Debug("re-plan: " + line)
	}
	j := p.job
	j.N = m.Unsent
	if measured > 0 {
		if model, _, err := w.SyncRate(j); err == nil && model > 0 {
			w.Efficiency = min(max(measured/model, 0.05), 2)
		}
	}
	prio, _ := plan.ParsePriority(p.o.Prefer)
	opts := plan.Options{Priority: prio, Chunk: p.o.Chunk, Window: p.o.Window}
	if p.o.Deadline > 0 {
		opts.Deadline = max(p.o.Deadline-m.At.Sub(p.started), time.Second)
	}
	d, err := plan.Decide(w, j, opts)
	if err != nil {
		log.Warn("re-plan skipped", "why", why, "err", err)
		return Routing{}, false
	}
	if p.noBatch && d.Route != plan.RouteSync {
		// The run refused a move to batch, and would again: the sync plan
		// stays in force, its rate the one the rule compares with.
		log.Info("re-planned: the route stays "+p.routing.Route+" (this run refused a move to batch)", "why", why,
			"unsent", m.Unsent, "would be", string(d.Route))
		return Routing{}, false
	}
	old, oldDecision := p.routing, p.decision
	r := p.routingFor(d, w, m.Unsent)
	p.decision = d
	p.prior = nil
	same := r.Route == old.Route && math.Abs(r.BatchShare-old.BatchShare) <= replanShare
	if same {
		log.Info("re-planned: the route stays "+old.Route, "why", why, "unsent", m.Unsent,
			"predicted", d.Wall.Mid.Round(time.Second), "efficiency", efficiencyText(w.Efficiency))
		return Routing{}, false
	}
	r.Why = fmt.Sprintf("re-planned (%s): %s", why, d.Why)
	p.replans++
	p.routing = r
	p.prior = &applied{decision: oldDecision, routing: old}
	log.Info("re-planned: the route changes", "from", describe(old), "to", describe(r), "why", why,
		"unsent", m.Unsent, "predicted", d.Wall.Mid.Round(time.Second))
	return r, true
}

// Refused tells the Router that the run could not apply r, the routing
// its last Replan returned (Fanout.Reroute refused it: the batch path only
// harvests an earlier run's batches, could not open, or a side it sends to
// has stopped). The plan in force
// before r is in force again — its route and the sync rate the rate rule
// compares with — and r does not count against the run's route changes.
// Without this, a refused move to all-batch would leave a plan with no
// sync share in force, and the rate rule off for the rest of the run.
// Every reason for a refusal lasts the run, so later re-plans that would
// send to batch keep the plan in force instead of proposing it again.
func (p *Router) Refused(r Routing) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prior == nil || p.routing.Why != r.Why || p.routing.Route != r.Route {
		return // not the last change Replan returned
	}
	p.decision, p.routing = p.prior.decision, p.prior.routing
	p.prior = nil
	p.noBatch = r.Route != Sync
	p.replans--
	p.off = 0
}

// describe names a routing: its route, with the batch share of a split.
func describe(r Routing) string {
	if r.Route == Split {
		return fmt.Sprintf("split (%.0f %% batch)", 100*r.BatchShare)
	}
	return r.Route
}

// efficiencyText is a world's measured efficiency for a log line; unset
// (no steady rate measured yet) the planner uses the model's, 1.
func efficiencyText(e float64) string {
	if e <= 0 {
		return "1.00 (modelled)"
	}
	return fmt.Sprintf("%.2f", e)
}
