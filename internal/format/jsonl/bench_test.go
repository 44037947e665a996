package jsonl

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkCheck is the feed's check of a judge-sized line (12 KB): a pass
// over 4,096 lines that differ only in custom_id, one Validator a pass
// (docs/overhead.md).
func BenchmarkCheck(b *testing.B) {
	text := strings.Repeat("judge the answer against the reference ", 300)
	const n = 4096
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = []byte(req(fmt.Sprint("a", i), params(`[{"role":"user","content":"`+text+`"}]`, "")))
	}
	b.SetBytes(int64(len(lines[0])))
	var v *Validator
	i := 0
	for b.Loop() {
		if i%n == 0 {
			v = new(Validator)
		}
		if _, err := v.Check(i%n+1, lines[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
