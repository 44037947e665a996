package main

import (
	"errors"
	"strings"
	"testing"
)

// TestBenchMoved: `sluice bench …` names the command the benchmarks moved
// to and fails with a non-zero status, whatever flags follow.
func TestBenchMoved(t *testing.T) {
	_, err := execute(t, movedBenchCmd(), "worlds", "--only", "calm")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code == 0 {
		t.Fatalf("sluice bench worlds: %v, want an exit status other than 0", err)
	}
	if want := "go run ./cmd/sluice-bench worlds --only calm"; !strings.Contains(err.Error(), want) {
		t.Errorf("sluice bench worlds: %q lacks %q", err, want)
	}
}
