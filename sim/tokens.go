package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// The simulator's tokenizer: every whitespace-separated word costs
// ceil(len/4) tokens, each message 4 more, a system prompt 3, a request 7.
// It is deliberately not the chars/4 estimate a client might use, so clients
// must correct their estimates from usage as they would against the real API.
const (
	tokensPerRequest = 7
	tokensPerMessage = 4
	tokensPerSystem  = 3
	tokensPerImage   = 1500
)

// countText returns the simulator's token count of s.
func countText(s string) int64 {
	var n int64
	word := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\n', '\t', '\r':
			n += int64((word + 3) / 4)
			word = 0
		default:
			word++
		}
	}
	return n + int64((word+3)/4)
}

// prompt is the simulator's reading of a Messages request.
type prompt struct {
	req   api.MessageRequest
	model string
	pool  api.Pool
	info  api.ModelInfo // zero for models known only through Config.Pools

	inputTokens int64 // total input tokens (uncached + cache write + cache read)
	// The prompt-cache breakpoint furthest into the prompt, if any.
	cachePrefix int64 // tokens up to and including it
	cacheKey    uint64
	cacheTTL    time.Duration
	// verdict: verdicts are enabled and the system prompt asks for one.
	verdict bool
}

// requestError is a client error found while reading a request.
type requestError struct {
	status int
	typ    api.ErrorType
	msg    string
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{400, api.ErrInvalidRequest, fmt.Sprintf(format, args...)}
}

