package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/see/guideplot"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// planFlags are the inputs of `sluice plan`.
type planFlags struct {
	cachePrefix string
	n           int
	model       string
	preset      string
	limitsFile  string
	simConfig   string
	in, out     float64
	maxTokens   int
	input       string
	prefer      string
	deadline    time.Duration
	valueOfTime float64
	chunk       int
	window      int
	caps        map[api.Family]*int
	reserve     float64
	asJSON      bool
	// With keys (and no --preset, --sim-config or --limits-file) the
	// world is the keys' organizations as observed, probed if never seen.
	eng          engineFlags
	observations string
	noProbe      bool
}

func planCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Predict wall-clock and cost on the sync and batch routes, and pick one",
		Long: `plan predicts how long a job takes and what it costs on the sync route (the
dispatch engine), on the batch route (Message Batches, half price) and split
between them, and picks a route for a priority:

  latency   the least predicted wall-clock (a split when both routes together
            finish sooner)
  cost      the cheapest route that meets --deadline (batch, unless the job
            has fewer than 100 requests)
  balanced  the least cost + --value-of-time per hour of wall-clock

The world is your own organizations when keys are found (the environment,
.env or --keys-file) and no world is named: what earlier runs observed of each
(limits, latency, answer lengths; --observations, docs/observe.md), and for an
organization never seen one max_tokens-1 probe that reads its limits (a
fraction of a cent; --no-probe refuses it and plans that organization from the
etiquette caps). The output says where every figure came from. Otherwise the
world is a simulator preset (--preset, default three-org), a simulator config
(--sim-config, over the preset) or your own limits (--limits-file, see
docs/plan.md). The job's shape comes from --in/--out/--max-tokens or is
measured from a requests file (--input). With a named world nothing is sent
to the API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			restoreModels, err := useCatalog(f.eng.models)
			if err != nil {
				return err
			}
			defer restoreModels()
			j, err := f.job(cmd)
			if err != nil {
				return err
			}
			w, prov, err := f.world(cmd, j)
			if err != nil {
				return err
			}
			for _, line := range prov {
				fmt.Fprintln(cmd.ErrOrStderr(), "plan: "+line)
			}
			if j.Cached, err = f.cached(j, len(w.Orgs)); err != nil {
				return err
			}
			pr, err := plan.ParsePriority(f.prefer)
			if err != nil {
				return err
			}
			d, err := plan.Decide(w, j, plan.Options{
				Priority: pr, Deadline: f.deadline, ValueOfTime: f.valueOfTime, Chunk: f.chunk, Window: f.window,
			})
			if err != nil {
				return err
			}
			if f.asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(toDecisionJSON(d))
			}
			return d.WriteText(cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.n, "n", 0, "number of requests (default with --input: its valid lines)")
	fl.StringVar(&f.model, "model", "", "model id or alias (default with --input: its most common model, else claude-sonnet-4-5-20250929)")
	fl.StringVar(&f.preset, "preset", sim.PresetThreeOrg, "simulator preset whose limits to plan for: "+fmt.Sprint(sim.PresetNames()))
	fl.StringVar(&f.simConfig, "sim-config", "", "simulator config file (as for sluice sim --config), over --preset")
	fl.StringVar(&f.limitsFile, "limits-file", "", "JSON file of your organizations' limits (instead of a preset; see docs/plan.md)")
	fl.Float64Var(&f.in, "in", 0, fmt.Sprintf("mean input tokens per request (default %d, or measured from --input)", plan.JudgeMeanInput))
	fl.Float64Var(&f.out, "out", 0, "mean output tokens per request (default: the world's answer model at --max-tokens)")
	fl.IntVar(&f.maxTokens, "max-tokens", 0, fmt.Sprintf("max_tokens per request (default %d, or measured from --input)", plan.JudgeMaxTokens))
	fl.StringVar(&f.input, "input", "", "requests file (Message Batches JSONL) to measure N, model and token shape from")
	fl.StringVar(&f.cachePrefix, "cache-prefix", "auto", "as for sluice run: auto counts what the prompt cache spares the shared prefixes of --input on sync, batch on both routes, off plans it as written")
	fl.StringVar(&f.prefer, "prefer", string(plan.PreferLatency), "priority: latency, cost or balanced (the default, as for sluice run)")
	fl.DurationVar(&f.deadline, "deadline", 0, "rule out routes predicted to take longer (e.g. 6h)")
	fl.Float64Var(&f.valueOfTime, "value-of-time", plan.DefaultValueOfTime, "USD per hour of wall-clock, for --prefer balanced")
	fl.IntVar(&f.chunk, "chunk", 0, "force the requests per batch (default: the planner's rule)")
	fl.IntVar(&f.window, "window", 0, "force the batches in flight per organization (default: the planner's rule)")
	f.caps = map[api.Family]*int{}
	for _, fam := range []api.Family{api.FamilySonnet, api.FamilyHaiku, api.FamilyOpus, api.FamilyUnknown} {
		v := new(int)
		def := plan.DefaultCaps[fam]
		if e, ok := os.LookupEnv("SLUICE_CAP_" + strings.ToUpper(string(fam))); ok {
			if n, err := strconv.Atoi(e); err == nil && n > 0 {
				def = n
			}
		}
		fl.IntVar(v, "cap-"+string(fam), def, fmt.Sprintf("concurrency cap per organization for %s models (env SLUICE_CAP_%s)", fam, strings.ToUpper(string(fam))))
		f.caps[fam] = v
	}
	fl.Float64Var(&f.reserve, "reserve", plan.DefaultReserve, "fraction of every rate limit left for colleagues")
	fl.BoolVar(&f.asJSON, "json", false, "print the decision as JSON")
	f.eng.registerAPI(fl)
	registerObserveFlags(fl, &f.observations, &f.noProbe)
	return cmd
}

// world builds the world for job j — the keys' organizations, the
// preset, simulator config or limits file — with the engine flags
// applied, and says where its figures came from.
func (f *planFlags) world(cmd *cobra.Command, j plan.Job) (plan.World, []string, error) {
	var prov []string
	if named := f.limitsFile != "" || f.simConfig != "" || cmd.Flags().Changed("preset"); !named {
		w, kprov, err := f.keysWorld(cmd, j)
		if !errors.Is(err, keys.ErrNoKeys) {
			return w, kprov, err
		}
		prov = []string{"no API key found: planning for the simulator preset " + f.preset + " (set ANTHROPIC_API_KEY, or pass --keys-file, to plan for your own organizations)"}
	}
	w, err := f.namedWorld(cmd)
	return w, prov, err
}

// keysWorld is the world of the keys' organizations (docs/observe.md):
// their organizations discovered by a free count_tokens probe, then
// observe.ForKeys. An error wrapping keys.ErrNoKeys: no key was found.
func (f *planFlags) keysWorld(cmd *cobra.Command, j plan.Job) (plan.World, []string, error) {
	log := newLogger()
	pool, err := f.eng.loadKeys(log)
	if err != nil {
		return plan.World{}, nil, err
	}
	c, err := f.eng.client(8)
	if err != nil {
		return plan.World{}, nil, err
	}
	model := j.Model // job() gives the default
	if _, err := dispatch.Discover(cmd.Context(), c, pool.Keys(), model); err != nil {
		return plan.World{}, nil, fmt.Errorf("plan: %w", err)
	}
	// The engine flags first, so the provenance names the caps in force.
	base := f.engine(cmd, plan.NewWorld("your organizations"))
	w, prov, err := observe.ForKeys(cmd.Context(), observe.WorldOptions{Base: &base, Path: f.observations,
		Keys: pool.Keys(), Client: c, NoProbe: f.noProbe, Model: model, MaxTokens: j.MaxTokens, Log: log})
	return w, prov, err
}

// namedWorld is the world of --limits-file, --sim-config or --preset,
// with the engine flags applied.
func (f *planFlags) namedWorld(cmd *cobra.Command) (plan.World, error) {
	var w plan.World
	switch {
	case f.limitsFile != "" && (f.simConfig != "" || cmd.Flags().Changed("preset")):
		return w, errors.New("plan: --limits-file replaces --preset and --sim-config; give one")
	case f.limitsFile != "":
		fh, err := os.Open(f.limitsFile)
		if err != nil {
			return w, err
		}
		defer fh.Close()
		if w, err = plan.ReadWorld(fh); err != nil {
			return w, err
		}
	default:
		cfg, err := sim.Preset(f.preset)
		if err != nil {
			return w, err
		}
		name := f.preset
		if f.simConfig != "" {
			if cfg, err = sim.LoadConfig(f.simConfig, cfg); err != nil {
				return w, err
			}
			name = filepath.Base(f.simConfig)
		}
		w = plan.FromModel(cfg.Model(), nil)
		w.Name = name
	}
	w = f.engine(cmd, w)
	return w, w.Validate()
}

// engine applies the engine flags (caps, reserve) to w.
func (f *planFlags) engine(cmd *cobra.Command, w plan.World) plan.World {
	// Engine flags override the world only when given (or set in the
	// environment), so a limits file's own values stand.
	fl := cmd.Flags()
	for fam, v := range f.caps {
		_, env := os.LookupEnv("SLUICE_CAP_" + strings.ToUpper(string(fam)))
		if fl.Changed("cap-"+string(fam)) || env {
			w.Caps[fam] = *v
			if fam == api.FamilyUnknown {
				w.Caps[api.FamilyFable] = *v
			}
		}
	}
	if fl.Changed("reserve") {
		w.Reserve = max(f.reserve, 0)
	}
	return w
}

// cached is what the prompt cache spares the job of --input over orgs
// organizations, as `sluice run --cache-prefix auto` would cache it: the
// file's shared prefixes, surveyed as the run surveys them (every valid
// line counts as pending).
func (f *planFlags) cached(j plan.Job, orgs int) (plan.CachedPrefix, error) {
	off, batch, err := cachePrefixMode(f.cachePrefix)
	if err != nil {
		return plan.CachedPrefix{}, fmt.Errorf("plan: %w", err)
	}
	if off {
		return plan.CachedPrefix{}, nil
	}
	if f.input == "" {
		return plan.CachedPrefix{}, nil
	}
	file, err := os.Open(f.input)
	if err != nil {
		return plan.CachedPrefix{}, fmt.Errorf("plan: %w", err)
	}
	defer file.Close()
	r := jsonl.NewReader(file)
	var v jsonl.Validator
	valid := 0
	var readErr error
	s := cacheprefix.SurveyLines(func() ([]byte, string, bool) {
		for {
			line, n, err := r.Next()
			if err != nil {
				if err != io.EOF {
					readErr = err
				}
				return nil, "", false
			}
			if info, err := v.CheckShared(n, line); err == nil {
				valid++
				return info.Params, info.Model, true
			}
		}
	}, api.CacheMinimums)
	if readErr != nil {
		return plan.CachedPrefix{}, fmt.Errorf("plan: %s: %w", f.input, readErr)
	}
	var onBatch cacheprefix.Reach // auto: the batch route goes as written
	if batch {
		onBatch = s.Reach(plan.BatchSharers(orgs))
	}
	c := route.CachedOf(s.Reach(cacheprefix.Sharers(orgs)), onBatch, valid, j.MeanInput)
	return c, nil
}

// firstErrors lists the first invalid lines, one per line.
func firstErrors(errs []jsonl.LineError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  %v", e)
	}
	return b.String()
}

// job builds the job's shape from the flags and, with --input, the file.
func (f *planFlags) job(cmd *cobra.Command) (plan.Job, error) {
	j := plan.Job{N: f.n, Model: f.model, MeanInput: f.in, MeanOutput: f.out, MaxTokens: f.maxTokens}
	if f.input != "" {
		// Checked as sluice run checks them: against what the API
		// version sent, and each line's model, refuse.
		sum, errs, err := jsonl.ScanFileVersion(f.input, f.eng.version, 3)
		if err != nil {
			return j, err
		}
		if sum.Valid == 0 {
			return j, fmt.Errorf("plan: %s has no valid request lines (API version %s)%s", f.input, f.eng.version, firstErrors(errs))
		}
		if sum.Invalid > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "plan: %d invalid lines in %s (API version %s) are left out of the shape; sluice run stops at them (or skips them with --skip-invalid)%s\n",
				sum.Invalid, f.input, f.eng.version, firstErrors(errs))
		}
		if j.N == 0 {
			j.N = sum.Valid
		}
		if j.Model == "" {
			j.Model = mostCommon(sum.Models)
			if len(sum.Models) > 1 {
				fmt.Fprintf(cmd.ErrOrStderr(), "plan: %s uses %d models; planning for the most common, %s\n", f.input, len(sum.Models), j.Model)
			}
		}
		if j.MeanInput == 0 {
			j.MeanInput = sum.MeanEstInputTokens()
			// The lines over their model's long-context threshold are
			// priced in their band, not in the mean's.
			share, mean := sum.LongShare()
			j.Long = plan.LongPart{Share: share, MeanInput: mean}
		}
		if j.MaxTokens == 0 {
			j.MaxTokens = int(sum.MeanMaxTokens() + 0.5)
		}
	}
	if j.Model == "" {
		j.Model = "claude-sonnet-4-5-20250929"
	}
	if j.MeanInput == 0 {
		j.MeanInput = plan.JudgeMeanInput
	}
	if j.MaxTokens == 0 && j.MeanOutput == 0 {
		j.MaxTokens = plan.JudgeMaxTokens
	}
	if j.N == 0 {
		return j, errors.New("plan: give --n or --input")
	}
	return j, nil
}

// mostCommon returns the key with the largest count, the first by name on
// ties.
func mostCommon(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	best := ""
	for _, k := range names {
		if best == "" || m[k] > m[best] {
			best = k
		}
	}
	return best
}

// The JSON form of a decision: durations in seconds.
type (
	rangeJSON struct {
		Low  float64 `json:"low_s"`
		Mid  float64 `json:"mid_s"`
		High float64 `json:"high_s"`
	}
	laneJSON struct {
		Org     string  `json:"org"`
		Cap     int     `json:"cap"`
		Start   int     `json:"start"`
		Peak    int     `json:"peak"`
		Steady  int     `json:"steady"`
		Rate    float64 `json:"rate_per_s"`
		Binding string  `json:"binding"`
	}
	batchOrgJSON struct {
		Org      string  `json:"org"`
		Requests int     `json:"requests"`
		Batches  int     `json:"batches"`
		Window   int     `json:"window"`
		End      float64 `json:"end_s"`
	}
	batchJSON struct {
		Chunk      int            `json:"chunk"`
		Orgs       []batchOrgJSON `json:"orgs"`
		StuckAfter float64        `json:"stuck_after_s"`
		Binding    string         `json:"binding"`
	}
	decisionJSON struct {
		World      string     `json:"world"`
		N          int        `json:"n"`
		Model      string     `json:"model"`
		MeanInput  float64    `json:"mean_input_tokens"`
		MeanOutput float64    `json:"mean_output_tokens"`
		MaxTokens  int        `json:"max_tokens,omitempty"`
		Priority   string     `json:"priority"`
		Deadline   float64    `json:"deadline_s,omitempty"`
		Route      string     `json:"route"`
		SyncN      int        `json:"sync_n"`
		BatchN     int        `json:"batch_n"`
		Orgs       []string   `json:"orgs"`
		Lanes      []laneJSON `json:"lanes,omitempty"`
		SyncRate   float64    `json:"sync_rate_per_s,omitempty"`
		RampTime   float64    `json:"ramp_s,omitempty"`
		Latency    float64    `json:"latency_s"`
		Batch      *batchJSON `json:"batch,omitempty"`
		Wall       rangeJSON  `json:"wall"`
		// The costs are null for a model without a price (Unpriced
		// names it): unknown, never a guess.
		Cost      *float64   `json:"cost_usd"`
		Unpriced  string     `json:"unpriced_model,omitempty"`
		SyncWall  rangeJSON  `json:"sync_wall"`
		SyncCost  *float64   `json:"sync_cost_usd"`
		BatchWall *rangeJSON `json:"batch_wall,omitempty"`
		BatchCost *float64   `json:"batch_cost_usd"`
		Binding   string     `json:"binding"`
		Crossover int        `json:"crossover_n"`
		Why       string     `json:"why"`
		// CachedShare, CachedTokens and CacheEffect: the prompt cache's
		// part (--cache-prefix auto with --input).
		CachedShare  float64  `json:"cached_share,omitempty"`
		CachedTokens float64  `json:"cached_prefix_tokens,omitempty"`
		CacheEffect  string   `json:"cache_effect,omitempty"`
		Warnings     []string `json:"warnings,omitempty"`
	}
)

func toRange(r plan.Range) rangeJSON {
	return rangeJSON{Low: r.Low.Seconds(), Mid: r.Mid.Seconds(), High: r.High.Seconds()}
}

func toDecisionJSON(d plan.Decision) decisionJSON {
	v := decisionJSON{
		World: d.World, N: d.Job.N, Model: d.Job.Model, MeanInput: d.Job.MeanInput, MeanOutput: d.Job.MeanOutput, MaxTokens: d.Job.MaxTokens,
		Priority: string(d.Priority), Deadline: d.Deadline.Seconds(), Route: string(d.Route), SyncN: d.SyncN, BatchN: d.BatchN,
		Orgs: d.Orgs, SyncRate: d.SyncRate, RampTime: d.RampTime.Seconds(), Latency: d.Latency.Seconds(),
		Wall: toRange(d.Wall), SyncWall: toRange(d.SyncWall), Unpriced: d.Unpriced,
		Binding: d.Binding, Crossover: d.Crossover, Why: d.Why, Warnings: d.Warnings,
		CachedShare: d.Job.Cached.Share, CachedTokens: d.Job.Cached.Tokens, CacheEffect: d.CacheEffect,
	}
	if d.Unpriced == "" {
		v.Cost, v.SyncCost, v.BatchCost = &d.Cost, &d.SyncCost, &d.BatchCost
	}
	for _, l := range d.Lanes {
		v.Lanes = append(v.Lanes, laneJSON{l.Org, l.Cap, l.Start, l.Peak, l.Steady, l.Rate, l.Binding})
	}
	if d.BatchWall.Mid > 0 {
		r := toRange(d.BatchWall)
		v.BatchWall = &r
	}
	if b := d.Batch; b != nil {
		bj := &batchJSON{Chunk: b.Chunk, StuckAfter: d.StuckAfter.Seconds(), Binding: b.Binding}
		for _, o := range b.Orgs {
			bj.Orgs = append(bj.Orgs, batchOrgJSON{o.Org, o.Requests, o.Batches, o.Window, o.End.Seconds()})
		}
		v.Batch = bj
	}
	return v
}

func guidelinesCmd() *cobra.Command {
	var (
		out          string
		check        bool
		fromObs      bool
		observations string
	)
	cmd := &cobra.Command{
		Use:   "guidelines",
		Short: "Regenerate docs/guidelines.md: the route decision table, crossover N and plot",
		Long: `guidelines writes the decision table (N × model × priority, for the three-org
preset and one Scale-tier key), the crossover N per model and the plot of
wall-clock and cost versus N (` + plan.GuidelinesPlot + `, beside the page). The output
depends only on the code, so a test fails when the committed page is stale.
With --check it writes nothing and fails if the files differ.

