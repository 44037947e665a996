//go:build !linux

package bench

import "time"

// procCPU is not measured off Linux.
func procCPU(int) time.Duration { return 0 }

// procRSS is not measured off Linux.
func procRSS(int) int64 { return 0 }
