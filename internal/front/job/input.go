package job

// The input's two passes: the survey before anything is sent, and the
// feeders that stream it to the sides; and the results lines they make.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/format/results"
	"github.com/sluice-dev/sluice/internal/store/cache"
	"github.com/sluice-dev/sluice/keys"
)

var nopLogger = slog.New(slog.DiscardHandler)

// surveyed is what the survey pass found.
type surveyed struct {
	summary jsonl.Summary
	// pending counts the lines that will get a result this run: valid
	// lines (and with SkipInvalid, invalid ones with a usable first-seen
	// id) that are not done, or whose row is driven again.
	pending int
	// redrive holds the done ids of this input whose rows are driven
	// again: transport-class rows, and rows of lines that were invalid and
	// now are valid.
	redrive    map[string]bool
	errors     []jsonl.LineError
	changed    []string // first few, for the message
	nChanged   int
	changedSet map[string]bool
	firstModel string
	// lastLine is the last non-blank line's number (blank lines count):
	// the largest a feeder sees.
	lastLine int
	// cached counts the pending requests the cache will answer.
	cached int
	// prefixes counts the prompt prefixes pending requests share (nil:
	// CachePrefixOff, or none shared: nothing is injected).
	prefixes *cacheprefix.Survey
}

// countPrefix counts the prompt-prefix units of a pending request.
func (p *surveyed) countPrefix(o Options, info jsonl.Info) {
	if o.CachePrefixOff {
		return
	}
	units, own := cacheprefix.Units(info.Params)
	if own || len(units) == 0 {
		return
	}
	if p.prefixes == nil {
		p.prefixes = cacheprefix.NewSurvey()
	}
	min, relief := api.CacheMinimums(info.Model)
	p.prefixes.Add(units, min, relief)
}

// minCacheable is the model's documented minimum cacheable prefix
// (api.CacheMinimums; a model the catalog does not know gets the default).
func minCacheable(model string) int64 {
	min, _ := api.CacheMinimums(model)
	return min
}

// countCached counts info's request if the cache holds its answer, and
// says whether it does.
func (p *surveyed) countCached(o Options, info jsonl.Info) bool {
	if o.Cache == nil || o.Cache.Mode() == cache.Off {
		return false
	}
	k, err := cache.KeyOf(info.Params, o.CacheExtra...)
	if err != nil {
		return false
	}
	if msg, ok := o.Cache.Lookup(k); ok && o.Redrive.accept(msg) {
		p.cached++
		return true
	}
	return false
}

// countPending counts a request this run gives a result: the response
// cache's, or a send whose prompt prefix may be shared (a request the
// response cache answers shares nothing: it is never sent).
func (p *surveyed) countPending(o Options, info jsonl.Info) {
	p.pending++
	if !p.countCached(o, info) {
		p.countPrefix(o, info)
	}
}

// survey validates the input and compares done requests with their record.
func survey(ctx context.Context, o Options, st *results.State) (*surveyed, error) {
	f, err := os.Open(o.Input)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	defer f.Close()
	p := &surveyed{changedSet: map[string]bool{}, redrive: map[string]bool{}}
	v := jsonl.Validator{Version: o.apiVersion()}
	r := jsonl.NewReader(f)
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("job: reading %s: %w", o.Input, err)
		}
		if n%4096 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("%w: while checking the input; nothing was sent", ErrInterrupted)
		}
		p.lastLine = n
		info, err := v.CheckShared(n, line)
		if err != nil {
			le, _ := errors.AsType[jsonl.LineError](err)
			if len(p.errors) < o.MaxErrors {
				p.errors = append(p.errors, le)
			}
			if id := recordableInvalid(le); o.SkipInvalid && id != "" {
				if _, done := st.Done[id]; !done {
					p.pending++
				}
			}
			continue
		}
		if p.firstModel == "" {
			p.firstModel = info.Model
		}
		e, done := st.Done[info.CustomID]
		switch {
		case !done:
			p.countPending(o, info)
		case e.Class == api.ClassTransport || e.Class == api.ClassInvalidInput:
			p.redrive[info.CustomID] = true
			p.countPending(o, info)
		case o.Redrive.again(info.CustomID):
			p.redrive[info.CustomID] = true
			p.countPending(o, info)
		case o.Redrive.keepChanged(info.CustomID):
		case e.ParamsHash != "" && e.ParamsHash != info.ParamsHash:
			p.nChanged++
			p.changedSet[info.CustomID] = true
			if len(p.changed) < 5 {
				p.changed = append(p.changed, info.CustomID)
			}
		}
	}
	p.summary = v.Summary()
	if p.prefixes != nil && !p.prefixes.Any() {
		p.prefixes = nil // nothing shared: the feed need not look
	}
	return p, nil
}

