package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/internal/rawjson"
	"github.com/sluice-dev/sluice/keys"
)

// Priming (docs/caching.md, "Priming before batches"). In Message Batches
// prompt-cache hits are best effort and a batch created while its org's
// cache is cold reads nothing: its rows run together and none sees
// another's write. So before an org's chunk is created, every shared
// prefix the chunk's requests carry (call.Request.CachePrefix, set by the
// job when it added a breakpoint) that this org has not primed lately is
// written by one small sync request: the prefix's first request in the
// chunk, as prepared for the batch (its 1 h breakpoint), with max_tokens 1.
// Its answer is thrown away; its usage goes to Config.OnPrime so the run's
// cost and report count it. A prefix is primed again once half its TTL has
// passed since the last primer was sent: the batch's own reads refresh the
// entry, but when they happen is the API's to decide.
//
// Priming is best effort and never holds a create for long: a primer that
// fails (a 429 from a busy sync lane, a 5xx, a timeout) is logged and the
// chunk is created anyway, and the prefix is tried again with the org's
// next chunk. A request with extended thinking is not primed: max_tokens
// must exceed the thinking budget, so a small primer is not possible, and
// changing the thinking parameters would change what is cached.

// primeTimeout bounds one primer: a create waits at most this long for it.
const primeTimeout = 30 * time.Second

// Prime is one primer's outcome, for Config.OnPrime: the org and key
// labels, the model and the usage the API billed (zero when it failed).
type Prime struct {
	Org, Key string
	Model    string
	Usage    api.Usage
	OK       bool
}

// prime writes the chunk's shared prefixes into o's prompt cache, one
// primer per prefix not primed within half its TTL. Called by create
// under o.createMu, before the chunk's intent: a crash here leaves no
// trace but the primer's cost.
func (r *Runner) prime(ctx context.Context, c *chunk, key *keys.Key) {
	o := c.org
	seen := map[uint64]bool{}
	for _, req := range c.list {
		p := req.CachePrefix
		if p == 0 || req.CacheTTL <= 0 || seen[p] {
			continue
		}
		seen[p] = true
		now := r.now()
		r.mu.Lock()
		due := !now.Before(o.primed[p])
		r.mu.Unlock()
		if !due {
			continue
		}
		body, ok := primerBody(req.Body())
		if !ok {
			r.mu.Lock()
			o.primed[p] = now.Add(100 * 365 * 24 * time.Hour) // never primeable
			r.warnOnce("prime-thinking", "batch: a prefix whose requests use extended thinking is not primed before its batches (a primer cannot be small)", "org", o.label)
			r.mu.Unlock()
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, primeTimeout)
		out := r.do(pctx, key, "POST", messagesPath, body)
		cancel()
		pr := Prime{Org: o.label, Key: key.Label(), Model: req.Model, OK: out.Class == client.OK}
		r.mu.Lock()
		if pr.OK {
			pr.Usage = out.Usage
			o.primed[p] = now.Add(req.CacheTTL / 2)
			r.stats.Primed++
		} else {
			r.stats.PrimeFailed++
		}
		r.mu.Unlock()
		if !pr.OK {
			r.log.Info("batch: priming the prompt cache failed; creating the batch anyway", "org", o.label, "status", out.Status, "err", out.Err)
		}
		if r.cfg.OnPrime != nil {
			r.cbMu.Lock()
			r.cfg.OnPrime(pr)
			r.cbMu.Unlock()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// messagesPath is the Messages endpoint a primer is sent to.
const messagesPath = "/v1/messages"

// primerBody is params (a request body json.Valid accepted) with
// max_tokens 1 and no stream member: the same prompt, so the same cached
// prefix, for one output token. It reports false for a request with
// extended thinking (a "thinking" member other than {"type":"disabled"}).
func primerBody(params []byte) ([]byte, bool) {
	ms := rawjson.Members(params)
	if th := rawjson.Lookup(ms, "thinking"); th != nil {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(th, &t) != nil || t.Type != "disabled" {
			return nil, false
		}
	}
	var b bytes.Buffer
	b.Grow(len(params))
	b.WriteByte('{')
	for _, m := range ms {
		if m.Is("max_tokens") || m.Is("stream") {
			continue
		}
		k, _ := json.Marshal(m.Key())
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.Val)
		b.WriteByte(',')
	}
	b.WriteString(`"max_tokens":1}`)
	return b.Bytes(), true
}
