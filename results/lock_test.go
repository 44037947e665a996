package results

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestLockIsExclusive: a second Lock of one results file fails with
// ErrLocked until the first is released; another file is independent.
func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.jsonl")
	unlock, err := Lock(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(out); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	other, err := Lock(filepath.Join(dir, "other.jsonl"))
	if err != nil {
		t.Fatalf("another file: %v", err)
	}
	other()
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := Lock(out)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	again()
}