// feed streams the input, submitting the requests that are not done,
// that take(line, id) gives this feeder, and that fromCache did not
// answer. With w set it also records invalid lines (--skip-invalid):
// exactly one feeder of a run does that, on its first pass.
func feed(ctx context.Context, o Options, st *results.State, drop func(string, results.Entry) bool,
	take func(line int, id string) bool, fromCache func(*dispatch.Request) (bool, error), submit func(*dispatch.Request) error, w *results.Writer) error {
	f, err := os.Open(o.Input)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	defer f.Close()
	r := jsonl.NewReader(f)
	// The same checks as the survey, uniqueness included, so a duplicated
	// custom_id is never sent or recorded twice.
	v := jsonl.Validator{Version: o.apiVersion()}
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			return nil
		}
		// Cache hits never block on submit, so look at ctx here too.
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return fmt.Errorf("job: reading %s: %w", o.Input, err)
		}
		info, verr := v.Check(n, line)
		if verr != nil {
			// Only reached with SkipInvalid: survey refused otherwise.
			le, _ := errors.AsType[jsonl.LineError](verr)
			id := recordableInvalid(le)
			if id == "" || w == nil {
				continue
			}
			if e, done := st.Done[id]; done && !drop(id, e) {
				continue
			}
			if err := w.Write(invalidRecord(id, n, verr)); err != nil {
				return err
			}
			continue
		}
		if e, done := st.Done[info.CustomID]; (done && !drop(info.CustomID, e)) || !take(n, info.CustomID) {
			continue
		}
		req := &dispatch.Request{
			ID: info.CustomID, Params: info.Params, Model: info.Model,
			MaxTokens: info.MaxTokens, EstInput: info.EstInputTokens, ParamsHash: info.ParamsHash,
		}
		if hit, err := fromCache(req); hit || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if err := submit(req); err != nil {
			return err
		}
	}
}

// recordableInvalid returns the id an invalid line's errored result is
// recorded under, or "" when it has none: no readable, valid custom_id, or
// one already used by an earlier line (which gets the result).
func recordableInvalid(le jsonl.LineError) string {
	if le.Duplicate || !api.ValidCustomID(le.CustomID) {
		return ""
	}
	return le.CustomID
}

// toRecord renders a Result as a results line: the Batch results format,
// plus sluice's metadata under "sluice".
func toRecord(r dispatch.Result, redact func(string) string) api.ResultRecord {
	var res []byte
	if r.Class == api.ClassOK {
		res = api.SucceededResult(r.Body)
	} else {
		body := r.Body
		if !json.Valid(body) || len(body) == 0 {
			msg := "no error body"
			if r.Err != nil {
				msg = r.Err.Error()
			}
			body, _ = json.Marshal(api.NewErrorBody(api.ErrAPI, "", "%s", msg))
		}
		if redact != nil {
			body = []byte(redact(string(body)))
		}
		res = api.ErroredResult(body)
	}
	return api.ResultRecord{CustomID: r.Request.ID, Result: res, Sluice: &api.RunMeta{
		ParamsHash: r.Request.ParamsHash, Class: r.Class, Route: route.Sync, Org: r.Org, Key: r.Key,
		Attempts: r.Attempts, LatencyMs: r.Latency.Milliseconds(), CachePrefix: cachePrefixTTL(r.Request),
	}}
}

// invalidRecord is the errored result of a line that failed validation.
func invalidRecord(id string, line int, err error) api.ResultRecord {
	body, _ := json.Marshal(api.NewErrorBody(api.ErrInvalidRequest, "", "sluice: input line %d: %v", line, err))
	res := api.ErroredResult(body)
	return api.ResultRecord{CustomID: id, Result: res, Sluice: &api.RunMeta{Class: api.ClassInvalidInput, Route: "none"}}
}

func keyReports(disc []dispatch.Discovery) []KeyReport {
	var out []KeyReport
	for _, d := range disc {
		dead, why := d.Key.Dead()
		out = append(out, KeyReport{Label: d.Key.Label(), Last4: d.Key.Last4(), Org: d.Key.Org(), Workspace: d.Key.ChargedWorkspace(), Dead: dead,
			Suspect: !dead && d.Key.Suspect(keys.AllPools), Reason: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
	return out
}

// prefixTTLs are the breakpoint TTLs by route: an entry outlives five
// minutes of sync gaps rarely, a batch's processing often (the docs
// suggest the 1 h TTL for batches).
var prefixTTLs = map[route.Side]struct {
	name string
	d    time.Duration
}{route.SideSync: {"5m", 5 * time.Minute}, route.SideBatch: {"1h", time.Hour}}

// prepare adds the prompt-cache breakpoint of req's shared prefix to what
// is sent on side s (docs/caching.md); a request of no prefix shared by
// at least atLeast pending requests, or one with a breakpoint of its own,
// is left alone. A request prepared for the other side (handed over by a
// re-plan) is prepared again, for this side's TTL.
func (p *surveyed) prepare(s route.Side, req *dispatch.Request, atLeast int, log *slog.Logger) {
	ttl := prefixTTLs[s]
	if p.prefixes == nil || (req.Sent != nil && req.CacheTTL == ttl.d) {
		return
	}
	req.Sent, req.CachePrefix, req.CacheTTL = nil, 0, 0
	units, own := cacheprefix.Units(req.Params)
	if own {
		return
	}
	u, ok := p.prefixes.Shared(units, minCacheable(req.Model), atLeast)
	if !ok {
		return
	}
	sent, err := cacheprefix.Inject(req.Params, u.At, ttl.name)
	if err != nil {
		log.Warn("prompt cache: the breakpoint could not be added; the request goes as written", "id", req.ID, "err", err)
		return
	}
	req.Sent, req.CachePrefix, req.CacheTTL = sent, u.Hash, ttl.d
}

// cachePrefixTTL is RunMeta.CachePrefix of req: the TTL of the breakpoint
// sluice added, or "".
func cachePrefixTTL(req *dispatch.Request) string {
	if req == nil || req.Sent == nil {
		return ""
	}
	if req.CacheTTL >= time.Hour {
		return "1h"
	}
	return "5m"
}

// apiVersion is the anthropic-version the job's requests go out with: the
// input is checked against what it refuses (docs/models.md).
func (o Options) apiVersion() string {
	if o.Dispatch.Client == nil {
		return ""
	}
	return o.Dispatch.Client.Version()
}
