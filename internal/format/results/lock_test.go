package results

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestLockWaitOutlastsAHolderThatLeaves: a holder that lets go during the
// wait (a run killed a moment ago) is waited for, and the wait is said
// once; one that stays makes LockWait fail with ErrLocked after it.
func TestLockWaitOutlastsAHolderThatLeaves(t *testing.T) {
	out := filepath.Join(t.TempDir(), "results.jsonl")
	unlock, err := Lock(out)
	if err != nil {
		t.Fatal(err)
	}
	said := 0
	again, err := LockWait(t.Context(), out, 10*time.Second, func() { said++; unlock() })
	if err != nil {
		t.Fatalf("LockWait: %v", err)
	}
	if said != 1 {
		t.Errorf("the wait was said %d times, want 1", said)
	}
	if _, err := LockWait(t.Context(), out, 100*time.Millisecond, nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "still held after 100ms") {
		t.Fatalf("LockWait on a held lock: %v, want ErrLocked saying how long it waited", err)
	}
	again()
}
