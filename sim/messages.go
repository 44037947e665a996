package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// handleMessages serves POST /v1/messages. The order of checks: size,
// auth, version, body, spend cap, injected 500/529, storm 529s, org capacity
// (529), rate limits and acceleration (429); then the answer, after its
// latency.
func (s *Server) handleMessages(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	if c == nil {
		return
	}
	body, ok := c.readBody(api.MaxMessagesBytes)
	if !ok {
		return
	}
	p, rerr := readPrompt(&s.cfg, body, false)
	if rerr == nil {
		rerr = versionRefusal(c.version, p)
	}
	if rerr != nil {
		c.fail(rerr)
		return
	}
	ln := c.org.lane(p.pool, c.now)
	h := rw.Header()

	if c.org.cfg.SpendCapReached {
		ln.setHeaders(h, c.now)
		next := time.Date(c.now.Year(), c.now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		body := api.NewErrorBody(api.ErrRateLimit, c.reqID, "You have reached your organization's monthly usage limit. You will regain access on %s at 00:00 UTC.", next.Format("2006-01-02"))
		body.Err.Details = &api.ErrorDetails{ErrorCode: api.SpendLimitErrorCode}
		ln.count(func(st *LaneStats) { st.SpendCapped++ })
		c.failWith(429, body) // no retry-after: retrying cannot help
		return
	}

	f := &s.cfg.Faults
	if u := c.w.rng.float(); u < f.P500 {
		ln.count(func(st *LaneStats) { st.ServerErrors++ })
		ln.setHeaders(h, c.now)
		c.fail(&requestError{500, api.ErrAPI, "Internal server error"})
		return
	} else if u < f.P500+f.P529 {
		ln.count(func(st *LaneStats) { st.Overloaded++ })
		ln.setHeaders(h, c.now)
		c.fail(&requestError{api.StatusOverloaded, api.ErrOverloaded, "Overloaded"})
		return
	}
	// Drawn only inside a storm, so a world without storms keeps its draws.
	if p := c.w.stormP529(c.now); p > 0 && c.w.rng.float() < p {
		ln.count(func(st *LaneStats) { st.Overloaded++ })
		ln.setHeaders(h, c.now)
		c.fail(&requestError{api.StatusOverloaded, api.ErrOverloaded, "Overloaded"})
		return
	}
	if capacity := int64(c.org.cfg.Capacity); capacity > 0 {
		if c.org.inFlight.Add(1) > capacity {
			c.org.inFlight.Add(-1)
			ln.count(func(st *LaneStats) { st.Overloaded++ })
			ln.setHeaders(h, c.now)
			c.fail(&requestError{api.StatusOverloaded, api.ErrOverloaded, "Overloaded"})
			return
		}
		defer c.org.inFlight.Add(-1)
	}

	hash := BodyHash(body)
	ans := s.cfg.answer(hash, p.verdict, p.maxTokens())
	cacheRead, cacheWrite := c.org.cacheLookup(p, c.now)
	itpmCharge := p.inputTokens - cacheRead
	if p.info.CacheReadsCountITPM {
		itpmCharge = p.inputTokens
	}
	outCharge, refund := ans.outputTokens, int64(0)
	if s.cfg.OTPMMode == OTPMReserveMaxTokens {
		outCharge, refund = p.maxTokens(), p.maxTokens()-ans.outputTokens
	}
	wsOK, wsRelease := c.admitWorkspace(ln, itpmCharge, outCharge)
	if !wsOK {
		return
	}
	wideOK, release := c.admitOrgWide(ln, itpmCharge, outCharge)
	if !wideOK {
		wsRelease()
		return
	}
	adm := ln.admit(c.now, itpmCharge, outCharge)
	if !adm.ok {
		release()
		wsRelease()
		ln.setHeaders(h, c.now)
		c.rateLimited(adm.retryAfter, ln.limitMessage(adm.limitedBy, p.model))
		return
	}
	// A written entry is visible once the writer's answer begins: the
	// pool's mean time to first token (no jitter, so the random stream
	// every other draw uses is unchanged).
	c.org.cacheCommit(p, c.now, s.cfg.TimeScale, time.Duration(float64(s.cfg.latencyFor(p.pool).TTFT.D())/s.cfg.TimeScale), cacheRead)
	usage := api.Usage{
		InputTokens:              p.inputTokens - cacheRead - cacheWrite,
		CacheCreationInputTokens: cacheWrite,
		CacheReadInputTokens:     cacheRead,
		CacheCreation:            &api.CacheCreation{},
		OutputTokens:             ans.outputTokens,
		ServiceTier:              api.TierStandard,
		InferenceGeo:             "global",
	}
	if p.cacheTTL == time.Hour {
		usage.CacheCreation.Ephemeral1h = cacheWrite
	} else {
		usage.CacheCreation.Ephemeral5m = cacheWrite
	}
	ln.count(func(st *LaneStats) { st.bill(usage); st.billModel(p.model, usage) })
	finished := false
	finish := func() {
		if !finished {
			finished = true
			ln.finish(s.now(), refund)
		}
	}
	defer finish()

	total, ttft := latency(s.cfg.latencyFor(p.pool), ans.outputTokens, c.w.rng.normal(), s.cfg.TimeScale)
	if f.PSlow > 0 && c.w.rng.float() < f.PSlow {
		ln.count(func(st *LaneStats) { st.Slow++ })
		total, ttft = time.Duration(float64(total)*f.SlowFactor), time.Duration(float64(ttft)*f.SlowFactor)
	}
	if f.PReset > 0 && c.w.rng.float() < f.PReset {
		ln.count(func(st *LaneStats) { st.Resets++ })
		sleep(r.Context(), total/2)
		finish()
		panic(http.ErrAbortHandler) // drops the connection without an answer
	}
	msg := api.Message{
		ID: c.w.newID("msg_"), Type: "message", Role: "assistant", Model: p.model,
		Content: []api.ContentBlock{}, StopReason: ans.stopReason, Usage: usage,
	}
	if ans.text != "" {
		msg.Content = []api.ContentBlock{{Type: "text", Text: ans.text}}
	}
	if p.req.Stream {
		if s.stream(c, ln, &msg, ans, total, ttft) {
			c.w.bodies.answered(hash)
		}
		return
	}
	if sleep(r.Context(), total) != nil {
		return // the client left; nothing to answer
	}
	finish()
	ln.setHeaders(h, s.now())
	c.workspaceHeaders(ln.pool, h, s.now())
	c.writeJSON(&msg)
	c.w.bodies.answered(hash)
}

// stream answers with server-sent events in the documented order:
// message_start, content_block_start, ping, content_block_delta…,
// content_block_stop, message_delta (cumulative usage), message_stop. It
// reports whether the whole stream was written.
func (s *Server) stream(c *call, ln *lane, msg *api.Message, ans answer, total, ttft time.Duration) bool {
	h := c.rw.Header()
	ln.setHeaders(h, c.now)
	c.workspaceHeaders(ln.pool, h, c.now)
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	c.rw.WriteHeader(200)
	fl, _ := c.rw.(http.Flusher)
	ctx := c.r.Context()
	event := func(name string, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(c.rw, "event: %s\ndata: %s\n\n", name, b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	if sleep(ctx, ttft) != nil {
		return false
	}
	start := *msg
	start.Content = []api.ContentBlock{}
	start.StopReason = ""
	startUsage := msg.Usage
	startUsage.OutputTokens = 1
	type startMsg struct {
		api.Message
		StopReason *string `json:"stop_reason"`
	}
	ok := event("message_start", map[string]any{"type": "message_start", "message": startMsg{Message: withUsage(start, startUsage)}}) &&
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) &&
		event("ping", map[string]any{"type": "ping"})
	if !ok {
		return false
	}
	words := strings.SplitAfter(ans.text, " ")
	if ans.text == "" {
		words = nil
	}
	const chunks = 16
	per := (len(words) + chunks - 1) / chunks
	gen := total - ttft
	for i := 0; i < len(words); i += max(per, 1) {
		j := min(len(words), i+max(per, 1))
		if sleep(ctx, gen/chunks) != nil {
			return false
		}
		if !event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": strings.Join(words[i:j], "")}}) {
			return false
		}
	}
	u := msg.Usage
	return event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": msg.StopReason, "stop_sequence": nil},
			"usage": map[string]any{"input_tokens": u.InputTokens, "cache_creation_input_tokens": u.CacheCreationInputTokens,
				"cache_read_input_tokens": u.CacheReadInputTokens, "output_tokens": u.OutputTokens}}) &&
		event("message_stop", map[string]any{"type": "message_stop"})
}

