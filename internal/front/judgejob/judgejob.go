// Package judgejob runs LLM-as-judge jobs: items and a rubric in, one
// classified verdict per item and per-group summaries out. It is a thin
// layer over package job — the same engine, planner, resume, cost
// accounting and response cache as `sluice run` — and package judge, which
// builds the requests and classifies the replies.
//
// Its two entry points are the stable Go API for judge callers: Judge for
// items held in memory, RunFile for an items file of any size. Config is a
// struct so fields can be added without breaking a call site.
//
// Files, for an output path OUT (verdicts):
//
//	OUT                  one verdict per judged item (rewritten atomically at the end)
//	OUT.requests.jsonl   the Messages requests, rebuilt from the items every run
//	OUT.results.jsonl    the raw results (job's resumable results file)
//	OUT.judge.json       the rubric fingerprint and model the results were made with
//
// Re-running the same command resumes: items already judged are kept,
// transport-class rows are driven again, and Redrive names other classes
// to ask again (parse_error, truncated, refused).
package judgejob

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/format/results"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/judge"
)

// Config is one judge job.
type Config struct {
	// Rubric is what the judge is asked (default judge.DefaultRubric()).
	Rubric *judge.Rubric
	// Model (default judge.DefaultModel), MaxTokens (default 256) and
	// Temperature (nil: the API's default) are the request's parameters.
	Model       string
	MaxTokens   int
	Temperature *float64
	// Output is the verdicts file; the work files live beside it (see the
	// package doc). Judge may leave it empty: a temporary directory is
	// used and removed, and the job cannot be resumed.
	Output string
	// Redrive asks again the items whose verdict is of these classes
	// (transport is always re-driven). Their requests skip the cache.
	Redrive []judge.Class
	// KeepRaw keeps the reply text in every verdict, not only in
	// parse_error and truncated ones.
	KeepRaw bool
	// Cache, if set, answers requests it holds without a call and stores
	// new answers under the rubric's fingerprint (never a non-answer).
	Cache *cache.Cache
	// Engine is the run's configuration: Dispatch (client and keys) is
	// required; Plan, Logger, Progress, MaxCost and the rest are optional.
	// Input, Output, Cache, CacheExtra and Redrive are set
	// by the judge job.
	Engine job.Options
}

// Result is what a judge job produced.
type Result struct {
	// Verdicts, from Judge only: one per item that has a result, in item
	// order. RunFile streams them to Config.Output instead.
	Verdicts []judge.Verdict
	// Summary counts every verdict of this job's items by group.
	Summary judge.Summary
	// Judged is the number of verdicts written; Pending the items with no
	// result yet (the run was interrupted: re-run to resume).
	Judged, Pending int
	// Rubric is the rubric's fingerprint.
	Rubric string
	// Report is the engine's report of this run (nil when the job failed
	// before sending).
	Report *job.Report
}

// ItemError lists the items that cannot be judged; nothing was sent.
type ItemError struct {
	Source string
	Lines  []string // "line N: reason", the first 50
	Total  int
}

func (e *ItemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d items cannot be judged; nothing was sent", e.Source, e.Total)
	for _, l := range e.Lines {
		b.WriteString("\n  " + l)
	}
	if e.Total > len(e.Lines) {
		fmt.Fprintf(&b, "\n  … and %d more", e.Total-len(e.Lines))
	}
	return b.String()
}

// ErrOtherRubric is returned (wrapped) when the output's results were made
// with another rubric or model: their verdicts would be read under the
// wrong rubric.
var ErrOtherRubric = errors.New("judgejob: the results were made with another rubric or model")

