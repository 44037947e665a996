package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Key addresses one cached answer: a SHA-256 over the canonical request
// and the extra fingerprints (see KeyOf).
type Key [sha256.Size]byte

// String returns k in hex.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// keyVersion starts every hashed key. Changing what a key covers changes
// it, so rows written under an older scheme become unreachable instead of
// being served for requests they do not match.
const keyVersion = "sluice-cache-key-v1"

// excluded are the top-level params fields left out of the key: they do not
// change the answer ("stream" only changes how it is delivered; "metadata"
// carries a user id).
var excluded = []string{"metadata", "stream"}

// KeyOf returns the cache key of a request: SHA-256 over a version tag, the
// canonical params (Canonical) and each extra fingerprint, every part
// length-prefixed. The params part covers the model, system, messages and
// every other field but stream and metadata: max_tokens, temperature,
// top_p, top_k, stop_sequences, tools, tool_choice, thinking,
// service_tier, cache_control and any field the API adds later. A change
// to any of them is a miss.
//
// extra separates requests that are the same bytes but must not share an
// answer: the rubric fingerprint of a judge row (judge.Fingerprint), or a
// draw index when the same request is sampled N times on purpose.
func KeyOf(params []byte, extra ...string) (Key, error) {
	c, err := Canonical(params)
	if err != nil {
		return Key{}, err
	}
	h := sha256.New()
	part := func(s []byte) {
		var n [20]byte
		h.Write(strconv.AppendInt(n[:0], int64(len(s)), 10))
		h.Write([]byte{':'})
		h.Write(s)
	}
	part([]byte(keyVersion))
	part(c)
	for _, e := range extra {
		part([]byte(e))
	}
	var k Key
	h.Sum(k[:0])
	return k, nil
}

// Canonical returns the canonical form of a request's params, which KeyOf
// hashes: the JSON object re-encoded with keys sorted at every level, no
// whitespace, strings in encoding/json's escaping (so "é" and "\u00e9" are
// the same), numbers normalised (1, 1.0 and 1e0 are the same; so are 0.7
// and 0.70), and the top-level fields stream and metadata removed. When a
// key repeats, the last one wins, as in the API.
func Canonical(params []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("cache: params are not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("cache: params have data after the object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("cache: params must be a JSON object")
	}
	for _, k := range excluded {
		delete(m, k)
	}
	var b bytes.Buffer
	b.Grow(len(params))
	if err := writeCanonical(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		s, err := json.Marshal(x)
		if err != nil {
			return err
		}
		b.Write(s)
	case json.Number:
		n, err := canonicalNumber(string(x))
		if err != nil {
			return err
		}
		b.WriteString(n)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, k); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := writeCanonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("cache: unexpected JSON value %T", v)
	}
	return nil
}

// canonicalNumber writes an integer literal that fits an int64 as that
// integer, and every other number as the shortest float64 form, so equal
// values have one spelling.
func canonicalNumber(lit string) (string, error) {
	if !strings.ContainsAny(lit, ".eE") {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return strconv.FormatInt(i, 10), nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return "", fmt.Errorf("cache: number %s: %w", lit, err)
	}
	if f == 0 {
		f = 0 // -0 and 0 are one value
	}
	if f >= -(1<<53) && f <= 1<<53 && f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10), nil
	}
	return strconv.FormatFloat(f, 'g', -1, 64), nil
}
