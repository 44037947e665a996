package leakcheck

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestFindsALeak: a goroutine left blocked is reported, one that ends
// within the wait is not.
func TestFindsALeak(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stuck := make(chan struct{})
	go func() { <-stuck }()
	if err := settle(300*time.Millisecond, func() error { return goleak.Find(before) }); err == nil {
		t.Error("a blocked goroutine was not reported")
	}
	close(stuck)
	winding := make(chan struct{})
	go func() { <-winding }()
	time.AfterFunc(200*time.Millisecond, func() { close(winding) })
	if err := settle(5*time.Second, func() error { return goleak.Find(before) }); err != nil {
		t.Errorf("a goroutine that ended within the wait was reported: %v", err)
	}
}

// TestSettleStopsAtTheDeadline: settle returns the last report once the
// wait is over.
func TestSettleStopsAtTheDeadline(t *testing.T) {
	errLeak := errors.New("leak")
	calls := 0
	if err := settle(0, func() error { calls++; return errLeak }); !errors.Is(err, errLeak) || calls != 1 {
		t.Errorf("settle(0) = %v after %d calls, want the leak after one", err, calls)
	}
}
