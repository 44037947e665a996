package jsonl

import (
	"bytes"
	"encoding/json"
)

// This file walks JSON that json.Valid has already accepted, without
// decoding it: values are returned as sub-slices of the input, so checking a
// line costs one validation pass and one walk however deep the request is.
// Every function here assumes valid input and starts at a value's first byte.

// member is one key and raw value of a JSON object.
type member struct {
	key string
	val []byte
}

// members returns the members of the object b, in order, duplicates kept.
func members(b []byte) []member {
	var out []member
	i := skipSpace(b, 1)
	for b[i] != '}' {
		end := skipString(b, i)
		key := decodeString(b[i:end])
		i = skipSpace(b, end) + 1 // past ':'
		i = skipSpace(b, i)
		vend := skipValue(b, i)
		out = append(out, member{key, b[i:vend]})
		i = skipSpace(b, vend)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out
}

// lookup returns the value of the last member named key, or nil; a JSON
// null counts as absent. Last wins, as in encoding/json.
func lookup(ms []member, key string) []byte {
	var v []byte
	for _, m := range ms {
		if m.key == key {
			v = m.val
		}
	}
	if bytes.Equal(v, []byte("null")) {
		return nil
	}
	return v
}

// elements returns the elements of the array b.
func elements(b []byte) [][]byte {
	var out [][]byte
	i := skipSpace(b, 1)
	for b[i] != ']' {
		end := skipValue(b, i)
		out = append(out, b[i:end])
		i = skipSpace(b, end)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out
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
func skipString(b []byte, i int) int {
	for j := i + 1; ; j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// decodeString returns the string the JSON string literal b denotes.
func decodeString(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1])
	}
	var s string
	_ = json.Unmarshal(b, &s) // b is a valid string literal
	return s
}

// stringLen returns len of the string the JSON string literal b denotes,
// without allocating when b holds no escapes.
func stringLen(b []byte) int {
	if bytes.IndexByte(b, '\\') < 0 {
		return len(b) - 2
	}
	return len(decodeString(b))
}
