package results

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/store/filelock"
)

// ErrLocked is returned (wrapped) by Lock when another process holds the
// results file: two runs appending to one file would both pay for the
// requests neither had finished, and interleave their rows.
var ErrLocked = errors.New("results: another sluice is writing this results file")

// Lock takes an exclusive, non-blocking lock on the results file at path,
// held through a sidecar path+".lock" (the results file itself is replaced
// by an atomic rewrite, which would drop a lock held on it). The lock is
// the kernel's (internal/store/filelock): it goes with the process, so a crashed
// run leaves nothing to clean up. The returned func releases it.
func Lock(path string) (unlock func() error, err error) {
	return LockWait(context.Background(), path, 0, nil)
}

// LockWait is Lock, waiting up to wait for another holder to let go:
// a run killed a moment ago (kill -9, then the same command at once) may
// still hold the lock while the kernel tears it down. waiting, if set, is
// called once when the wait begins, to say so.
func LockWait(ctx context.Context, path string, wait time.Duration, waiting func()) (unlock func() error, err error) {
	l, err := filelock.Wait(ctx, path+".lock", 0o644, wait, waiting)
	switch {
	case errors.Is(err, filelock.ErrLocked):
		hint := "wait for the other run to finish, or write to another file"
		if wait > 0 {
			hint = fmt.Sprintf("still held after %s: %s", wait, hint)
		}
		return nil, fmt.Errorf("%w: %s (%s)", ErrLocked, path, hint)
	case err != nil:
		return nil, fmt.Errorf("results: %w", err)
	}
	return l.Release, nil // closing the descriptor releases the lock
}