// Judge judges items held in memory and returns their verdicts in item
// order with the summary. With Config.Output set, its files are kept and
// a second call resumes; without, the work happens in a temporary
// directory.
func Judge(ctx context.Context, items []judge.Item, cfg Config) (*Result, error) {
	if cfg.Output == "" {
		dir, err := os.MkdirTemp("", "sluice-judge-")
		if err != nil {
			return nil, fmt.Errorf("judgejob: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Output = filepath.Join(dir, "verdicts.jsonl")
	}
	next := func(yield func(int, judge.Item, error) bool) {
		for i, it := range items {
			if !yield(i+1, it, nil) {
				return
			}
		}
	}
	res, err := run(ctx, "items", next, cfg, true)
	if res != nil && res.Verdicts != nil {
		order := make(map[string]int, len(items))
		for i, it := range items {
			order[it.ID] = i
		}
		slices.SortFunc(res.Verdicts, func(a, b judge.Verdict) int { return order[a.ID] - order[b.ID] })
	}
	return res, err
}

// RunFile judges the items file at path (JSON Lines, one judge.Item per
// line) and writes the verdicts to cfg.Output, which is required. Memory
// holds the items' ids and group labels, not their text or verdicts.
func RunFile(ctx context.Context, path string, cfg Config) (*Result, error) {
	if cfg.Output == "" {
		return nil, errors.New("judgejob: an output file is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("judgejob: %w", err)
	}
	defer f.Close()
	next := func(yield func(int, judge.Item, error) bool) {
		r := jsonl.NewReader(f)
		for {
			line, n, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				// Counted as a bad item: nothing is sent.
				yield(n+1, judge.Item{}, fmt.Errorf("reading %s: %w", path, err))
				return
			}
			var it judge.Item
			err = json.Unmarshal(line, &it)
			if !yield(n, it, err) {
				return
			}
		}
	}
	return run(ctx, path, next, cfg, false)
}

// paths are a job's files.
type paths struct{ verdicts, requests, results, meta string }

func pathsOf(out string) paths {
	return paths{out, out + ".requests.jsonl", out + ".results.jsonl", out + ".judge.json"}
}

// meta is OUT.judge.json.
type meta struct {
	Rubric string `json:"rubric"` // fingerprint
	Model  string `json:"model"`
	// Redriving holds the classes of a --redrive that has not finished.
	// Resuming it (the same --redrive again) must not re-ask the rows it
	// already re-asked, even if they came back in the same class.
	Redriving []judge.Class `json:"redriving,omitempty"`
}

// itemSet is what the job keeps per item: its position and group labels.
type itemSet struct {
	groups map[string][]string // only items with groups
	seen   map[string]struct{}
	n      int
}

func run(ctx context.Context, source string, items func(func(int, judge.Item, error) bool), cfg Config, keep bool) (*Result, error) {
	if cfg.Rubric == nil {
		cfg.Rubric = judge.DefaultRubric()
	}
	if cfg.Model == "" {
		cfg.Model = judge.DefaultModel
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = judge.DefaultMaxTokens
	}
	if err := cfg.Rubric.Validate(); err != nil {
		return nil, err
	}
	if err := checkCompat(cfg); err != nil {
		return nil, err
	}
	fp := judge.Fingerprint(cfg.Rubric, cfg.Model)
	p := pathsOf(cfg.Output)
	// One judge job per output: its requests, meta and verdicts files are
	// rewritten here, before job.Run takes the results file's own lock.
	unlock, err := results.LockWait(ctx, p.verdicts, cfg.Engine.LockWait, cfg.Engine.LockWaiting(p.verdicts))
	if err != nil {
		return nil, err
	}
	defer unlock()
	old, err := checkMeta(p, fp, cfg.Model)
	if err != nil {
		return nil, err
	}
	slices.Sort(cfg.Redrive)
	cfg.Redrive = slices.Compact(cfg.Redrive)
	resuming := len(cfg.Redrive) > 0 && old.Rubric == fp && slices.Equal(old.Redriving, cfg.Redrive)

	// 1. Build every request before anything is sent. With a re-drive,
	// remember what each done request asked, to tell a new max_tokens from
	// a changed item.
	var before map[string]contentHash
	if len(cfg.Redrive) > 0 {
		var err error
		if before, err = readContent(p.requests); err != nil {
			return nil, err
		}
	}
	set, err := writeRequests(source, items, cfg, p.requests, before)
	if err != nil {
		return nil, err
	}
	m := meta{Rubric: fp, Model: cfg.Model}
	if resuming {
		m.Redriving = cfg.Redrive
	}
	if err := writeMeta(p.meta, m); err != nil {
		return nil, err
	}

	// 2. What to ask again: transport rows always, and the named classes —
	// unless this resumes an interrupted re-drive of those classes: the
	// rows it has not reached have no row (they are pending), and the
	// ones it has must not be paid for twice.
	classes := []judge.Class{judge.Transport}
	if !resuming {
		classes = append(classes, cfg.Redrive...)
	}
	redrive, err := redriveSet(p.results, cfg.Rubric, classes, set)
	if err != nil {
		return nil, err
	}

	// 3. Run. Once sending starts (the Plan hook), a re-drive is marked
	// in progress, so a resume after a crash does not re-ask what it has
	// re-asked already.
	o := cfg.Engine
	inner := o.Plan
	o.Plan = func(s jsonl.Summary, pending int) (route.Routing, error) {
		if len(cfg.Redrive) > 0 && !resuming {
			if err := writeMeta(p.meta, meta{Rubric: fp, Model: cfg.Model, Redriving: cfg.Redrive}); err != nil {
				return route.Routing{}, err
			}
		}
		if inner == nil {
			return route.Routing{Route: route.Sync}, nil
		}
		return inner(s, pending)
	}
	o.Input, o.Output = p.requests, p.results
	o.Cache, o.CacheExtra = cfg.Cache, []string{fp}
	o.Redrive.Again = func(id string) bool { return redrive[id] }
	if len(cfg.Redrive) > 0 {
		// Rows kept as they are may have been asked with another
		// max_tokens or temperature: that is the point of a re-drive. An
		// item whose text changed is refused as usual (before holds only
		// the ids whose request is the same but for those two). The
		// rubric and model are held equal by OUT.judge.json.
		o.Redrive.KeepChanged = func(id string) bool { _, same := before[id]; return same }
		// A cached answer that reads as a class being re-asked would be
		// handed back on every resume: it is a miss.
		o.Redrive.AcceptCached = func(message []byte) bool {
			res := api.SucceededResult(message)
			v := judge.Classify(api.ResultRecord{Result: res}, cfg.Rubric, false)
			return !slices.Contains(cfg.Redrive, v.Class)
		}
	}
	rep, runErr := job.Run(ctx, o)
	if rep == nil {
		return nil, runErr
	}

	// 4. Verdicts of what is done, even after an interruption.
	res, err := writeVerdicts(p, cfg, fp, set, keep)
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	res.Report = rep
	if runErr == nil && res.Pending == 0 {
		// Every item has its verdict: the next --redrive is a new one.
		if err := writeMeta(p.meta, meta{Rubric: fp, Model: cfg.Model}); err != nil {
			return res, err
		}
	}
	return res, runErr
}

// checkMeta reads OUT.judge.json (zero if absent) and refuses results made
// under another rubric or model.
func checkMeta(p paths, fp, model string) (meta, error) {
	var m meta
	b, err := os.ReadFile(p.meta)
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("judgejob: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("judgejob: %s: %w", p.meta, err)
	}
	if m.Rubric == fp {
		return m, nil
	}
	if st, err := os.Stat(p.results); err != nil || st.Size() == 0 {
		return meta{}, nil // nothing judged yet under the old rubric
	}
	what := "rubric"
	if m.Model != model {
		what = fmt.Sprintf("model (%s, now %s)", m.Model, model)
	}
	return m, fmt.Errorf("%w: %s holds results of another %s; write to a new output, or delete %s and %s to start over",
		ErrOtherRubric, p.results, what, p.results, p.meta)
}

func writeMeta(path string, m meta) error {
	b, _ := json.Marshal(m)
	return writeAtomic(path, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
}

// writeRequests validates every item and writes its request; an invalid
// item (or a duplicate id) stops the job before anything is sent.
//
// before, if set, holds the content of each previous request (readContent);
// writeRequests removes the ids whose content changed, so that what is left
// is the ids asked the same thing but for max_tokens and temperature.
func writeRequests(source string, items func(func(int, judge.Item, error) bool), cfg Config, path string, before map[string]contentHash) (*itemSet, error) {
	set := &itemSet{groups: map[string][]string{}, seen: map[string]struct{}{}}
	ie := &ItemError{Source: source}
	bad := func(n int, format string, args ...any) {
		ie.Total++
		if len(ie.Lines) < 50 {
			ie.Lines = append(ie.Lines, fmt.Sprintf("line %d: ", n)+fmt.Sprintf(format, args...))
		}
	}
	err := writeAtomic(path, func(w io.Writer) error {
		var err error
		items(func(n int, it judge.Item, perr error) bool {
			if perr != nil {
				bad(n, "%v", perr)
				return true
			}
			if verr := it.Validate(); verr != nil {
				bad(n, "%v", verr)
				return true
			}
			if _, dup := set.seen[it.ID]; dup {
				bad(n, "duplicate id %q", it.ID)
				return true
			}
			set.seen[it.ID] = struct{}{}
			set.n++
			if len(it.Groups) > 0 {
				set.groups[it.ID] = it.Groups
			}
			params, berr := judge.Build(it, cfg.Rubric, cfg.Model, cfg.MaxTokens, cfg.Temperature)
			if berr != nil {
				bad(n, "%v", berr)
				return true
			}
			if ie.Total > 0 {
				return true // keep checking; nothing will be written
			}
			if h, ok := before[it.ID]; ok {
				if now, err := contentOf(params); err != nil || now != h {
					delete(before, it.ID)
				}
			}
			line, _ := json.Marshal(api.BatchRequest{CustomID: it.ID, Params: params})
			if _, err = w.Write(append(line, '\n')); err != nil {
				return false
			}
			return true
		})
		if err == nil && ie.Total > 0 {
			return ie
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if set.n == 0 {
		return nil, fmt.Errorf("judgejob: %s holds no items", source)
	}
	return set, nil
}

// contentHash identifies what a request asks, max_tokens and temperature
// aside.
type contentHash [sha256.Size]byte

func contentOf(params []byte) (contentHash, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return contentHash{}, err
	}
	delete(m, "max_tokens")
	delete(m, "temperature")
	b, err := json.Marshal(m)
	if err != nil {
		return contentHash{}, err
	}
	c, err := cache.Canonical(b)
	if err != nil {
		return contentHash{}, err
	}
	return sha256.Sum256(c), nil
}

// readContent reads the content of every request of a previous run's
// requests file (none if there is none).
func readContent(path string) (map[string]contentHash, error) {
	out := map[string]contentHash{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("judgejob: %w", err)
	}
	defer f.Close()
	r := jsonl.NewReader(f)
	for {
		line, _, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("judgejob: reading %s: %w", path, err)
		}
		var req api.BatchRequest
		if json.Unmarshal(line, &req) != nil {
			continue
		}
		if h, err := contentOf(req.Params); err == nil {
			out[req.CustomID] = h
		}
	}
}

// eachResult calls fn with every row of the results file that belongs to
// one of the job's items (a missing file has none).
func eachResult(path string, set *itemSet, fn func(api.ResultRecord) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("judgejob: %w", err)
	}
	defer f.Close()
	r := jsonl.NewReader(f)
	for {
		line, _, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("judgejob: reading %s: %w", path, err)
		}
		var rec api.ResultRecord
		if json.Unmarshal(line, &rec) != nil {
			continue // a torn last line: job repairs it
		}
		if _, ok := set.seen[rec.CustomID]; !ok {
			continue
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

func redriveSet(results string, r *judge.Rubric, classes []judge.Class, set *itemSet) (map[string]bool, error) {
	out := map[string]bool{}
	err := eachResult(results, set, func(rec api.ResultRecord) error {
		if v := judge.Classify(rec, r, false); slices.Contains(classes, v.Class) {
			out[rec.CustomID] = true
		}
		return nil
	})
	return out, err
}

// writeVerdicts classifies every result of the job's items into OUT, one
// row per item, in the results file's order.
func writeVerdicts(p paths, cfg Config, fp string, set *itemSet, keep bool) (*Result, error) {
	res := &Result{Rubric: fp}
	tally := judge.NewTally(cfg.Rubric)
	done := make(map[string]struct{}, set.n)
	err := writeAtomic(p.verdicts, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<16)
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		err := eachResult(p.results, set, func(rec api.ResultRecord) error {
			if _, dup := done[rec.CustomID]; dup {
				// job writes one row per id; never count an item twice.
				return nil
			}
			done[rec.CustomID] = struct{}{}
			v := judge.Classify(rec, cfg.Rubric, cfg.KeepRaw)
			v.Groups, v.Rubric = set.groups[v.ID], fp
			tally.Add(v)
			if keep {
				res.Verdicts = append(res.Verdicts, v)
			}
			return enc.Encode(v)
		})
		if err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return nil, err
	}
	res.Judged = len(done)
	res.Pending = set.n - len(done)
	res.Summary = tally.Summary()
	return res, nil
}

// writeAtomic replaces path with what fill writes (atomicfile.Write), as
// a judgejob error.
func writeAtomic(path string, fill func(io.Writer) error) error {
	if err := atomicfile.Write(path, 0o644, fill); err != nil {
		return fmt.Errorf("judgejob: %w", err)
	}
	return nil
}

// checkCompat refuses, before anything is built or sent, a request shape
// the model or the API version the engine sends refuses (docs/models.md):
// a --temperature Sonnet 5 or API version 2026-10-21 would answer with a
// 400 on every item.
func checkCompat(cfg Config) error {
	c := cfg.Engine.Dispatch.Client
	if c == nil {
		return nil
	}
	// The shape every judge request has (judge.Build): the model,
	// max_tokens, the temperature when given, a system prompt and one user
	// message of text.
	shape := map[string]any{"model": cfg.Model, "max_tokens": cfg.MaxTokens, "system": "s",
		"messages": []map[string]any{{"role": "user", "content": "u"}}}
	if cfg.Temperature != nil {
		shape["temperature"] = *cfg.Temperature
	}
	params, _ := json.Marshal(shape)
	if reason := jsonl.CheckCompat(params, api.Current().Rules(c.Version(), cfg.Model)); reason != "" {
		return fmt.Errorf("judgejob: %s; nothing was sent", strings.Replace(reason, "params.temperature", "--temperature", 1))
	}
	return nil
}
