package job

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/engine/budget"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/lane"
)

// Report is what a run did; --report writes it as JSON.
type Report struct {
	Input       string    `json:"input"`
	Output      string    `json:"output"`
	StartedAt   time.Time `json:"started_at"`
	WallSeconds float64   `json:"wall_seconds"`
	Stopped     string    `json:"stopped,omitempty"`
	// Route chosen (sync, batch, split), why, and the planner's predicted
	// wall-clock for comparison with WallSeconds.
	Route            string  `json:"route"`
	RouteWhy         string  `json:"route_why,omitempty"`
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	// Replans are the re-plans that changed the route mid-run (--route
	// auto), in order: Route is then the first plan's.
	Replans  []ReplanReport `json:"replans,omitempty"`
	Requests struct {
		Total       int `json:"total"`
		Invalid     int `json:"invalid"`
		AlreadyDone int `json:"already_done"`
		Redriven    int `json:"redriven"`
		// FromCache were answered by the response cache (part of Written).
		FromCache int `json:"from_cache"`
		// Written this run, durable.
		Written int `json:"written"`
	} `json:"requests"`
	// Results this run by result type and by class.
	Succeeded int64 `json:"succeeded"`
	Errored   struct {
		Final     int64 `json:"final"`
		Transport int64 `json:"transport"`
	} `json:"errored"`
	ThroughputRPM float64 `json:"throughput_rpm"`
	Retries       struct {
		RateLimited int64 `json:"rate_limited"` // 429 answers
		Overloaded  int64 `json:"overloaded"`   // 529 answers
		Failed      int64 `json:"failed"`       // 5xx answers, lost connections
	} `json:"retries"`
	Lanes        []LaneReport      `json:"lanes"`
	BindingLimit string            `json:"binding_limit"`
	Cost         cost.Snapshot     `json:"cost"`
	Keys         []KeyReport       `json:"keys"`
	Batch        batch.Stats       `json:"batch"`
	Cache        CacheReport       `json:"cache"`
	PromptCache  PromptCacheReport `json:"prompt_cache"`
}

// PromptCacheReport is what the prompt cache did for the run's answers
// (docs/caching.md): tokens read from it (billed at a tenth, and not
// charged to ITPM for current models) and written to it, the requests
// sent with a breakpoint sluice added, and the money the reads and writes
// saved against the same tokens uncached (batch discount included).
type PromptCacheReport struct {
	Added       int64 `json:"breakpoints_added"`
	ReadTokens  int64 `json:"read_tokens"`
	WriteTokens int64 `json:"write_tokens"`
	// ITPMSpared is the sync answers' read tokens of models whose cache
	// reads are not charged to ITPM (all current ones:
	// api.ModelInfo.CacheReadsCountITPM); batches are not charged to ITPM.
	ITPMSpared int64   `json:"itpm_spared_tokens"`
	SavedUSD   float64 `json:"saved_usd"`
	// BatchReadTokens and BatchWriteTokens are the batch answers' share of
	// ReadTokens and WriteTokens: hits in Message Batches are best effort.
	BatchReadTokens  int64 `json:"batch_read_tokens"`
	BatchWriteTokens int64 `json:"batch_write_tokens"`
	// Primers is the sync requests that wrote a prefix into an org's cache
	// right before its batches; their cost is in SavedUSD (taken off) and
	// in the run's cost, their writes in WriteTokens.
	Primers int64 `json:"batch_primers"`
}

// BatchHitRate is the share of the batch answers' cacheable input read
// rather than written.
func (p PromptCacheReport) BatchHitRate() float64 {
	if p.BatchReadTokens+p.BatchWriteTokens == 0 {
		return 0
	}
	return float64(p.BatchReadTokens) / float64(p.BatchReadTokens+p.BatchWriteTokens)
}

// HitRate is the share of cacheable input read rather than written.
func (p PromptCacheReport) HitRate() float64 {
	if p.ReadTokens+p.WriteTokens == 0 {
		return 0
	}
	return float64(p.ReadTokens) / float64(p.ReadTokens+p.WriteTokens)
}

// ReplanReport is one re-plan that changed the route: when, to what, the
// planner's prediction for the requests then unsent, and why.
type ReplanReport struct {
	AtSeconds        float64 `json:"at_seconds"`
	Route            string  `json:"route"`
	BatchShare       float64 `json:"batch_share,omitempty"` // of the requests then unsent, on a split
	PredictedSeconds float64 `json:"predicted_seconds"`
	Why              string  `json:"why"`
}

// CacheReport is the run's use of the response cache.
type CacheReport struct {
	Mode string `json:"mode,omitempty"` // empty: no cache
	Hits int64  `json:"hits"`
	// SavedUSD is what the hits would have cost as sync calls.
	SavedUSD float64 `json:"saved_usd"`
	Stored   int64   `json:"stored"`  // new answers stored
	Refused  int64   `json:"refused"` // non-answers not stored
	Error    string  `json:"error,omitempty"`
}

