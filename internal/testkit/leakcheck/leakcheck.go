// Package leakcheck fails a package's tests when goroutines they started
// outlive them: a dispatcher, proxy or batch runner that leaks one per
// request would grow without bound in a long-running proxy.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// grace is how long goroutines may take to wind down after the last test
// (connections closing, timers firing); a loaded 2-core CI machine needs
// more than goleak's own half second.
const grace = 10 * time.Second

// Main runs the tests (call it from TestMain), then the package's own
// clean-ups, then exits non-zero if goroutines other than the runtime's
// and the testing package's are still running grace after the tests
// passed.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	if code == 0 {
		if err := settle(grace, func() error { return goleak.Find() }); err != nil {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// settle calls find until it reports nothing or wait has passed, and
// returns its last report.
func settle(wait time.Duration, find func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := find()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
