package idset

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestSetIsMap: a long random run of Adds and Gets, ids of every length the
// arena takes and some it does not, agrees with a map at every step,
// through many growths of the table.
func TestSetIsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Set
	want := map[string]int{}
	id := func() string {
		switch rng.IntN(20) {
		case 0:
			return "" // the empty id is an id like any other
		case 1:
			return strings.Repeat("x", MaxLen+1+rng.IntN(3)) // overflow
		case 2:
			return strings.Repeat("y", MaxLen-rng.IntN(2))
		}
		return "item-" + strconv.Itoa(rng.IntN(60000))
	}
	for step := range 200000 {
		k, num := id(), rng.IntN(1<<20)
		if strconv.IntSize == 64 && rng.IntN(50) == 0 {
			num = int(uint64(math.MaxUint32) + 1 + uint64(rng.IntN(10))) // overflow
		}
		if rng.IntN(3) == 0 {
			got, ok := s.Get(k)
			w, wok := want[k]
			if ok != wok || got != w {
				t.Fatalf("step %d: Get(%q) = %d, %v; want %d, %v", step, k, got, ok, w, wok)
			}
			continue
		}
		got, added := s.Add(k, num)
		w, had := want[k]
		if !had {
			want[k], w = num, num
		}
		if added == had || got != w {
			t.Fatalf("step %d: Add(%q, %d) = %d, %v; want %d, %v", step, k, num, got, added, w, !had)
		}
		if s.Len() != len(want) {
			t.Fatalf("step %d: Len %d, want %d", step, s.Len(), len(want))
		}
	}
	if len(s.slots) < 2*len(want)*3/4 && len(s.overflow) == 0 {
		t.Fatalf("the table never grew or never overflowed: %d slots, %d in overflow", len(s.slots), len(s.overflow))
	}
}

// TestSetChunks: ids fill more than one arena chunk, and an id that would
// straddle a chunk's end starts the next one.
func TestSetChunks(t *testing.T) {
	var s Set
	id := strings.Repeat("z", 60)
	n := 3 * chunkSize / 61
	for i := range n {
		s.Add(id+strconv.Itoa(i), i)
	}
	if len(s.chunks) < 3 {
		t.Fatalf("%d chunks for %d ids of 61+ bytes", len(s.chunks), n)
	}
	for k, c := range s.chunks {
		if len(c) > chunkSize {
			t.Fatalf("chunk %d holds %d bytes", k, len(c))
		}
	}
	for i := range n {
		if got, ok := s.Get(id + strconv.Itoa(i)); !ok || got != i {
			t.Fatalf("Get(id%d) = %d, %v", i, got, ok)
		}
	}
}

// TestSetArenaFull: once no reference is left, ids go to the overflow map
// and stay findable.
func TestSetArenaFull(t *testing.T) {
	var s Set
	s.Add("a", 1)
	full := make([]byte, chunkSize-3, chunkSize) // full but for 3 bytes
	for len(s.chunks) < 1<<(32-chunkBits)-1 {
		s.chunks = append(s.chunks, full[:len(full):len(full)]) // never written: not the last chunk
	}
	s.chunks = append(s.chunks, make([]byte, chunkSize-3, chunkSize))
	if _, added := s.Add("bb", 2); !added || len(s.overflow) != 0 {
		t.Fatalf("an id that fits the last chunk went to overflow")
	}
	if _, added := s.Add("ccc", 3); !added || len(s.overflow) != 1 {
		t.Fatalf("an id past the last reference: overflow holds %d", len(s.overflow))
	}
	for id, want := range map[string]int{"a": 1, "bb": 2, "ccc": 3} {
		if got, ok := s.Get(id); !ok || got != want {
			t.Errorf("Get(%q) = %d, %v; want %d", id, got, ok, want)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	ids := make([]string, 1<<20)
	for i := range ids {
		ids[i] = "item-" + strconv.Itoa(10000000+i)
	}
	b.Run("Set", func(b *testing.B) {
		for b.Loop() {
			var s Set
			for i, id := range ids {
				s.Add(id, i)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := map[string]int{}
			for i, id := range ids {
				if _, ok := m[id]; !ok {
					m[id] = i
				}
			}
		}
	})
}

// fill adds distinct ids until chunk 0 holds exactly n bytes.
func fill(t *testing.T, s *Set, n int) {
	t.Helper()
	k := 0
	for len(s.chunks) == 0 || len(s.chunks[0]) < n {
		have := 0
		if len(s.chunks) > 0 {
			have = len(s.chunks[0])
		}
		rest := n - have // bytes to add, each id costs 1+len
		l := min(rest-1, MaxLen)
		if rest-(1+l) == 1 { // would leave 1 byte: only an empty id fits; avoid
			l--
		}
		id := "f" + strconv.Itoa(k) + "_"
		k++
		if l < len(id) {
			// short tail: use distinct short ids
			id = strconv.Itoa(k)[:0] + string(rune('A'+k%26)) + strconv.Itoa(k)
			if l < len(id) {
				if l == 0 {
					id = ""
				} else {
					id = strings.Repeat("z", l)
				}
			}
		}
		id += strings.Repeat("p", l-len(id))
		if _, ok := s.Add(id, k); !ok {
			t.Fatalf("filler %q already there", id)
		}
	}
	if len(s.chunks) != 1 || len(s.chunks[0]) != n {
		t.Fatalf("fill %d: %d chunks, len %d", n, len(s.chunks), len(s.chunks[0]))
	}
}

// TestSetChunkBoundary: an id that fills a chunk to its last byte stays in
// it, one a byte longer starts the next, and no chunk grows past 1 MiB.
func TestSetChunkBoundary(t *testing.T) {
	for _, L := range []int{1, 10, 64, MaxLen} {
		for _, slack := range []int{0, -1} { // 0: fits exactly; -1: one byte short
			var s Set
			fill(t, &s, chunkSize-1-L-slack)
			id := strings.Repeat("L", L)
			s.Add(id, 42)
			for k, c := range s.chunks {
				if len(c) > chunkSize || cap(c) > chunkSize {
					t.Fatalf("L=%d slack=%d: chunk %d len %d cap %d", L, slack, k, len(c), cap(c))
				}
			}
			wantChunks := 1
			if slack < 0 {
				wantChunks = 2
			}
			if len(s.chunks) != wantChunks {
				t.Fatalf("L=%d slack=%d: %d chunks, want %d", L, slack, len(s.chunks), wantChunks)
			}
			if got, ok := s.Get(id); !ok || got != 42 {
				t.Fatalf("Get = %d %v", got, ok)
			}
		}
	}
}

// TestSetStartsSmall: a set of a few ids holds a few KiB, not a 1 MiB
// chunk (a Validator of a one-line file is made per call in places).
func TestSetStartsSmall(t *testing.T) {
	var s Set
	for i := range 10 {
		s.Add("item-"+strconv.Itoa(i), i)
	}
	if c := cap(s.chunks[0]); c > firstChunk || len(s.slots) > firstSlots {
		t.Errorf("10 ids: a chunk of %d bytes and %d slots", c, len(s.slots))
	}
}