// LaneReport is one lane's share of the run.
type LaneReport struct {
	Org  string `json:"org"`
	Pool string `json:"pool"`
	// Workspace names the workspace whose lane this is, once its
	// organization's lanes were split by workspace (docs/models.md).
	Workspace    string  `json:"workspace,omitempty"`
	Attempts     int64   `json:"attempts"`
	OK           int64   `json:"ok"`
	Share        float64 `json:"share"` // of all OK answers
	RateLimited  int64   `json:"rate_limited"`
	Overloaded   int64   `json:"overloaded"`
	Failed       int64   `json:"failed"`
	FinalLimit   int     `json:"final_limit"`
	Cap          int     `json:"cap"`
	Dead         bool    `json:"dead"`
	Decreases    int64   `json:"decreases"`
	PausedSecond float64 `json:"paused_seconds"`
	// Refusals counts why the lane said "not now" while work waited (by
	// budget refusal: concurrency, requests, input_tokens, output_tokens).
	Refusals map[string]int64 `json:"refusals"`
	// WaitedSeconds is how long work waited on the lane, by the limit
	// that held it back (lane.Wait names); the binding limit is the
	// largest sum over lanes.
	WaitedSeconds map[string]float64 `json:"waited_seconds,omitempty"`
	MeanLatencyMs int64              `json:"mean_latency_ms"`
	// CacheReadTokens and CacheWriteTokens: the lane's prompt-cache input.
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Explained429 counts the 429s the headers (or the message) put on a
	// bucket, which cut nothing; Acceleration429 those read as an
	// acceleration limit, which held the rate; the rest were congestion
	// episodes.
	Explained429    int64 `json:"explained_429s"`
	Acceleration429 int64 `json:"acceleration_429s,omitempty"`
	// OrgLimited counts the 429s, this lane's or another lane's of its
	// organization, that named the organization's limit across all
	// models: each slowed this lane.
	OrgLimited int64 `json:"org_limited,omitempty"`
	Breaker    int64 `json:"breaker_opens,omitempty"`
	// Buckets are the rate-limit dimensions the lane paced by, each with
	// its per-minute limit and the depth learned from the headers.
	Buckets []BucketReport `json:"buckets,omitempty"`
	// NotVisible names the dimensions whose headers never came: they were
	// governed by 429 feedback alone (a limit a 429's message named is
	// paced at 97 % of it and listed in Buckets as "named").
	NotVisible []string `json:"not_visible,omitempty"`
}

// BucketReport is one rate-limit dimension of a lane.
type BucketReport struct {
	Dim          string  `json:"dim"`
	LimitPerMin  float64 `json:"limit_per_minute"`
	DepthSeconds float64 `json:"depth_seconds"` // the learned depth, in seconds of refill
	From         string  `json:"from"`          // "headers" or "named" (a 429's message only)
}