func withUsage(m api.Message, u api.Usage) api.Message { m.Usage = u; return m }

// handleCountTokens serves POST /v1/messages/count_tokens: free, limited by
// its own per-org RPM, independent of Messages limits.
func (s *Server) handleCountTokens(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	if c == nil {
		return
	}
	body, ok := c.readBody(api.MaxMessagesBytes)
	if !ok {
		return
	}
	// count_tokens takes no max_tokens: supply one so the shared reader
	// validates the rest.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		c.fail(badRequest("Request body is not valid JSON: %v", err))
		return
	}
	if _, has := m["max_tokens"]; has {
		c.fail(badRequest("max_tokens: Extra inputs are not permitted"))
		return
	}
	m["max_tokens"] = json.RawMessage("1")
	withMax, _ := json.Marshal(m)
	p, rerr := readPrompt(&s.cfg, withMax, false)
	if rerr != nil {
		c.fail(rerr)
		return
	}
	wait, ok := c.org.takeSurface(&c.org.tokenCount, c.now)
	c.org.surfaceHeaders(rw.Header(), &c.org.tokenCount, c.now)
	if !ok {
		c.org.mu.Lock()
		c.org.counters.TokenCountLimited++
		c.org.mu.Unlock()
		c.rateLimited(wait, fmt.Sprintf("This request would exceed your organization's rate limit of %s token counting requests per minute.", commas(scaleLimit(c.org.cfg.TokenCountRPM, s.cfg.TimeScale))))
		return
	}
	c.writeJSON(api.TokenCount{InputTokens: p.inputTokens})
}

