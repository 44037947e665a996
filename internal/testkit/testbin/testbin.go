// Package testbin builds a command's binary once for the end-to-end tests
// of its package. It owns the build's temporary folder; Remove (from the
// package's TestMain) deletes it.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binary is the command in the test's working directory (the package
// under test), built at most once.
type Binary struct {
	Name string // the binary's file name

	once sync.Once
	dir  string
	path string
	err  error
}

// Path returns the binary's path, building it on first use. It skips the
// test under -short.
func (b *Binary) Path(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the binary (skipped with -short)")
	}
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", b.Name+"-e2e-")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, b.Name)
		// go test puts $GOROOT/bin first on PATH, so this is the go that
		// runs the test.
		out, err := exec.Command("go", "build", "-o", b.path, ".").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes what Path built.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
