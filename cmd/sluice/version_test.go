package main

import (
	"os"
	"regexp"
	"testing"
)

// TestPythonClientVersion: the Python client's version is the Go module's
// (one number, owned by version.go): a release that bumps one and not the
// other fails here.
func TestPythonClientVersion(t *testing.T) {
	b, err := os.ReadFile("../../clients/python/sluice/_version.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__ = "([^"]+)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no __version__ = \"…\" line in _version.py:\n%s", b)
	}
	if got := string(m[1]); got != version {
		t.Errorf("clients/python/sluice/_version.py says %q, cmd/sluice/version.go %q", got, version)
	}
}
