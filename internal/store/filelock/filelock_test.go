package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTryIsExclusive: a second Try fails with ErrLocked until the first is
// released; another file is independent.
func TestTryIsExclusive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lock")
	l, err := Try(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Try(path, 0o600); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Try: %v, want ErrLocked", err)
	}
	other, err := Try(filepath.Join(dir, "other"), 0o600)
	if err != nil {
		t.Fatalf("another file: %v", err)
	}
	other.Release()
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	again, err := Try(path, 0o600)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	again.Release()
}

// TestWaitTakesALockReleasedInTime: a lock released while Wait waits is
// taken, and waiting is called once; one never released gives ErrLocked
// after the wait.
func TestWaitTakesALockReleasedInTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	held, err := Try(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	// The holder lets go once Wait has found it held.
	l, err := Wait(context.Background(), path, 0o600, 10*time.Second, func() { calls++; held.Release() })
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if calls != 1 {
		t.Errorf("waiting called %d times, want 1", calls)
	}
	start := time.Now()
	if _, err := Wait(context.Background(), path, 0o600, 120*time.Millisecond, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("Wait on a held lock: %v, want ErrLocked", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("gave up after %s, before the wait ended", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Wait(ctx, path, 0o600, time.Minute, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with an ended context: %v", err)
	}
	l.Release()
	free, err := Wait(context.Background(), path, 0o600, 0, func() { t.Error("waiting called for a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	free.Release()
}

// TestHeldFileIsReadable: while the lock is held, what its holder wrote
// in the file can be read by others (the proxy's status line, read by
// whoever finds the lock held): on Windows, whose locks are mandatory,
// the lock covers no byte of the content.
func TestHeldFileIsReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l, err := Try(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := l.File().WriteAt([]byte("pid 1 serving\n"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Try(path, 0o600); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Try: %v, want ErrLocked", err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "pid 1 serving\n" {
		t.Errorf("reading a held lock file: %q, %v", b, err)
	}
}
