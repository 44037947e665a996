//go:build unix

package results

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Lock takes an exclusive, non-blocking lock on the results file at path,
// held through a sidecar path+".lock" (the results file itself is replaced
// by an atomic rewrite, which would drop a lock held on it). The lock is
// the kernel's (flock): it goes with the process, so a crashed run leaves
// nothing to clean up. The returned func releases it.
func Lock(path string) (unlock func() error, err error) {
	lockPath := path + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (wait for the other run to finish, or write to another file)", ErrLocked, path)
		}
		return nil, fmt.Errorf("results: locking %s: %w", lockPath, err)
	}
	return f.Close, nil // closing the descriptor releases the lock
}
