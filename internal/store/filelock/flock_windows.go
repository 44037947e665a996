//go:build windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is where the locked byte lies: far past any content. A
// Windows byte-range lock is mandatory — other handles can neither read
// nor write the bytes it covers — so the lock covers one byte no one
// reads, and the file's own content (the proxy's status line) stays
// readable by whoever finds the lock held.
const lockOffset = 1 << 62

func tryLock(f *os.File) error {
	ol := windows.Overlapped{Offset: uint32(lockOffset & 0xFFFFFFFF), OffsetHigh: uint32(lockOffset >> 32)}
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}
