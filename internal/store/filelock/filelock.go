// Package filelock holds an exclusive lock on a file for as long as a
// process uses what the file guards: a results file and its journal (one
// sluice run at a time), the proxy's state dir (one proxy at a time).
//
// The lock is the kernel's: flock on unix, LockFileEx on Windows (on one
// byte past the file's content, so the content stays readable). It goes
// with the open file, so a process that dies however it dies — kill -9
// included — leaves nothing to clean up. Elsewhere (plan9, wasm) Try
// always succeeds: two processes are not kept apart there.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrLocked is returned (wrapped) when another open file holds the lock:
// another process, or another Try in this one.
var ErrLocked = errors.New("filelock: held by another process")

// Lock is a held lock. Its file stays open until Release.
type Lock struct {
	f *os.File
}

// Try opens path (creating it with perm) and takes its exclusive lock
// without waiting. Another holder gives an error wrapping ErrLocked.
func Try(path string, perm os.FileMode) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// PollEvery is how often Wait tries the lock again.
const PollEvery = 50 * time.Millisecond

// Wait is Try, tried again every PollEvery while another holds the lock,
// for up to wait in all; waiting, if set, is called once, before the
// first wait. ctx ends the wait early (its error is returned). Past wait,
// the last ErrLocked is returned.
func Wait(ctx context.Context, path string, perm os.FileMode, wait time.Duration, waiting func()) (*Lock, error) {
	deadline := time.Now().Add(wait)
	for first := true; ; first = false {
		l, err := Try(path, perm)
		if err == nil || !errors.Is(err, ErrLocked) || !time.Now().Before(deadline) {
			return l, err
		}
		if first && waiting != nil {
			waiting()
		}
		t := time.NewTimer(min(PollEvery, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// File is the locked file, for a holder that keeps a note in it (the
// proxy's status line). Reading or writing it does not touch the lock.
func (l *Lock) File() *os.File { return l.f }

// Release lets the lock go (closing the file releases it). Calling it
// again does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	return f.Close()
}
