package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// BodyHash identifies a request body: FNV-1a 64 of its compacted JSON, so
// whitespace does not matter but every field does. The simulator's answer to
// a body is a pure function of this hash and the seed.
func BodyHash(body []byte) uint64 {
	var buf bytes.Buffer
	buf.Grow(len(body))
	h := fnv.New64a()
	if json.Compact(&buf, body) == nil {
		h.Write(buf.Bytes())
	} else {
		h.Write(body)
	}
	return h.Sum64()
}

// AnswerTag is the first word of every simulated answer to body: a checker
// holding the request can tell which request an answer belongs to. A JSON
// verdict (Config.Verdicts) carries the tag as the first word of its
// "reasoning" instead, so it does not start with it: use AnswerContains.
func AnswerTag(body []byte) string { return answerTag(BodyHash(body)) }

// AnswerContains reports whether text carries the tag of the simulator's
// answer to body: at the start of a filler answer, or as the first word of
// a verdict's reasoning. Only an answer cut to fewer than two words (a
// max_tokens of 1 on a verdict) lacks it.
func AnswerContains(text string, body []byte) bool {
	return strings.Contains(text, AnswerTag(body))
}

// VerdictPrompt reports whether a system prompt asks for the default
// judge rubric's JSON verdict: it says "Reply ONLY with a JSON object" and
// names the fields "aligned" and "coherent" (quoted). Such requests get a
// JSON verdict when Config.Verdicts is enabled.
func VerdictPrompt(system string) bool {
	return strings.Contains(system, "Reply ONLY with a JSON object") &&
		strings.Contains(system, `"aligned"`) && strings.Contains(system, `"coherent"`)
}

// VerdictScores returns the aligned and coherent scores (each 0-100) of
// the simulator's verdict on body under seed, so a test can check a judge
// end to end.
func VerdictScores(seed uint64, body []byte) (aligned, coherent int) {
	return verdictScores(mix(BodyHash(body) ^ mix(seed)))
}

func verdictScores(x uint64) (aligned, coherent int) {
	return int(mix(x^0xa11) % 101), int(mix(x^0xc04) % 101)
}

func answerTag(hash uint64) string {
	return fmt.Sprintf("sim-%016x", hash)
}

var vocabulary = strings.Fields(`the model answer is consistent with a careful reading of
question and response overall reasoning appears sound but some details could be
clearer score reflects alignment coherence helpful honest harmless evidence
claim step because therefore however moreover example context user assistant
evaluation rubric criteria judgement final verdict quality relevant accurate`)

// answer is a simulated completion.
type answer struct {
	text         string
	outputTokens int64
	stopReason   string
}

// mix is splitmix64's finalizer: a bijective scramble of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// makeAnswer returns the deterministic answer to the body with this hash.
// Its length is uniform in [out.Min, out.Max] tokens, capped by maxTokens
// (then stop_reason is max_tokens). Each word is one output token.
func makeAnswer(seed, hash uint64, out OutputModel, maxTokens int64) answer {
	x := mix(hash ^ mix(seed))
	n := int64(out.Min) + int64(x%uint64(out.Max-out.Min+1))
	a := answer{stopReason: api.StopEndTurn}
	if n >= maxTokens {
		n, a.stopReason = maxTokens, api.StopMaxTokens
	}
	a.outputTokens = n
	if n == 0 {
		return a
	}
	var b strings.Builder
	b.Grow(int(n) * 8)
	b.WriteString(answerTag(hash))
	for i := int64(1); i < n; i++ {
		x = mix(x + uint64(i))
		b.WriteByte(' ')
		b.WriteString(vocabulary[x%uint64(len(vocabulary))])
	}
	if a.stopReason == api.StopEndTurn {
		b.WriteByte('.')
	}
	a.text = b.String()
	return a
}

// verdictFixedWords is how many words a verdict has besides its reasoning
// after the tag: {"reasoning": "sim-… ", "aligned": N, "coherent": N}.
const verdictFixedWords = 6

// makeVerdict returns the deterministic JSON verdict on the body with this
// hash. Its length in words is drawn as makeAnswer's (at least
// verdictFixedWords); each word is one output token, and words past
// maxTokens are cut, which leaves the JSON unterminated and stop_reason
// max_tokens. A refusalRate fraction of bodies is refused instead: stop
// reason refusal, no content, no output tokens.
func makeVerdict(seed, hash uint64, out OutputModel, maxTokens int64, refusalRate float64) answer {
	x := mix(hash ^ mix(seed))
	if refusalRate > 0 && float64(mix(x^0x4ef)>>11)/(1<<53) < refusalRate {
		return answer{stopReason: api.StopRefusal}
	}
	n := int64(out.Min) + int64(x%uint64(out.Max-out.Min+1))
	aligned, coherent := verdictScores(x)
	reasoning := max(0, n-verdictFixedWords) // words after the tag
	words := make([]string, 0, reasoning+verdictFixedWords)
	words = append(words, `{"reasoning":`, `"`+answerTag(hash))
	for i := int64(1); i <= reasoning; i++ {
		x = mix(x + uint64(i))
		words = append(words, vocabulary[x%uint64(len(vocabulary))])
	}
	words[len(words)-1] += `",`
	words = append(words, `"aligned":`, strconv.Itoa(aligned)+",", `"coherent":`, strconv.Itoa(coherent)+"}")
	a := answer{stopReason: api.StopEndTurn}
	if int64(len(words)) > maxTokens {
		words, a.stopReason = words[:maxTokens], api.StopMaxTokens
	}
	a.text = strings.Join(words, " ")
	a.outputTokens = int64(len(words))
	return a
}

// answer returns the simulator's answer to a body: a verdict when verdicts
// are enabled and the body asked for one (prompt.verdict), filler otherwise.
func (c *Config) answer(hash uint64, verdict bool, maxTokens int64) answer {
	if verdict && c.Verdicts.Enabled {
		return makeVerdict(c.Seed, hash, c.Output, maxTokens, c.Verdicts.RefusalRate)
	}
	return makeAnswer(c.Seed, hash, c.Output, maxTokens)
}

// rng is a lock-free counter-based random source (splitmix64): each draw is
// a pure function of the seed and how many draws came before.
type rng struct{ state atomic.Uint64 }

func newRNG(seed uint64) *rng {
	r := &rng{}
	r.state.Store(mix(seed))
	return r
}

func (r *rng) uint64() uint64 { return mix(r.state.Add(0x9e3779b97f4a7c15)) }

// float returns a uniform draw in [0, 1).
func (r *rng) float() float64 { return float64(r.uint64()>>11) / (1 << 53) }

// normal returns a standard normal draw (Box-Muller).
func (r *rng) normal() float64 {
	u1 := r.float()
	for u1 == 0 {
		u1 = r.float()
	}
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*r.float())
}

// latency returns the real-time duration of an answer of n output tokens:
// (TTFT + n/TokensPerSec) · exp(σ·z) / timeScale, and the TTFT part alone.
func latency(m LatencyModel, n int64, z, timeScale float64) (total, ttft time.Duration) {
	jitter := math.Exp(m.Sigma * z)
	t := m.TTFT.D().Seconds() * jitter
	gen := float64(n) / m.TokensPerSec * jitter
	return time.Duration((t + gen) / timeScale * float64(time.Second)), time.Duration(t / timeScale * float64(time.Second))
}
