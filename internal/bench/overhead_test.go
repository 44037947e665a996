package bench

import (
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
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
