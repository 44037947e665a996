//go:build !unix

package view

// Alive reports whether a process with this id exists; without a
// cheap way to ask, every process is taken to be.
func Alive(int) bool { return true }
