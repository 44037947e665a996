//go:build !linux

package bench

import "time"

// procCPU is not measured off Linux.
func procCPU(int) time.Duration { return 0 }
