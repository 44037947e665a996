package jsonl

import "hash/maphash"

// Accepted remembers, per line number, a 64-bit fingerprint of each line a
// Validator accepted, so a later pass over the same file can tell a line it
// reads again is byte for byte one already checked and skip the syntax pass
// (json.Valid and utf8.Valid were a fifth of the engine's CPU, once in the
// survey and again in each feed: docs/overhead.md). A line that changed
// since, or one not accepted, is simply checked in full: the fingerprint
// decides only whether the syntax pass can be skipped, never whether a
// line is valid. Memory: 8 bytes per line of the file. The zero value is
// ready to use; an Accepted is not safe for concurrent writes, and may be
// read concurrently once the pass that fills it has ended.
type Accepted struct {
	seed maphash.Seed
	sums []uint64 // line number − 1 → fingerprint; 0: not accepted
}

// Add records line lineNo (1-based) as accepted.
func (a *Accepted) Add(lineNo int, line []byte) {
	if lineNo < 1 {
		return
	}
	if a.sums == nil {
		a.seed = maphash.MakeSeed()
	}
	for len(a.sums) < lineNo {
		a.sums = append(a.sums, 0)
	}
	a.sums[lineNo-1] = a.fingerprint(line)
}

// Has reports whether line lineNo was accepted with exactly these bytes
// (a false positive needs a 64-bit collision of a per-process random hash).
func (a *Accepted) Has(lineNo int, line []byte) bool {
	if a == nil || lineNo < 1 || lineNo > len(a.sums) {
		return false
	}
	want := a.sums[lineNo-1]
	return want != 0 && a.fingerprint(line) == want
}

func (a *Accepted) fingerprint(line []byte) uint64 {
	if h := maphash.Bytes(a.seed, line); h != 0 {
		return h
	}
	return 1 // 0 marks a line not accepted
}