// KeyReport is one key, by label and last four characters only.
type KeyReport struct {
	Label string `json:"label"`
	Last4 string `json:"last4"`
	Org   string `json:"org"`
	// Workspace is the workspace the key's calls are charged to: the
	// anthropic-workspace-id its answers name, else the one it sends.
	Workspace string `json:"workspace,omitempty"`
	Dead      bool   `json:"dead"`
	// Suspect: refused lately (401/403) and not yet answered again nor
	// dead; a live key's suspicion is not a fault of the run.
	Suspect bool   `json:"suspect,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// batchCounts counts the batch path's answers by class.
type batchCounts struct{ ok, final, transport atomic.Int64 }

func (b *batchCounts) add(class string) {
	switch class {
	case api.ClassOK:
		b.ok.Add(1)
	case api.ClassFinal:
		b.final.Add(1)
	case api.ClassTransport:
		b.transport.Add(1)
	}
}

// finish fills in the run's results: the dispatcher's and the batch
// path's (b) answers by class, the lanes, the cost.
func (r *Report) finish(d *dispatch.Dispatcher, b *batchCounts, l *cost.Ledger, written int64, wall time.Duration) {
	r.WallSeconds = wall.Seconds()
	r.Requests.Written = int(written)
	st, lanes := d.Snapshot()
	r.Succeeded = st.OK + b.ok.Load()
	r.Errored.Final, r.Errored.Transport = st.Final+b.final.Load(), st.Transport+b.transport.Load()
	r.Retries.RateLimited, r.Retries.Overloaded, r.Retries.Failed = st.RetriesRateLimited, st.RetriesOverloaded, st.RetriesFailed
	if wall > 0 {
		r.ThroughputRPM = float64(r.Succeeded+r.Errored.Final+r.Errored.Transport) / wall.Minutes()
	}
	waited := map[string]time.Duration{}
	for _, v := range lanes {
		lr := LaneReport{
			Org: v.Org, Pool: string(v.Pool), Workspace: v.Workspace, Attempts: v.Attempts, OK: v.OK,
			RateLimited: v.RateLimited, Overloaded: v.Overloaded, Failed: v.Failed,
			FinalLimit: v.State.Limit, Cap: v.State.Cap, Dead: v.Dead,
			Decreases: v.State.Stats.Decreases, PausedSecond: v.State.Stats.PausedTime.Seconds(),
			Refusals: map[string]int64{}, MeanLatencyMs: v.State.Latency.Milliseconds(),
			CacheReadTokens: v.CacheReadTokens, CacheWriteTokens: v.CacheWriteTokens,
		}
		if st.OK > 0 {
			lr.Share = float64(v.OK) / float64(st.OK)
		}
		lr.Explained429, lr.Breaker, lr.OrgLimited = v.State.Stats.Explained, v.State.Stats.Breaker, v.State.Stats.OrgLimited
		lr.Acceleration429 = v.State.Stats.Acceleration
		for i, b := range v.State.Buckets {
			switch {
			case b.Known && b.Limit > 0:
				from := "headers"
				if v.State.Named[i] {
					from = "named"
				}
				lr.Buckets = append(lr.Buckets, BucketReport{Dim: budget.Dim(i).String(), LimitPerMin: b.Limit,
					DepthSeconds: b.Depth / (b.Limit / 60), From: from})
			case v.Attempts > 0 && !v.State.Visible[i]:
				lr.NotVisible = append(lr.NotVisible, budget.Dim(i).String())
			}
		}
		for i, n := range v.State.Stats.Refusals {
			if i == int(budget.Granted) || n == 0 {
				continue
			}
			lr.Refusals[budget.Refusal(i).String()] = n
		}
		for w, dur := range v.State.Stats.Waited {
			if dur <= 0 {
				continue
			}
			name := lane.Wait(w).String()
			if lr.WaitedSeconds == nil {
				lr.WaitedSeconds = map[string]float64{}
			}
			lr.WaitedSeconds[name] = dur.Seconds()
			waited[name] += dur
		}
		r.Lanes = append(r.Lanes, lr)
	}
	// The binding limit is the one work waited on longest, summed over
	// the lanes (ties: the first name in sorted order, so it is stable).
	r.BindingLimit = "none observed (the input ran out first)"
	var best time.Duration
	names := make([]string, 0, len(waited))
	for name := range waited {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if d := waited[name]; d > best {
			best, r.BindingLimit = d, name
		}
	}
	r.Cost = l.Snapshot()
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Summary writes the human end-of-run summary.
func (r *Report) Summary(w io.Writer) {
	fmt.Fprintf(w, "\nsluice run: %s → %s\n", r.Input, r.Output)
	fmt.Fprintf(w, "  %d lines; %d already done; %d written now (", r.Requests.Total, r.Requests.AlreadyDone, r.Requests.Written)
	if r.Requests.FromCache > 0 {
		fmt.Fprintf(w, "%d from the cache, ", r.Requests.FromCache)
	}
	fmt.Fprintf(w, "%d succeeded, %d errored final, %d errored after retries)", r.Succeeded, r.Errored.Final, r.Errored.Transport)
	if r.Requests.Invalid > 0 {
		fmt.Fprintf(w, "; %d invalid lines", r.Requests.Invalid)
	}
	fmt.Fprintf(w, "\n  wall %s, %.0f requests/min, retries: %d rate-limited (429), %d overloaded (529), %d failed\n",
		fmtDur(time.Duration(r.WallSeconds*float64(time.Second))), r.ThroughputRPM, r.Retries.RateLimited, r.Retries.Overloaded, r.Retries.Failed)
	fmt.Fprintf(w, "  binding limit: %s\n", r.BindingLimit)
	if r.Route != "" {
		fmt.Fprintf(w, "  route: %s", r.Route)
		if r.PredictedSeconds > 0 {
			fmt.Fprintf(w, " (predicted %s, took %s)", fmtDur(time.Duration(r.PredictedSeconds*float64(time.Second))), fmtDur(time.Duration(r.WallSeconds*float64(time.Second))))
		}
		if r.RouteWhy != "" {
			fmt.Fprintf(w, " — %s", r.RouteWhy)
		}
		fmt.Fprintln(w)
		for _, rp := range r.Replans {
			to := rp.Route
			if to == route.Split {
				to = fmt.Sprintf("split, %.0f %% of the unsent by batch", 100*rp.BatchShare)
			}
			fmt.Fprintf(w, "  re-planned at %s: %s (predicted %s more) — %s\n", fmtDur(time.Duration(rp.AtSeconds*float64(time.Second))), to,
				fmtDur(time.Duration(rp.PredictedSeconds*float64(time.Second))), rp.Why)
		}
	}
	if t := r.Cost.Total; t.Known() {
		fmt.Fprintf(w, "  cost: $%.4f (sync $%.4f, batch $%.4f)\n", t.USD, t.SyncUSD, t.BatchUSD)
	} else {
		fmt.Fprintf(w, "  cost: %s; no price for %s (--models FILE with its prices makes it exact)\n", t.FormatUSD(), strings.Join(r.Cost.UnknownModels, ", "))
	}
	if n := r.Cost.Total.LongContextRequests; n > 0 {
		fmt.Fprintf(w, "  long context: %d requests over their model's threshold, billed at its multiple\n", n)
	}
	if r.Cache.Mode != "" {
		fmt.Fprintf(w, "  cache (%s): %d answered at no cost (saved $%.4f), %d new answers stored, %d non-answers not stored",
			r.Cache.Mode, r.Cache.Hits, r.Cache.SavedUSD, r.Cache.Stored, r.Cache.Refused)
		if r.Cache.Error != "" {
			fmt.Fprintf(w, "; storing failed: %s", r.Cache.Error)
		}
		fmt.Fprintln(w)
	}
	sort.Slice(r.Lanes, func(i, j int) bool { return r.Lanes[i].Org+r.Lanes[i].Pool < r.Lanes[j].Org+r.Lanes[j].Pool })
	if pc := r.PromptCache; pc.ReadTokens+pc.WriteTokens > 0 || pc.Added > 0 {
		fmt.Fprintf(w, "  prompt cache: %d requests sent with a breakpoint sluice added; %d tokens read, %d written (%.1f %% read), %d input tokens not charged to ITPM; saved $%.4f\n",
			pc.Added, pc.ReadTokens, pc.WriteTokens, 100*pc.HitRate(), pc.ITPMSpared, pc.SavedUSD)
		if n := pc.BatchReadTokens + pc.BatchWriteTokens; n > 0 || pc.Primers > 0 || r.Batch.Seeds > 0 {
			fmt.Fprintf(w, "    batch: %.1f %% of %d cacheable input tokens read, after %d primers and %d seed batches", 100*pc.BatchHitRate(), n, pc.Primers, r.Batch.Seeds)
			if r.Batch.AsWritten > 0 {
				fmt.Fprintf(w, "; %d requests sent as written (their org's cache not batch-warm, or read below the break-even)", r.Batch.AsWritten)
			}
			fmt.Fprintln(w)
		}
		for _, l := range r.Lanes {
			if n := l.CacheReadTokens + l.CacheWriteTokens; n > 0 {
				fmt.Fprintf(w, "    %-12s %-10s %.1f %% of %d cacheable input tokens read\n", l.Org, l.Pool, 100*float64(l.CacheReadTokens)/float64(n), n)
			}
		}
	}
	fmt.Fprintf(w, "  %-12s %-10s %8s %7s %6s %6s %6s %9s  %s\n", "org", "pool", "ok", "share", "429", "529", "5xx", "limit/cap", "buckets (depth)")
	for _, l := range r.Lanes {
		if l.Attempts == 0 && !l.Dead {
			continue // never used: a dead one is shown, it is why work went elsewhere
		}
		var bs []string
		for _, b := range l.Buckets {
			note := ""
			if b.From == "named" {
				note = ", from a 429's message"
			}
			bs = append(bs, fmt.Sprintf("%s %.0f/min (%.1f s%s)", b.Dim, b.LimitPerMin, b.DepthSeconds, note))
		}
		if len(l.NotVisible) > 0 {
			bs = append(bs, "not visible: "+strings.Join(l.NotVisible, ", "))
		}
		dead := ""
		if l.Dead {
			dead = "  (dead)"
		}
		if l.Workspace != "" && !strings.HasSuffix(l.Org, "/"+l.Workspace) {
			dead += "  (workspace " + l.Workspace + ")"
		}
		fmt.Fprintf(w, "  %-12s %-10s %8d %6.1f%% %6d %6d %6d %4d/%-4d  %s%s\n", l.Org, l.Pool, l.OK, 100*l.Share, l.RateLimited, l.Overloaded, l.Failed, l.FinalLimit, l.Cap, strings.Join(bs, "; "), dead)
	}
	for _, k := range r.Keys {
		if k.Dead {
			ws := ""
			if k.Workspace != "" {
				ws = " workspace " + k.Workspace
			}
			fmt.Fprintf(w, "  key %s (…%s)%s not used: %s\n", k.Label, k.Last4, ws, k.Reason)
		}
	}
	if r.Stopped != "" {
		fmt.Fprintf(w, "  stopped: %s\n", r.Stopped)
	}
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}
