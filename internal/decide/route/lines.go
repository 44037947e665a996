package route

import "sync/atomic"

// lineSet records which of an input's lines a side has taken: one bit per
// line number, set by compare-and-swap, so two feeders racing for a line
// agree on which one took it.
type lineSet struct {
	words []atomic.Uint64
	n     atomic.Int64 // lines taken
}

// newLineSet holds lines 0 to n.
func newLineSet(n int) *lineSet {
	return &lineSet{words: make([]atomic.Uint64, n/64+1)}
}

// take marks line i taken and reports whether this call took it. A line
// outside the set (the input grew since it was surveyed) is never taken:
// the next run sends it.
func (s *lineSet) take(i int) bool {
	if i < 0 || i/64 >= len(s.words) {
		return false
	}
	w, bit := &s.words[i/64], uint64(1)<<(i%64)
	for {
		old := w.Load()
		if old&bit != 0 {
			return false
		}
		if w.CompareAndSwap(old, old|bit) {
			s.n.Add(1)
			return true
		}
	}
}

// taken is how many lines have been taken.
func (s *lineSet) taken() int { return int(s.n.Load()) }
