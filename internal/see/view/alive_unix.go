//go:build unix

package view

import (
	"errors"
	"syscall"
)

// Alive reports whether a process with this id exists.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
