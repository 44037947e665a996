//go:build !linux

package bench

// peakRSSMB is 0 (not measured) off Linux: ru_maxrss's unit differs by
// system (bytes on macOS) and Windows has no getrusage.
func peakRSSMB() float64 { return 0 }
