package jsonl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/sluice-dev/sluice/internal/format/rawjson"
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
	if !json.Valid(params) {
		return hashOf(params)
	}
	return validParamsHash(params)
}

// validParamsHash is ParamsHash of params that json.Valid accepts (the
// validator has just checked it). It hashes the runs of bytes between
// insignificant whitespace as rawjson.Runs finds them — exactly what
// json.Compact would have written, without its second scanner pass and
// the copy (TestParamsHashIsCompactsHash, FuzzParamsHash; docs/overhead.md).
func validParamsHash(params []byte) string {
	sum := sha256.New()
	for run := range rawjson.Runs(params) {
		sum.Write(run)
	}
	var out [sha256.Size]byte
	return hex.EncodeToString(sum.Sum(out[:0])[:16])
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
