package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/rawjson"
)

// decodeUsage decodes a Message's usage object v (valid JSON) exactly as
// json.Unmarshal into an api.Usage does. Every answer has one, and
// json.Unmarshal (which validates its input again and decodes through
// reflection) was two thirds of reading an answer: 5 % of the proxy's CPU
// on a zero-latency upstream (docs/overhead.md). The walk handles the
// shape the API sends — known keys spelled exactly, each once, integers,
// strings, null — and hands anything else (a key in another case, which
// encoding/json matches case-insensitively; a duplicate; a float or a
// string where a count goes; an integer too long to be sure of) to
// json.Unmarshal itself, so the result and the error are always
// encoding/json's. FuzzDecodeUsage checks that.
func decodeUsage(v []byte) (api.Usage, error) {
	if u, ok := walkUsage(v); ok {
		return u, nil
	}
	var u api.Usage
	err := json.Unmarshal(v, &u)
	return u, err
}

// usageKeys are api.Usage's JSON names, in the bit order walkUsage uses
// to see a duplicate.
var usageKeys = [...]string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
	"cache_creation", "output_tokens", "service_tier", "inference_geo", "server_tool_use", "output_tokens_details"}

// walkUsage is decodeUsage's fast path; false: leave it to json.Unmarshal.
func walkUsage(v []byte) (api.Usage, bool) {
	var u api.Usage
	ok := walkKnown(v, usageKeys[:], func(k int, val []byte) bool {
		null := string(val) == "null"
		switch k {
		case 0:
			return null || readInt(val, &u.InputTokens)
		case 1:
			return null || readInt(val, &u.CacheCreationInputTokens)
		case 2:
			return null || readInt(val, &u.CacheReadInputTokens)
		case 3:
			if null {
				return true
			}
			cc, ok := walkCacheCreation(val)
			if ok {
				u.CacheCreation = &cc
			}
			return ok
		case 4:
			return null || readInt(val, &u.OutputTokens)
		case 5:
			return null || readString(val, &u.ServiceTier)
		case 6:
			return null || readString(val, &u.InferenceGeo)
		case 7:
			u.ServerToolUse = bytes.Clone(val) // null included, as json.RawMessage keeps it
		case 8:
			u.OutputTokensDetails = bytes.Clone(val)
		}
		return true
	})
	return u, ok
}

// cacheCreationKeys are api.CacheCreation's JSON names, in its fields'
// order.
var cacheCreationKeys = [...]string{"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"}

// walkCacheCreation reads usage.cache_creation as walkUsage reads usage.
func walkCacheCreation(v []byte) (api.CacheCreation, bool) {
	var cc api.CacheCreation
	ok := walkKnown(v, cacheCreationKeys[:], func(k int, val []byte) bool {
		dst := [...]*int64{&cc.Ephemeral5m, &cc.Ephemeral1h}[k]
		return string(val) == "null" || readInt(val, dst)
	})
	return cc, ok
}

// walkKnown calls read with the index in names and the value of each
// member of the object v whose key is spelled as one of names, ignoring
// the others as encoding/json does. false — v is left to json.Unmarshal —
// when v is not an object, when a key repeats (encoding/json keeps the
// last), when a key matches one of names only case-insensitively
// (encoding/json folds with strings.EqualFold's simple folding, the
// Kelvin sign included), or when read returns false. names has at most
// 64 entries.
func walkKnown(v []byte, names []string, read func(k int, val []byte) bool) bool {
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	var seen uint64
	for m := range rawjson.All(v) {
		k, ok := keyIndex(m, names)
		if !ok || k >= 0 && seen&(1<<k) != 0 {
			return false
		}
		if k < 0 {
			continue
		}
		seen |= 1 << k
		if !read(k, m.Val) {
			return false
		}
	}
	return true
}

// keyIndex is the index in names of m's key, spelled exactly, or -1 when
// encoding/json would match it to none of them; false when it would match
// one only case-insensitively.
func keyIndex(m rawjson.Member, names []string) (int, bool) {
	for i, name := range names {
		if m.Is(name) {
			return i, true
		}
	}
	key := m.Key()
	for _, name := range names {
		if strings.EqualFold(key, name) {
			return -1, false
		}
	}
	return -1, true
}

// readInt reads a JSON integer literal of at most 18 digits (so it fits
// an int64 without overflow checks) into dst.
func readInt(v []byte, dst *int64) bool {
	neg := len(v) > 0 && v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false // a fraction or an exponent: encoding/json decides
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	*dst = n
	return true
}

// readString reads a JSON string literal into dst. Invalid UTF-8 is left
// to encoding/json, which replaces it (rawjson.String keeps raw bytes).
func readString(v []byte, dst *string) bool {
	if v[0] != '"' || !utf8.Valid(v) {
		return false
	}
	*dst = rawjson.String(v)
	return true
}
