package bench

import (
	"encoding/json"
	"os"
	"runtime"
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

func TestProcCPUCountsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procCPU reads /proc")
	}
	before := procCPU(os.Getpid())
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	if d := procCPU(os.Getpid()) - before; d < 50*time.Millisecond {
		t.Fatalf("100 ms of spinning counted as %v of CPU", d)
	}
}
