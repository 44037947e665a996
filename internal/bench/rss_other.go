//go:build !linux && !darwin

package bench

// peakRSSMB is 0 (not measured) elsewhere: Windows has no getrusage, and
// other systems' ru_maxrss units are not checked here.
func peakRSSMB() float64 { return 0 }
