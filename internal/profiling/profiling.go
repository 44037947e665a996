// Package profiling gives a command's subcommands pprof profiles:
// --cpu-profile while one runs, --alloc-profile (every allocation since the
// start) as it ends. It owns those two flags for sluice and sluice-bench.
package profiling

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// Flags writes pprof profiles of any subcommand: --cpu-profile while it
// runs, --alloc-profile (every allocation since the start) as it ends.
// They are how docs/overhead.md found where a request's time goes, and
// how the next person checks it on their own machine and world.
type Flags struct {
	cpuPath, allocPath string
	cpu                *os.File
}

// Register adds the flags to root's persistent flags and sets root's
// PersistentPreRunE to start the CPU profile (a caller that wraps it calls
// the one it finds there).
func (p *Flags) Register(root *cobra.Command) {
	root.PersistentFlags().StringVar(&p.cpuPath, "cpu-profile", "", "write a pprof CPU profile of this command to FILE (go tool pprof FILE)")
	root.PersistentFlags().StringVar(&p.allocPath, "alloc-profile", "", "write a pprof allocation profile of this command to FILE as it ends")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return p.start() }
}

func (p *Flags) start() error {
	if p.allocPath != "" {
		// Sample every 64 KiB allocated rather than 512 KiB: per-request
		// allocations are small and many.
		runtime.MemProfileRate = 64 << 10
	}
	if p.cpuPath == "" {
		return nil
	}
	f, err := os.Create(p.cpuPath)
	if err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	p.cpu = f
	return nil
}

// Stop ends the CPU profile and writes the allocation profile; main calls
// it whether the command succeeded or not.
func (p *Flags) Stop() error {
	var errs []error
	if p.cpu != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.cpu.Close())
		p.cpu = nil
	}
	if p.allocPath != "" {
		f, err := os.Create(p.allocPath)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("--alloc-profile: %w", err))...)
		}
		errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
	}
	return errors.Join(errs...)
}
