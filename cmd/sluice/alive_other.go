//go:build !unix

package main

// processAlive reports whether a process with this id exists; without a
// cheap way to ask, every process is taken to be.
func processAlive(int) bool { return true }
