// Package cacheprefix finds the prompt prefix a job's requests share and
// places one prompt-cache breakpoint at its end (docs/caching.md).
//
// A request's prompt is read, in the API's cache order (tools, system,
// messages), as units: the tools (one unit), each system block, each
// content block of each message. Each unit is fingerprinted with everything
// before it and the model, so two requests share a unit's fingerprint
// exactly when their prompts are identical up to its end. A Survey counts
// the fingerprints over a job; a request's shared prefix is its deepest
// unit seen on at least two requests that reaches the model's minimum
// cacheable length. Inject adds the breakpoint there.
//
// Every function takes params that json.Valid accepted and the jsonl
// validator passed (an object with messages); on other input the result
// is unspecified.
package cacheprefix

import (
	"bytes"
	"hash/fnv"

	"github.com/sluice-dev/sluice/internal/format/rawjson"
)

// Kind is where in a request a unit is.
type Kind uint8

const (
	Tools   Kind = iota + 1 // the tools array (a breakpoint goes on its last tool)
	System                  // system block Block (a string system is block 0)
	Message                 // content block Block of message Msg (a string content is block 0)
)

// Place is where a breakpoint at a unit goes.
type Place struct {
	Kind       Kind
	Msg, Block int
}

// Unit is one piece of a prompt with everything before it.
type Unit struct {
	// Hash fingerprints the model and the prompt up to and including the
	// unit.
	Hash uint64
	// Tokens estimates the prompt's tokens up to and including the unit,
	// by jsonl's rule (characters of text ÷ 4, 4 per message).
	Tokens int64
	At     Place
	ok     bool // a breakpoint may end here
}

// Units returns the units of params (model's request) that could end a
// shared prefix — every unit but the prompt's last, which is the request's
// own — and whether the request already has a cache_control breakpoint of
// its own (then sluice leaves it as written).
func Units(params []byte) (units []Unit, own bool) {
	// Each object and array read into an array on the stack
	// (rawjson.AppendMembers), reused from one message to the next: the
	// survey reads every request of a job this way.
	var pmBuf, mmBuf [16]rawjson.Member
	var elBuf, blockBuf [16][]byte
	pm := rawjson.AppendMembers(pmBuf[:0], params)
	// A breakpoint of the request's own: a cache_control member at the top
	// (automatic caching) or on a tool, a system block or a content block
	// — by decoded key, so an escaped key counts and a tool's schema
	// property named cache_control does not.
	own = rawjson.Lookup(pm, "cache_control") != nil
	h := fnv.New64a()
	var chars, msgs int64
	if m := rawjson.Lookup(pm, "model"); m != nil {
		h.Write(m)
	}
	// add appends a unit; marks says whether a breakpoint may end there
	// (not on a thinking block, which cannot carry one, nor on an empty
	// text block), and the unit is hashed either way.
	add := func(raw []byte, text int, at Place, marks bool) {
		h.Write(raw)
		chars += int64(text)
		units = append(units, Unit{Hash: h.Sum64(), Tokens: (chars+3)/4 + 4*msgs, At: at, ok: marks})
	}
	block := func(b []byte) (text int, marks bool) {
		if b[0] != '{' {
			return 0, false
		}
		var bmBuf [8]rawjson.Member
		bm := rawjson.AppendMembers(bmBuf[:0], b)
		if rawjson.Lookup(bm, "cache_control") != nil {
			own = true
		}
		switch t := rawjson.Lookup(bm, "type"); {
		case bytes.Equal(t, []byte(`"thinking"`)), bytes.Equal(t, []byte(`"redacted_thinking"`)):
			return 0, false
		case bytes.Equal(t, []byte(`"text"`)):
			n := 0
			if v := rawjson.Lookup(bm, "text"); v != nil && v[0] == '"' {
				n = rawjson.StringLen(v)
			}
			return n, n > 0
		}
		return 0, true
	}
	if tools := rawjson.Lookup(pm, "tools"); tools != nil && tools[0] == '[' {
		if els := rawjson.AppendElements(blockBuf[:0], tools); len(els) > 0 {
			for _, t := range els {
				if t[0] == '{' && rawjson.Lookup(rawjson.AppendMembers(mmBuf[:0], t), "cache_control") != nil {
					own = true
				}
			}
			add(tools, len(tools), Place{Kind: Tools}, els[len(els)-1][0] == '{')
		}
	}
	if sys := rawjson.Lookup(pm, "system"); sys != nil {
		switch sys[0] {
		case '"':
			n := rawjson.StringLen(sys)
			add(sys, n, Place{Kind: System}, n > 0)
		case '[':
			for i, b := range rawjson.AppendElements(blockBuf[:0], sys) {
				n, marks := block(b)
				add(b, n, Place{Kind: System, Block: i}, marks)
			}
		}
	}
	if list := rawjson.Lookup(pm, "messages"); list != nil && list[0] == '[' {
		for i, m := range rawjson.AppendElements(elBuf[:0], list) {
			msgs++
			mm := rawjson.AppendMembers(mmBuf[:0], m)
			h.Write(rawjson.Lookup(mm, "role"))
			content := rawjson.Lookup(mm, "content")
			switch {
			case content == nil:
			case content[0] == '"':
				n := rawjson.StringLen(content)
				add(content, n, Place{Kind: Message, Msg: i}, n > 0)
			case content[0] == '[':
				for j, b := range rawjson.AppendElements(blockBuf[:0], content) {
					n, marks := block(b)
					add(b, n, Place{Kind: Message, Msg: i, Block: j}, marks)
				}
			}
		}
	}
	if len(units) > 0 {
		units = units[:len(units)-1]
	}
	return units, own
}

