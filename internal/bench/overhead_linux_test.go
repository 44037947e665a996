package bench

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestProcCPUCountsThisProcess: procCPU (from /proc/<pid>/stat) agrees
// with the kernel's getrusage for this process over 100 ms of CPU spent
// spinning — measured in CPU time, not wall time, so a loaded machine that
// deschedules the test does not change the result.
func TestProcCPUCountsThisProcess(t *testing.T) {
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
