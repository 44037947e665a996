package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
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
// chunk, as prepared for the batch (its 1 h breakpoint), with max_tokens 0
// (the documented pre-warm; 1 where that is refused).
// Its answer is thrown away; its usage goes to Config.OnPrime so the run's
// cost and report count it. A prefix is primed again once half its TTL has
// passed since the last primer was sent: the batch's own reads refresh the
// entry, but when they happen is the API's to decide.
//
// Priming is best effort and never holds a create for long: a primer that
// fails (a 429 from a busy sync lane, a 5xx, a timeout) is logged and the
// chunk is created anyway, and the prefix is tried again with the org's
// next chunk; all of one chunk's primers get primeTimeout. A request with
// extended thinking does not prime (max_tokens must exceed its thinking
// budget); another request of the same prefix in the chunk does.
//
// Whether a batch reads what a sync request wrote is the API's to decide
// and users measured it low (a sync pre-warm reached 16 %, another 0 %;
// anthropic-api.md §10), while a batch after a warm batch read 100 %: the
// primer is cheap insurance, not a guarantee, and the report gives the
// batch hit rate the run got.

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
// primer per prefix not primed within half its TTL, all of them within
// primeTimeout: a prefix left over is primed with the org's next chunk.
// Called by create under o.createMu, before the chunk's intent: a crash
// here leaves no trace but the primers' cost. create checks its cutoff
// again afterwards.
func (r *Runner) prime(ctx context.Context, c *chunk, key *keys.Key) {
	if c.seedFor != nil {
		// A seed's own row writes the prefix in a batch, the warmth the
		// chunks after it wait for; a sync write before it (2× the full
		// price) is the reading users measured low, and would delay it.
		return
	}
	o := c.org
	done := map[uint64]bool{}
	thinking := false
	pctx, cancel := context.WithTimeout(ctx, primeTimeout)
	defer cancel()
	for _, req := range c.list {
		p := req.CachePrefix
		if p == 0 || req.CacheTTL <= 0 || done[p] {
			continue
		}
		now := r.now()
		r.mu.Lock()
		due := !now.Before(o.primed[p])
		r.mu.Unlock()
		if !due {
			done[p] = true
			continue
		}
		body, ok := primerBody(req.Body(), 0)
		if !ok {
			thinking = true // this request cannot prime; another of the prefix may
			continue
		}
		done[p] = true
		var out client.Outcome
		if !r.primeOne.Load() {
			out = r.do(pctx, key, "POST", messagesPath, body)
		}
		if r.primeOne.Load() || (out.Class == client.Invalid && out.Status == http.StatusBadRequest) {
			// An API or gateway that refuses max_tokens 0 (the documented
			// pre-warm): one output token instead, and from then on if
			// that is taken.
			body, _ = primerBody(req.Body(), 1)
			retry := r.do(pctx, key, "POST", messagesPath, body)
			if retry.Class == client.OK && !r.primeOne.Load() {
				r.primeOne.Store(true)
				r.log.Info("batch: max_tokens 0 refused for a prompt-cache primer; priming with max_tokens 1", "org", o.label)
			}
			out = retry
		}
		pr := Prime{Org: o.label, Key: key.Label(), Model: req.Model, OK: out.Class == client.OK}
		r.mu.Lock()
		if pr.OK {
			pr.Usage = out.Usage
			o.primed[p] = now.Add(req.CacheTTL / 2)
			if out.Usage.CacheReadInputTokens > 0 {
				o.notePrimerRead(p, req.CacheTTL, now)
			}
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
		if pctx.Err() != nil {
			return // out of time (or interrupted): the rest with the next chunk
		}
	}
	if thinking {
		r.mu.Lock()
		r.warnOnce("prime-thinking", "batch: requests with extended thinking do not prime the prompt cache before their batches (a primer cannot carry a thinking budget); a prefix only they carry is not primed", "org", o.label)
		r.mu.Unlock()
	}
}

// messagesPath is the Messages endpoint a primer is sent to.
const messagesPath = "/v1/messages"

// primerBody is params (a request body json.Valid accepted) with
// max_tokens set to maxTokens and no stream member: the same prompt, so
// the same cached prefix. max_tokens 0 is the documented pre-warm (no
// output); 1 is the fallback for an endpoint that refuses it. It reports
// false for a request with extended thinking (a "thinking" member other
// than {"type":"disabled"}): a thinking budget needs max_tokens above it.
func primerBody(params []byte, maxTokens int) ([]byte, bool) {
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
	b.WriteString(`"max_tokens":`)
	b.WriteString(strconv.Itoa(maxTokens))
	b.WriteByte('}')
	return b.Bytes(), true
}