// modelObjects lists the catalog plus models known only through the config.
func (s *Server) modelObjects() []api.ModelObject {
	var out []api.ModelObject
	for _, m := range api.Models() {
		out = append(out, api.ModelObject{Type: "model", ID: m.ID, DisplayName: m.DisplayName, CreatedAt: m.CreatedAt})
	}
	for id := range s.cfg.Pools {
		if _, ok := api.LookupModel(id); !ok {
			out = append(out, api.ModelObject{Type: "model", ID: id, DisplayName: id, CreatedAt: "2026-01-01T00:00:00Z"})
		}
	}
	return out
}

// handleModels serves GET /v1/models with the API's cursor pagination
// (limit 1-1000, default 20; after_id / before_id).
func (s *Server) handleModels(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	if c == nil {
		return
	}
	page, rerr := paginate(r, s.modelObjects(), func(m api.ModelObject) string { return m.ID })
	if rerr != nil {
		c.fail(rerr)
		return
	}
	c.writeJSON(page)
}

func (s *Server) handleModel(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	if c == nil {
		return
	}
	id := r.PathValue("id")
	for _, m := range s.modelObjects() {
		if m.ID == id {
			c.writeJSON(m)
			return
		}
		if info, ok := api.LookupModel(id); ok && info.ID == m.ID {
			c.writeJSON(m)
			return
		}
	}
	c.fail(&requestError{404, api.ErrNotFound, "model: " + id})
}

// paginate cuts items (in list order) by the API's cursor parameters.
func paginate[T any](r *http.Request, items []T, id func(T) string) (api.Page[T], *requestError) {
	page, err := api.Paginate(r.URL.Query(), items, id)
	if err != nil {
		return page, badRequest("%s", err)
	}
	return page, nil
}
