package idset

import "unsafe"

// unsafeString views b as a string. The arena's bytes are never changed
// once written (chunks are appended to, never rewritten or copied), so
// the view stays valid for the life of the Set; it is only compared, never
// handed out.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
