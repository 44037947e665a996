// Package idset keeps a set of short strings — an input file's custom_ids —
// each with a number (the line it was first seen on), in about half the
// memory of a map[string]int.
//
// Why: uniqueness of custom_id is checked over the whole input, by the
// survey and then by each feeder (sync and batch), so each set holds every
// id of a million-line file.
// As a map[string]int it took 53–72 bytes a 12-byte id (map and string),
// the largest thing a 1,000,000-line run kept; here an id costs its bytes
// plus one in an arena, and 9 bytes of table at a load between three
// eighths and three quarters: 25–37 bytes (docs/overhead.md, item 21). The
// arena's first chunk starts at 4 KiB and doubles up to 1 MiB; later
// chunks are 1 MiB from the start and a full chunk is never copied.
//
// A Set is not safe for concurrent use, and must not be copied once used:
// the copies would share a table but not its count, and the first chunk's
// spare room, so each would overwrite the other's ids (go vet reports a
// copy). The zero value is empty and ready.
package idset

import (
	"hash/maphash"
	"math"
)

const (
	chunkBits  = 20 // an arena chunk holds up to 1 MiB
	chunkSize  = 1 << chunkBits
	firstChunk = 4 << 10 // the first chunk's first size: a small file's set stays small
	firstSlots = 16
	// MaxLen is the longest id the arena holds (custom_ids have at most 64
	// bytes); a longer one is kept in the overflow map.
	MaxLen = 255
)

// Set is the set. An id is stored as a length byte and its bytes in the
// arena; the table holds, per slot, a tag (0: empty, else 7 bits of the
// hash with the top bit set) and the id's arena reference and number.
type Set struct {
	_      noCopy
	seed   maphash.Seed
	tags   []uint8
	slots  []slot
	chunks [][]byte
	n      int // ids in the table
	// overflow holds what the table cannot: ids over MaxLen bytes, numbers
	// over 2³²−1, and every id once the arena's 4 GiB of references are
	// used up.
	overflow map[string]int
}

type slot struct {
	ref uint32 // chunk index << chunkBits | offset of the length byte
	num uint32
}

// Len returns how many ids the set holds.
func (s *Set) Len() int { return s.n + len(s.overflow) }

// Get returns id's number, and whether the set holds id.
func (s *Set) Get(id string) (int, bool) {
	if n, ok := s.overflow[id]; ok {
		return n, true
	}
	if s.n == 0 {
		return 0, false
	}
	i, found := s.find(id, maphash.String(s.seed, id))
	if !found {
		return 0, false
	}
	return int(s.slots[i].num), true
}

// Add adds id with number num unless the set already holds it. It returns
// the number id has in the set (num when added) and whether it was added.
func (s *Set) Add(id string, num int) (int, bool) {
	if first, ok := s.overflow[id]; ok {
		return first, false
	}
	if s.tags == nil {
		s.seed = maphash.MakeSeed()
		s.grow(firstSlots)
	}
	h := maphash.String(s.seed, id)
	i, found := s.find(id, h)
	if found {
		return int(s.slots[i].num), false
	}
	if len(id) > MaxLen || num < 0 || uint64(num) > math.MaxUint32 || !s.room(len(id)) {
		if s.overflow == nil {
			s.overflow = make(map[string]int)
		}
		s.overflow[id] = num
		return num, true
	}
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow(2 * len(s.slots))
		i, _ = s.find(id, h)
	}
	s.tags[i] = tagOf(h)
	s.slots[i] = slot{ref: s.store(id), num: uint32(num)}
	s.n++
	return num, true
}

// tagOf is the tag of hash h: never 0, which marks an empty slot.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// find returns the slot holding id, or the empty slot where it belongs.
func (s *Set) find(id string, h uint64) (int, bool) {
	mask := len(s.slots) - 1
	tag := tagOf(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch s.tags[i] {
		case 0:
			return i, false
		case tag:
			if s.id(s.slots[i].ref) == id {
				return i, true
			}
		}
	}
}

// id returns the id stored at ref, without copying it.
func (s *Set) id(ref uint32) string {
	c := s.chunks[ref>>chunkBits]
	off := int(ref & (chunkSize - 1))
	n := int(c[off])
	return unsafeString(c[off+1 : off+1+n])
}

// room reports whether an id of n bytes can still get an arena reference.
func (s *Set) room(n int) bool {
	if len(s.chunks) == 0 {
		return true
	}
	last := s.chunks[len(s.chunks)-1]
	return len(last)+1+n <= chunkSize || len(s.chunks) < 1<<(32-chunkBits)
}

// store appends id to the arena and returns its reference. A reference
// is a chunk's index and an offset in it, so a chunk may be moved to a
// larger array (the first, while it grows): references stay valid, and
// the strings id returns are only compared, never kept.
func (s *Set) store(id string) uint32 {
	switch {
	case len(s.chunks) == 0:
		s.chunks = append(s.chunks, make([]byte, 0, firstChunk))
	case len(s.chunks[len(s.chunks)-1])+1+len(id) > chunkSize:
		s.chunks = append(s.chunks, make([]byte, 0, chunkSize))
	}
	k := len(s.chunks) - 1
	c := s.chunks[k]
	if need := len(c) + 1 + len(id); need > cap(c) {
		grown := make([]byte, len(c), min(chunkSize, max(2*cap(c), need)))
		copy(grown, c)
		c = grown
	}
	ref := uint32(k)<<chunkBits | uint32(len(c))
	c = append(c, byte(len(id)))
	s.chunks[k] = append(c, id...)
	return ref
}

// grow rebuilds the table with size slots (a power of two).
func (s *Set) grow(size int) {
	tags, slots := s.tags, s.slots
	s.tags, s.slots = make([]uint8, size), make([]slot, size)
	for i, t := range tags {
		if t == 0 {
			continue
		}
		id := s.id(slots[i].ref)
		h := maphash.String(s.seed, id)
		j, _ := s.find(id, h) // the ids are distinct: the first empty slot on its path
		s.tags[j], s.slots[j] = tagOf(h), slots[i]
	}
}

// noCopy makes go vet's copylocks check report a Set copied by value.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
