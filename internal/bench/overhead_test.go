package bench

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestOverheadBodySize(t *testing.T) {
	for _, size := range []int{1, 200, 1024, 10000} {
		b := overheadBody("claude-haiku-4-5", size)
		var m struct {
			Model    string `json:"model"`
			Messages []struct{ Content string }
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Model != "claude-haiku-4-5" || len(m.Messages) != 1 {
			t.Fatalf("size %d: %s (%v)", size, b, err)
		}
		if base := len(overheadBody("claude-haiku-4-5", 1)); size > base && len(b) != size {
			t.Errorf("asked for %d bytes, got %d", size, len(b))
		}
	}
}

// TestProcCPUCountsThisProcess: procCPU (from /proc/<pid>/stat) agrees
// with the kernel's getrusage for this process over 100 ms of CPU spent
// spinning — measured in CPU time, not wall time, so a loaded machine that
// deschedules the test does not change the result.
func TestProcCPUCountsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procCPU reads /proc")
	}
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, ruBefore := procCPU(os.Getpid()), rusage()
	for rusage()-ruBefore < 100*time.Millisecond {
	}
	spent := rusage() - ruBefore
	// /proc counts in clock ticks (10 ms here): allow two of them.
	if d := procCPU(os.Getpid()) - before; d < spent-20*time.Millisecond || d > spent+20*time.Millisecond+5*time.Millisecond {
		t.Fatalf("%v of CPU by getrusage counted as %v by procCPU", spent, d)
	}
}

// TestScheduleKeepsDueTimes: the open loop's slots are evenly spaced at
// the rate, and a slot handed over late (nobody took it) keeps the time it
// was due, so the wait counts against the target instead of thinning the
// load; the schedule closes when its context ends.
func TestScheduleKeepsDueTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		slots := make(chan time.Time) // unbuffered: every hand-over waits for a taker
		start := time.Now()
		go schedule(ctx, 1000, slots)
		for i := range 5 {
			at := <-slots
			if want := start.Add(time.Duration(i) * time.Millisecond); !at.Equal(want) {
				t.Fatalf("slot %d due at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		time.Sleep(10 * time.Millisecond) // a stalled taker: slots 5… are now late
		for i := 5; i < 15; i++ {
			at := <-slots
			if want := start.Add(time.Duration(i) * time.Millisecond); !at.Equal(want) {
				t.Fatalf("late slot %d due at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		if late := time.Since(start); late < 14*time.Millisecond {
			t.Fatalf("took slot 14 at %v, before it was due", late)
		}
		cancel()
		for range slots { // drains what was in hand, then ends
		}
	})
}
