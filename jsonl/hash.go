package jsonl

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
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
	buf := bufPool.Get().(*bytes.Buffer)
	defer putBuf(buf)
	buf.Reset()
	buf.Grow(len(params))
	sum := sha256.New()
	if json.Compact(buf, params) == nil {
		sum.Write(buf.Bytes())
	} else {
		sum.Write(params)
	}
	var out [sha256.Size]byte
	return hex.EncodeToString(sum.Sum(out[:0])[:16])
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBuf returns buf to the pool unless it grew past 1 MiB, so one huge
// request does not pin its memory.
func putBuf(buf *bytes.Buffer) {
	if buf.Cap() <= 1<<20 {
		bufPool.Put(buf)
	}
}
