package jsonl

import (
	"encoding/hex"
	"hash/maphash"
	"math"
)

// Accepted remembers, per line number, a 64-bit fingerprint of each line a
// Validator accepted and what validating it found (the params hash, the
// model, max_tokens and the input estimate), so a later pass over the same
// file can tell that a line it reads again is byte for byte one already
// checked and take those facts instead of working them out again: it only
// reads custom_id and copies params.
//
// Why: the feed is one goroutine that every request passes through, and
// what it spends on a line delays every request behind it (docs/overhead.md,
// item 20). A line that changed since, one not accepted, and one whose
// facts do not fit (an estimate or max_tokens over 2³²−1, a model past the
// 65,535th) is checked in full: the fingerprint decides only whether the
// first pass's work can be reused, never whether a changed line is valid.
//
// Memory: 34 bytes per line of the file, in pages of 16,384 lines (544 KiB,
// allocated whole on the page's first Add) that are never copied (a slice
// grown by append holds up to a quarter more, and both copies while it
// grows). The zero value is ready to use; an Accepted is not safe for
// concurrent writes, and may be read concurrently once the pass that fills
// it has ended.
type Accepted struct {
	seed   maphash.Seed
	pages  []*acceptedPage // (line number − 1) / pageLines → its page
	models []string
	index  map[string]uint16 // model → its index in models
}

const pageLines = 1 << 14

// acceptedPage holds pageLines lines, indexed by (line number − 1) %
// pageLines.
type acceptedPage struct {
	sums  [pageLines]uint64 // fingerprint; 0: not kept
	facts [pageLines]facts  // what validating it found
	model [pageLines]uint16 // index in models
}

// facts is what validating an accepted line found, beyond its custom_id
// and params (which are read again: they are the line's own bytes).
type facts struct {
	paramsHash [16]byte
	est, max   uint32
}

// at returns line lineNo's page and its index there, or nil when no line
// of that page was added.
func (a *Accepted) at(lineNo int) (*acceptedPage, int) {
	i := lineNo - 1
	if a == nil || i < 0 || i/pageLines >= len(a.pages) {
		return nil, 0
	}
	return a.pages[i/pageLines], i % pageLines
}

// Add records line lineNo (1-based) as accepted, with info as a Validator
// returned it for these bytes without an error. A line whose facts do not
// fit is left out: a later pass checks it in full.
func (a *Accepted) Add(lineNo int, line []byte, info Info) {
	f, ok := factsOf(info)
	m, known := a.index[info.Model]
	if lineNo < 1 || !ok || !known && len(a.models) >= math.MaxUint16 {
		return
	}
	if a.index == nil {
		a.seed = maphash.MakeSeed()
		a.index = make(map[string]uint16)
	}
	if !known {
		m = uint16(len(a.models))
		a.models = append(a.models, info.Model)
		a.index[info.Model] = m
	}
	page := (lineNo - 1) / pageLines
	for len(a.pages) <= page {
		a.pages = append(a.pages, nil)
	}
	if a.pages[page] == nil {
		a.pages[page] = new(acceptedPage)
	}
	p, i := a.at(lineNo)
	p.sums[i], p.facts[i], p.model[i] = a.fingerprint(line), f, m
}

// factsOf packs info's facts, or reports that they do not fit.
func factsOf(info Info) (facts, bool) {
	var f facts
	if info.EstInputTokens < 0 || info.EstInputTokens > math.MaxUint32 ||
		info.MaxTokens < 1 || info.MaxTokens > math.MaxUint32 ||
		len(info.ParamsHash) != 2*len(f.paramsHash) {
		return f, false
	}
	if _, err := hex.Decode(f.paramsHash[:], []byte(info.ParamsHash)); err != nil {
		return f, false
	}
	f.est, f.max = uint32(info.EstInputTokens), uint32(info.MaxTokens)
	return f, true
}

// recall returns what validating line lineNo found (Model, MaxTokens,
// EstInputTokens, ParamsHash, a new string) when it was kept with exactly
// these bytes (a false positive needs a 64-bit collision of a per-process
// random hash).
func (a *Accepted) recall(lineNo int, line []byte) (Info, bool) {
	p, i := a.at(lineNo)
	if p == nil || p.sums[i] == 0 || a.fingerprint(line) != p.sums[i] {
		return Info{}, false
	}
	f := &p.facts[i]
	return Info{
		Model:          a.models[p.model[i]],
		MaxTokens:      int64(f.max),
		EstInputTokens: int64(f.est),
		ParamsHash:     hex.EncodeToString(f.paramsHash[:]),
	}, true
}

func (a *Accepted) fingerprint(line []byte) uint64 {
	if h := maphash.Bytes(a.seed, line); h != 0 {
		return h
	}
	return 1 // 0 marks a line not kept
}
