package main

import "testing"

// TestByteSize: sizes with binary and decimal units, plain bytes, and
// what is refused.
func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1GiB": 1 << 30, "512MiB": 512 << 20, "64kib": 64 << 10, "1073741824": 1 << 30,
		"2GB": 2e9, "1.5GiB": 3 << 29, "0": 0, "100B": 100, " 3 MiB ": 3 << 20,
	} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%q: %d (%v), want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1MiB", "1XB", "lots", "1e30"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("%q accepted as %d", in, b)
		}
	}
	for b, want := range map[byteSize]string{1 << 30: "1GiB", 512 << 20: "512MiB", 1000: "1000", 3 << 29: "1536MiB"} {
		if got := b.String(); got != want {
			t.Errorf("%d prints as %q, want %q", int64(b), got, want)
		}
	}
}
