package idset

import "unsafe"

// unsafeString views b as a string. The arena's bytes are never rewritten
// once written; the first chunk may be moved to a larger array as it
// grows, and the old one is never written again, so a view stays what it
// was, and it is only compared, never kept or handed out.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
