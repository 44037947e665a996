package rawjson

import "iter"

// Runs yields the runs of b, which json.Valid accepts, between its
// insignificant whitespace, in order: together they are what json.Compact
// writes. Strings are crossed quote to quote and yielded with their
// escapes untouched. jsonl's params hash hashes them as they come, with
// no copy (docs/overhead.md).
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
