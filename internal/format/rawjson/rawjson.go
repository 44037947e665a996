// Package rawjson walks JSON that json.Valid has accepted without
// decoding it: values are returned as sub-slices of the input, so reading
// a few fields of a request or an answer costs one validation pass and one
// walk however deep the document is. jsonl reads input lines with it
// (their params hash through Runs, their input estimate through
// StringLen), the client reads answers and the proxy the bodies it
// forwards.
//
// Every function assumes valid input and starts at a value's first byte;
// on anything else the result is unspecified (it may panic).
package rawjson

import (
	"bytes"
	"encoding/json"
	"iter"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Member is one key and raw value of a JSON object. The key is kept as its
// raw string literal and decoded only when asked for: comparing it with a
// name allocates nothing, on the proxy's path for every member of every
// body and answer (docs/overhead.md, item 6).
type Member struct {
	raw []byte // the key's string literal, quotes included
	Val []byte
}

// Key returns the member's key, decoded.
func (m Member) Key() string { return String(m.raw) }

// Is reports whether the member's key is name.
func (m Member) Is(name string) bool {
	if bytes.IndexByte(m.raw, '\\') < 0 {
		return string(m.raw[1:len(m.raw)-1]) == name // compared in place
	}
	return String(m.raw) == name
}

// Members returns the members of the object b, in order, duplicates kept.
func Members(b []byte) []Member {
	return AppendMembers(make([]Member, 0, 8), b) // one allocation for the objects a request or an answer has
}

// AppendMembers appends the members of the object b to dst, as Members
// returns them. A caller on a hot path passes an array of its own
// (var buf [16]Member; AppendMembers(buf[:0], b)), which stays on its
// stack: Members' slice was a heap allocation per object read, several
// per request.
func AppendMembers(dst []Member, b []byte) []Member {
	for m := range All(b) {
		dst = append(dst, m)
	}
	return dst
}

// All yields the members of the object b, in order, duplicates kept, as
// Members returns them but without building the slice: a reader that
// looks at each member once (the client's usage walk) allocates nothing.
func All(b []byte) iter.Seq[Member] {
	return func(yield func(Member) bool) {
		i := skipSpace(b, 1)
		for b[i] != '}' {
			end := skipString(b, i)
			key := b[i:end]
			i = skipSpace(b, end) + 1 // past ':'
			i = skipSpace(b, i)
			vend := skipValue(b, i)
			if !yield(Member{key, b[i:vend]}) {
				return
			}
			i = skipSpace(b, vend)
			if b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
	}
}

// Lookup returns the value of the last member named key, or nil; a JSON
// null counts as absent. Last wins, as in encoding/json.
func Lookup(ms []Member, key string) []byte {
	var v []byte
	for _, m := range ms {
		if m.Is(key) {
			v = m.Val
		}
	}
	if bytes.Equal(v, []byte("null")) {
		return nil
	}
	return v
}

// Elements returns the elements of the array b.
func Elements(b []byte) [][]byte { return AppendElements(nil, b) }

// AppendElements appends the elements of the array b to dst, as
// AppendMembers does members.
func AppendElements(dst [][]byte, b []byte) [][]byte {
	i := skipSpace(b, 1)
	for b[i] != ']' {
		end := skipValue(b, i)
		dst = append(dst, b[i:end])
		i = skipSpace(b, end)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return dst
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
	default: // number, true, false, null
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j
			}
			j++
		}
		return j
	}
}

// skipString returns the index just past the string starting at b[i].
// It jumps from quote to quote with bytes.IndexByte rather than looking at
// every byte (the texts of a judge line are most of its bytes:
// docs/overhead.md, item 9); a quote preceded by an
// odd run of backslashes is escaped, an even run is pairs of escaped
// backslashes. The run cannot reach past b[i], which is a quote.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			panic("rawjson: unterminated string") // not valid JSON: see the package doc
		}
		q := j + k
		n := 0
		for b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// String returns the string the JSON string literal b denotes.
func String(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1])
	}
	var s string
	_ = json.Unmarshal(b, &s) // b is a valid string literal
	return s
}

// StringLen returns len(String(b)) without building the string: the
// input-token estimate measures every text of every request with it
// (docs/overhead.md, items 4 and 15: why not json.Unmarshal). It equals len(String(b)) exactly: for a
// literal with escapes that is encoding/json's unquoting (a \\u escape's
// UTF-8 length, a surrogate pair as one rune, a lone surrogate or an
// invalid byte as U+FFFD); for one without, the raw bytes, as String
// keeps them. TestStringLen and FuzzStringLen check it against String.
func StringLen(b []byte) int {
	if bytes.IndexByte(b, '\\') < 0 {
		return len(b) - 2 // String keeps the raw bytes, invalid ones too
	}
	s, n := b[1:len(b)-1], 0
	for len(s) > 0 {
		// The text up to the next escape: its own length when it is
		// UTF-8 (utf8.Valid crosses ASCII eight bytes at a time), rune
		// by rune otherwise. A backslash is ASCII, so the cut never
		// splits a rune.
		k := bytes.IndexByte(s, '\\')
		text := s
		if k >= 0 {
			text = s[:k]
		}
		if utf8.Valid(text) {
			n += len(text)
		} else {
			n += decodedLen(text)
		}
		if k < 0 {
			break
		}
		s = s[k:]
		if s[1] != 'u' {
			n, s = n+1, s[2:]
			continue
		}
		r := hex4(s[2:])
		s = s[6:]
		if utf16.IsSurrogate(r) {
			if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
				if d := utf16.DecodeRune(r, hex4(s[2:])); d != unicode.ReplacementChar {
					n, s = n+utf8.RuneLen(d), s[6:]
					continue
				}
			}
			r = unicode.ReplacementChar
		}
		n += utf8.RuneLen(r)
	}
	return n
}

// decodedLen is the length of text, which has no escape, once each
// invalid byte is replaced by U+FFFD (3 bytes), as decoding does.
func decodedLen(text []byte) int {
	n := 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		n, i = n+utf8.RuneLen(r), i+size
	}
	return n
}

// hex4 is the code unit of the four hex digits a valid \\u escape has.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
