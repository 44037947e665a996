package jsonl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// ParamsHash returns a fingerprint of a request's params: the hex form (32
// characters) of the first 16 bytes of the SHA-256 of params after
// json.Compact.
//
// Whitespace between tokens therefore does not change the hash; anything
// else does, including the order of keys and how a string is escaped
// ("é" and "\u00e9" differ). If params is not valid JSON the raw bytes are
// hashed. It is the value sluice records as api.RunMeta.ParamsHash, so the
// hash of an input line equals the one in its result line exactly when the
// request is unchanged but for whitespace.
func ParamsHash(params []byte) string {
	var compact bytes.Buffer
	compact.Grow(len(params))
	if json.Compact(&compact, params) != nil {
		return hashOf(params)
	}
	return hashOf(compact.Bytes())
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
