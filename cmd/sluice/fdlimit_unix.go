//go:build unix

package main

import "syscall"

// openFilesLimit is this process's limit of open files (the Go runtime
// raises the soft limit to the hard one at start), 0 if unknown.
func openFilesLimit() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	return r.Cur
}
