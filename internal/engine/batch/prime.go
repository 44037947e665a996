package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/format/rawjson"
	"github.com/sluice-dev/sluice/keys"
)

// Priming (docs/caching.md, "Priming before batches"): before an org's
// chunk is created, each shared prefix its requests carry
// (call.Request.CachePrefix) that the org has not primed within half the
// prefix's TTL is written into the org's prompt cache by one sync request —
// the prefix's first request in the chunk as prepared for the batch, with
// max_tokens 0 (1 where 0 is refused) — whose usage goes to
// Config.OnPrime. Best effort: a primer that fails is logged and counted,
// the chunk is created anyway, and one chunk's primers share primeTimeout.
// A request with extended thinking does not prime; another request of the
// same prefix does. A seed chunk (seed.go) is not primed.

// primeTimeout bounds one chunk's primers: a create waits at most this
// long for them.
const primeTimeout = 30 * time.Second

// Prime is one primer's outcome, for Config.OnPrime: the org and key
// labels, the model and the usage the API billed (zero when it failed).
type Prime struct {
	Org, Key string
	Model    string
	Usage    api.Usage
	OK       bool
}

// primer is one primer to send: a shared prefix and the request that
// writes it.
type primer struct {
	prefix uint64
	req    *call.Request
	// sent is when it was sent, out its answer (the step's).
	sent time.Time
	out  client.Outcome
}

// primers returns the primers c needs on its org at now — the first
// request of each shared prefix not primed there within half its TTL that
// can prime — and whether a request of such a prefix could not (extended
// thinking). A seed needs none: its own row writes the prefix in a batch,
// the warmth the chunks after it wait for; a sync write before it (2× the
// full price) is the reading users measured low, and would delay it.
func (r *Runner) primers(c *chunk, now time.Time) (ps []*primer, thinking bool) {
	if c.seedFor != nil {
		return nil, false
	}
	done := map[uint64]bool{}
	for _, req := range c.list {
		p := req.CachePrefix
		if p == 0 || req.CacheTTL <= 0 || done[p] {
			continue
		}
		if now.Before(c.org.primed[p]) {
			done[p] = true
			continue
		}
		if _, ok := primerBody(req.Body(), 0); !ok {
			thinking = true // this request cannot prime; another of the prefix may
			continue
		}
		done[p] = true
		ps = append(ps, &primer{prefix: p, req: req})
	}
	return ps, thinking
}

// primeReport is a prime step's outcome: the primers it sent (those past
// primeTimeout are left for the org's next chunk).
type primeReport struct {
	c    *chunk
	key  *keys.Key
	sent []*primer
	// one: an endpoint refused max_tokens 0 and took 1.
	one bool
}

func (rep *primeReport) of() *chunk { return rep.c }

// startPrime starts c's prime step: ps sent one after another with key,
// all within primeTimeout.
func (r *Runner) startPrime(c *chunk, key *keys.Key, ps []*primer) {
	one := r.primeOne
	r.start(c, r.live.pollCtx, func(ctx context.Context) report {
		rep := &primeReport{c: c, key: key}
		pctx, cancel := context.WithTimeout(ctx, primeTimeout)
		defer cancel()
		for _, p := range ps {
			p.sent = r.now()
			if !one {
				body, _ := primerBody(p.req.Body(), 0)
				p.out = r.do(pctx, key, "POST", messagesPath, body)
			}
			if one || (p.out.Class == client.Invalid && p.out.Status == http.StatusBadRequest) {
				// An API or gateway that refuses max_tokens 0 (the
				// documented pre-warm): one output token instead, and from
				// then on if that is taken.
				body, _ := primerBody(p.req.Body(), 1)
				p.out = r.do(pctx, key, "POST", messagesPath, body)
				if p.out.Class == client.OK && !one {
					one, rep.one = true, true
				}
			}
			rep.sent = append(rep.sent, p)
			if pctx.Err() != nil {
				break // out of time (or interrupted): the rest with the next chunk
			}
		}
		return rep
	})
}

// primed applies a prime step's report: each primer counted and handed to
// OnPrime, then the chunk created — unless the run stopped meanwhile, or
// priming took it past the cutoff or a Cancel came (re-routed).
func (r *Runner) primed(rep *primeReport) {
	c, o := rep.c, rep.c.org
	if rep.one && !r.primeOne {
		r.primeOne = true
		r.log.Info("batch: max_tokens 0 refused for a prompt-cache primer; priming with max_tokens 1", "org", o.label)
	}
	for _, p := range rep.sent {
		pr := Prime{Org: o.label, Key: rep.key.Label(), Model: p.req.Model, OK: p.out.Class == client.OK}
		if pr.OK {
			pr.Usage = p.out.Usage
			o.primed[p.prefix] = p.sent.Add(p.req.CacheTTL / 2)
			if p.out.Usage.CacheReadInputTokens > 0 {
				o.notePrimerRead(p.prefix, p.req.CacheTTL, p.sent)
			}
			r.stats.Primed++
		} else {
			r.stats.PrimeFailed++
			r.log.Info("batch: priming the prompt cache failed; creating the batch anyway", "org", o.label, "status", p.out.Status, "err", p.out.Err)
		}
		if r.cfg.OnPrime != nil && !r.crash.dead.Load() {
			r.cfg.OnPrime(pr)
		}
	}
	if r.live.pollCtx.Err() != nil {
		return // interrupted while priming: nothing was created
	}
	if why := r.lateOrCancelled(r.now()); why != "" {
		r.abandon(c, why, moveReroute)
		return
	}
	r.enter(c, creating)
	c.try.key = rep.key
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
