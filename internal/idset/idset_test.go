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
		if rng.IntN(50) == 0 {
			num = math.MaxUint32 + 1 + rng.IntN(10) // overflow
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
