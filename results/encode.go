package results

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/rawjson"
)

// encode returns rec as one JSON line ending in '\n': byte for byte what
// a json.Encoder with HTML escaping off writes (TestEncodeIsEncoder,
// FuzzEncode), written by hand because the encoder's reflection and its
// re-validation of the result were 5 % of the engine's CPU. The result is
// validated (rawjson.Valid) and compacted; strings are escaped as
// encoding/json escapes them.
func encode(rec api.ResultRecord) ([]byte, error) {
	n := len(rec.CustomID) + len(rec.Result) + 48
	if m := rec.Sluice; m != nil {
		n += 160 + len(m.ParamsHash) + len(m.Org) + len(m.Key) + len(m.BatchID)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"custom_id":`...)
	b = appendString(b, rec.CustomID)
	b = append(b, `,"result":`...)
	switch {
	case rec.Result == nil:
		b = append(b, "null"...)
	case !json.Valid(rec.Result):
		return nil, fmt.Errorf("the result is not valid JSON: %w", json.Unmarshal(rec.Result, new(any)))
	default:
		b = rawjson.AppendCompact(b, rec.Result)
	}
	if m := rec.Sluice; m != nil {
		b = append(b, `,"sluice":{"params_hash":`...)
		b = appendString(b, m.ParamsHash)
		b = append(b, `,"class":`...)
		b = appendString(b, m.Class)
		b = appendOptString(b, `,"route":`, m.Route)
		b = appendOptString(b, `,"org":`, m.Org)
		b = appendOptString(b, `,"key":`, m.Key)
		if m.Attempts != 0 {
			b = strconv.AppendInt(append(b, `,"attempts":`...), int64(m.Attempts), 10)
		}
		if m.LatencyMs != 0 {
			b = strconv.AppendInt(append(b, `,"latency_ms":`...), m.LatencyMs, 10)
		}
		b = appendOptString(b, `,"batch_id":`, m.BatchID)
		b = appendOptString(b, `,"cache_prefix":`, m.CachePrefix)
		b = append(b, '}')
	}
	return append(b, "}\n"...), nil
}

// appendOptString appends a member that omitempty leaves out when empty.
func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, key...), s)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string as encoding/json writes it with
// HTML escaping off: \" \\ \b \f \n \r \t, other control characters as
// \u00XX, each invalid UTF-8 byte as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