With --from-observations it writes the same decision tables and crossover N
for your own organizations instead — every organization the observations
file holds (what earlier runs, judges, proxies and probes saw: limits,
latency, answer lengths) — and says which figures were observed, when, and
which are the planner's defaults. It writes to stdout unless --out is given,
and never touches the committed page.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromObs {
				return observedGuidelines(cmd, observations, out, cmd.Flags().Changed("out"))
			}
			md, plot, err := plan.Guidelines(sim.PresetModel)
			if err != nil {
				return err
			}
			svg, err := guideplot.SVG(plot)
			if err != nil {
				return err
			}
			files := []struct {
				path string
				data []byte
			}{{out, md}, {filepath.Join(filepath.Dir(out), plan.GuidelinesPlot), svg}}
			for _, fl := range files {
				if check {
					have, err := os.ReadFile(fl.path)
					if err != nil {
						return err
					}
					if !bytes.Equal(have, fl.data) {
						return &exitError{code: 1, err: fmt.Errorf("guidelines: %s is stale; run sluice guidelines --out %s", fl.path, out)}
					}
					continue
				}
				if err := writeFileAtomic(fl.path, fl.data); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)\n", fl.path, len(fl.data))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", filepath.Join("docs", "guidelines.md"), "where to write the page (the plot goes beside it)")
	cmd.Flags().BoolVar(&check, "check", false, "write nothing; fail if the files differ from what would be written")
	cmd.Flags().BoolVar(&fromObs, "from-observations", false, "tabulate your own organizations, from the observations file, instead of the presets (stdout unless --out)")
	cmd.Flags().StringVar(&observations, "observations", observe.DefaultPath(), "the observations file --from-observations reads (env SLUICE_OBSERVATIONS)")
	return cmd
}

// observedGuidelines is `sluice guidelines --from-observations`.
func observedGuidelines(cmd *cobra.Command, path, out string, toFile bool) error {
	now := time.Now()
	f, err := observe.Load(path, now)
	if err != nil {
		return err
	}
	if len(f.Orgs) == 0 {
		return fmt.Errorf("guidelines: %s holds no observations (missing, or older than %s): a run, judge or proxy records them as it ends, and `sluice plan` with keys probes them", path, observe.MaxAge)
	}
	md, err := plan.ObservedGuidelines("`"+path+"`", "as of "+now.UTC().Format("2006-01-02 15:04 UTC"),
		observe.ModelWorlds(f, plan.GuidelineModels(), plan.JudgeMaxTokens, now))
	if err != nil {
		return err
	}
	if !toFile {
		_, err := cmd.OutOrStdout().Write(md)
		return err
	}
	if err := writeFileAtomic(out, md); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)\n", out, len(md))
	return nil
}

// writeFileAtomic writes data to path whole (atomicfile.Write), so a
// reader never sees half a page.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error { _, err := w.Write(data); return err })
}