// readPrompt parses and validates a Messages body. inBatch applies the
// Message Batches restrictions (no streaming, no max_tokens 0, no fast mode).
func readPrompt(cfg *Config, body []byte, inBatch bool) (*prompt, *requestError) {
	p := &prompt{}
	if err := json.Unmarshal(body, &p.req); err != nil {
		return nil, badRequest("Request body is not valid JSON: %v", err)
	}
	r := &p.req
	if r.Model == "" {
		return nil, badRequest("model: Field required")
	}
	p.model = r.Model
	pool, ok := cfg.poolOf(r.Model)
	if !ok {
		return nil, &requestError{404, api.ErrNotFound, "model: " + r.Model}
	}
	p.pool = pool
	p.info, _ = api.LookupModel(r.Model)
	if r.MaxTokens == nil {
		return nil, badRequest("max_tokens: Field required")
	}
	maxOut := 64000
	if p.info.MaxOutput > 0 {
		maxOut = p.info.MaxOutput
	}
	switch mt := *r.MaxTokens; {
	case mt < 0:
		return nil, badRequest("max_tokens: Input should be greater than or equal to 0")
	case mt == 0 && inBatch:
		return nil, badRequest("max_tokens: must be at least 1 in a Message Batch")
	case mt > maxOut:
		return nil, badRequest("max_tokens: %d > %d, which is the maximum allowed number of output tokens for %s", mt, maxOut, r.Model)
	}
	if inBatch && r.Stream {
		return nil, badRequest("stream: streaming is not supported in Message Batches")
	}
	if inBatch && r.Speed != "" {
		return nil, badRequest("speed: fast mode is not supported in Message Batches")
	}
	if r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1) {
		return nil, badRequest("temperature: Input should be less than or equal to 1 and greater than or equal to 0")
	}
	if r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1) {
		return nil, badRequest("top_p: Input should be between 0 and 1")
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required")
	}

	p.inputTokens = tokensPerRequest
	h := fnv.New64a()
	h.Write([]byte(p.model))
	var lastBreak struct {
		tokens int64
		key    uint64
		ttl    time.Duration
	}
	// segment accounts one piece of the prompt, in order; a cache_control on
	// it makes everything so far a cacheable prefix.
	segment := func(text string, tokens int64, cc *api.CacheControl) {
		p.inputTokens += tokens
		h.Write([]byte(text))
		if cc != nil {
			lastBreak.tokens, lastBreak.key = p.inputTokens, h.Sum64()
			lastBreak.ttl = 5 * time.Minute
			if cc.TTL == "1h" {
				lastBreak.ttl = time.Hour
			}
		}
	}
	// Tools come first in the cache's order (tools, system, messages). A
	// cache_control on any tool makes the tools a prefix (the usual place
	// is the last tool; the tools are counted as one piece).
	if len(r.Tools) > 0 && !bytes.Equal(r.Tools, []byte("null")) {
		var tools []struct {
			CacheControl *api.CacheControl `json:"cache_control"`
		}
		_ = json.Unmarshal(r.Tools, &tools) // not an array: counted, never cached
		var cc *api.CacheControl
		for _, t := range tools {
			if t.CacheControl != nil {
				cc = t.CacheControl
			}
		}
		segment(string(r.Tools), int64(len(r.Tools)+3)/4, cc)
	}
	if len(r.System) > 0 && !bytes.Equal(r.System, []byte("null")) {
		p.inputTokens += tokensPerSystem
		var s string
		if json.Unmarshal(r.System, &s) == nil {
			segment(s, countText(s), nil)
			p.verdict = cfg.Verdicts.Enabled && VerdictPrompt(s)
		} else {
			var blocks []api.ContentBlock
			if err := json.Unmarshal(r.System, &blocks); err != nil {
				return nil, badRequest("system: Input should be a valid string or a list of text blocks")
			}
			for i, b := range blocks {
				if b.Type != "text" {
					return nil, badRequest("system.%d.type: Input should be 'text'", i)
				}
				segment(b.Text, countText(b.Text), b.CacheControl)
			}
			if cfg.Verdicts.Enabled {
				var all strings.Builder
				for _, b := range blocks {
					all.WriteString(b.Text)
					all.WriteByte('\n')
				}
				p.verdict = VerdictPrompt(all.String())
			}
		}
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "user", "assistant":
		case "system":
			return nil, badRequest("messages.%d.role: Input should be 'user' or 'assistant'. The Messages API has no \"system\" role: put system instructions in the top-level \"system\" parameter", i)
		default:
			return nil, badRequest("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		p.inputTokens += tokensPerMessage
		h.Write([]byte(m.Role))
		if len(m.Content) == 0 {
			return nil, badRequest("messages.%d.content: Field required", i)
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			if s == "" && i < len(r.Messages)-1 {
				return nil, badRequest("messages.%d.content: text content blocks must be non-empty", i)
			}
			segment(s, countText(s), nil)
			continue
		}
		var blocks []json.RawMessage
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, badRequest("messages.%d.content: Input should be a valid string or a list of content blocks", i)
		}
		if len(blocks) == 0 {
			return nil, badRequest("messages.%d.content: at least one content block is required", i)
		}
		for j, raw := range blocks {
			var b api.ContentBlock
			if err := json.Unmarshal(raw, &b); err != nil || b.Type == "" {
				return nil, badRequest("messages.%d.content.%d: a content block needs a type", i, j)
			}
			switch b.Type {
			case "text":
				segment(b.Text, countText(b.Text), b.CacheControl)
			case "image", "document":
				segment(string(raw), tokensPerImage, b.CacheControl)
			default:
				segment(string(raw), int64(len(raw)+3)/4, b.CacheControl)
			}
		}
	}
	if r.CacheControl != nil { // automatic caching: the whole prompt is the prefix
		segment("", 0, r.CacheControl)
	}
	if cfg.PromptCache && lastBreak.tokens >= int64(p.info.CacheMinimum()) {
		p.cachePrefix, p.cacheKey, p.cacheTTL = lastBreak.tokens, lastBreak.key, lastBreak.ttl
	}
	return p, nil
}

// maxTokens returns the request's max_tokens (validated present).
func (p *prompt) maxTokens() int64 { return int64(*p.req.MaxTokens) }