// Survey counts, over a job, how many requests share each unit that
// reaches the minimum cacheable length. Units below it are not kept, so a
// job whose requests share one long system prompt holds one entry however
// many requests it has; a job of a million requests each with its own long
// system prompt holds a million (docs/caching.md gives their size).
type Survey struct {
	units map[uint64]entry
}

// entry is one unit's survey: the requests sharing it, and what Reach
// needs to find each request's breakpoint again without the requests.
type entry struct {
	parent uint64 // the previous unit of the same prompts that reaches the minimum (0: none)
	tokens int64
	count  int32 // requests whose prompts share the unit
	leaf   int32 // requests whose deepest unit reaching the minimum it is
	ok     bool  // a breakpoint may end here
	relief bool  // tokens reach the larger reading of the minimum (Add's reliefMin)
}

// NewSurvey returns an empty survey.
func NewSurvey() *Survey { return &Survey{units: map[uint64]entry{}} }

// Add counts the units of a request whose model caches prefixes of at
// least min tokens as documented, and reliefMin (≥ min) by the larger
// reading where sources disagree (Reach counts only those).
func (s *Survey) Add(units []Unit, min, reliefMin int64) {
	var prev uint64
	for _, u := range units {
		if u.Tokens < min {
			continue
		}
		e := s.units[u.Hash]
		if e.count < 1<<30 {
			e.count++
		}
		e.parent, e.tokens, e.ok, e.relief = prev, u.Tokens, u.ok, u.Tokens >= reliefMin
		s.units[u.Hash] = e
		prev = u.Hash
	}
	if prev != 0 {
		e := s.units[prev]
		if e.leaf < 1<<30 {
			e.leaf++
		}
		s.units[prev] = e
	}
}

// Shared returns the deepest of units that can carry a breakpoint,
// reaches min, and is shared by at least atLeast (≥ 2) requests of the
// survey: where the request's breakpoint goes.
func (s *Survey) Shared(units []Unit, min int64, atLeast int) (Unit, bool) {
	atLeast = max(atLeast, 2)
	for i := len(units) - 1; i >= 0; i-- {
		if u := units[i]; u.ok && u.Tokens >= min && int(s.units[u.Hash].count) >= atLeast {
			return u, true
		}
	}
	return Unit{}, false
}

// Sharers is how many pending requests must share a prompt prefix before
// a breakpoint is added for it, for a job over orgs organizations: each
// writes the prefix once (1.25× its input) before reads (0.1×) repay that,
// so a prefix shared by fewer than three requests per organization, or
// fewer than eight, is sent as written.
func Sharers(orgs int) int { return max(8, 3*orgs) }

// SurveyLines surveys a job's pending requests: next returns each one's
// params and model until ok is false. For `sluice plan --input`, which
// has no run to survey with.
func SurveyLines(next func() (params []byte, model string, ok bool), minimums func(model string) (min, reliefMin int64)) *Survey {
	s := NewSurvey()
	for {
		params, model, ok := next()
		if !ok {
			return s
		}
		units, own := Units(params)
		if own || len(units) == 0 {
			continue
		}
		lo, hi := minimums(model)
		s.Add(units, lo, hi)
	}
}

// Reach is what the cache can spare a job, for the planner: the surveyed
// requests whose breakpoint (Shared at atLeast) ends a prefix that reaches
// the larger reading of the minimum, the prefix tokens of those requests
// summed, and how many distinct prefixes they are (each organization
// writes each once).
type Reach struct {
	Requests int
	Tokens   int64
	Prefixes int
}

// Reach finds every surveyed request's breakpoint again — from the
// deepest unit it reached, up through the units before it, the first that
// can carry one and is shared by atLeast — and sums those that count.
func (s *Survey) Reach(atLeast int) Reach {
	atLeast = max(atLeast, 2)
	var r Reach
	chosen := map[uint64]bool{}
	for h, e := range s.units {
		if e.leaf == 0 {
			continue
		}
		for g, f := h, e; ; {
			if f.ok && int(f.count) >= atLeast {
				if f.relief {
					r.Requests += int(e.leaf)
					r.Tokens += int64(e.leaf) * f.tokens
					chosen[g] = true
				}
				break
			}
			if f.parent == 0 {
				break
			}
			g, f = f.parent, s.units[f.parent]
		}
	}
	r.Prefixes = len(chosen)
	return r
}

// Any reports whether at least two requests share any unit.
func (s *Survey) Any() bool {
	for _, e := range s.units {
		if e.count >= 2 {
			return true
		}
	}
	return false
}
