//go:build !unix

package main

// openFilesLimit is unknown here.
func openFilesLimit() uint64 { return 0 }
