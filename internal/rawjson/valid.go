package rawjson

import (
	"encoding/binary"
	"iter"
)

// maxDepth is encoding/json's nesting limit: 10,000 open objects and
// arrays are valid, 10,001 are not.
const maxDepth = 10000

// Valid reports whether b is one valid JSON value, with whitespace around
// it allowed: exactly json.Valid (FuzzValid checks it; TestValidDepth the
// nesting limit), about ten times faster. json.Valid steps a state machine
// through a function call per byte; most of a request or an answer is the
// text of its strings, which Valid crosses eight bytes at a time. Like
// json.Valid it does not check that strings are UTF-8.
func Valid(b []byte) bool {
	var buf [64]byte
	stack := buf[:0] // the open containers, '{' or '['
	i := skipSpace(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxDepth {
				return false
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']'
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = key(b, i); i < 0 {
					return false
				}
			}
			continue
		case c == '"':
			if i = scanString(b, i); i < 0 {
				return false
			}
		case c == 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case c == 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case c == 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			if i = scanNumber(b, i); i < 0 {
				return false
			}
		}
		// A value ended before b[i]: what follows it closes containers
		// until a comma starts the next value.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return false
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = key(b, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// key scans an object member's key and its colon at b[i], and returns
// the index of the value's first byte, or -1.
func key(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// literal returns the index past the literal lit at b[i], or -1.
func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// scanNumber returns the index past the number at b[i], or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// The SWAR constants: a byte's value in every byte of a word.
const (
	ones   = 0x0101010101010101
	highs  = 0x8080808080808080
	quotes = '"' * ones
	slashs = '\\' * ones
	spaces = ' ' * ones
)

// special reports whether the little-endian word w has a byte that ends
// or interrupts a string's plain text: a quote, a backslash, or a control
// character (below 0x20). Each test is the classic has-zero-byte trick
// (w-ones)&^w&highs over w with the byte of interest XORed to zero;
// "below 0x20" is w-0x20 borrowing into a byte's high bit where w had
// none. A false positive is impossible for a word whose bytes are all
// plain, and the caller looks at the word byte by byte when it fires.
func special(w uint64) bool {
	q := w ^ quotes
	s := w ^ slashs
	return ((q-ones)&^q|(s-ones)&^s|(w-spaces)&^w)&highs != 0
}

// scanString returns the index past the string literal at b[i] (a
// quote), or -1: no control character inside, escapes among \" \\ \/ \b
// \f \n \r \t and \u with four hex digits.
func scanString(b []byte, i int) int {
	j := i + 1
	for {
		for len(b)-j >= 8 && !special(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		if j >= len(b) {
			return -1
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1
		case c == '\\':
			if j+1 >= len(b) {
				return -1
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if len(b)-j < 6 || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return -1
				}
				j += 6
			default:
				return -1
			}
		case c < ' ':
			return -1
		default:
			j++
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Runs yields the runs of b, which Valid accepts, between its
// insignificant whitespace, in order: together they are what json.Compact
// writes. Strings are crossed quote to quote and yielded with their
// escapes untouched. AppendCompact appends the runs; jsonl's params hash
// hashes them as they come, with no copy.
func Runs(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		run := 0 // the start of the current run
		for i := 0; i < len(b); {
			switch b[i] {
			case '"':
				i = skipString(b, i)
			case ' ', '\t', '\r', '\n':
				if i > run && !yield(b[run:i]) {
					return
				}
				i++
				run = i
			default:
				i++
			}
		}
		if run < len(b) {
			yield(b[run:])
		}
	}
}

// AppendCompact appends b, which Valid accepts, to dst without its
// insignificant whitespace: what json.Compact writes, without its second
// validation pass.
func AppendCompact(dst, b []byte) []byte {
	for run := range Runs(b) {
		dst = append(dst, run...)
	}
	return dst
}
