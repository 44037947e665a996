package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/front/job"
)

// errInterrupt is the root context's cause after the first SIGINT/SIGTERM.
var errInterrupt = errors.New("interrupted")

type againKey struct{}

// selfSignals receives what the process's one owner of SIGINT and SIGTERM
// handles: the signals themselves, and a SIGTERM of sluice's own when the
// parent is gone (--exit-with-parent).
var selfSignals = make(chan os.Signal, 4)

// notifyInterrupts makes the process's one owner of SIGINT and SIGTERM
// (two handlers raced: the "stopping" line was lost and the second Ctrl-C
// ignored). See interrupts.
func notifyInterrupts(parent context.Context) (context.Context, func()) {
	sigs := selfSignals
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := interrupts(parent, sigs, func() {
		fmt.Fprintln(os.Stderr, "\nsluice: interrupted a third time; exiting now (re-run the same command to resume)")
		os.Exit(exitInterrupted)
	})
	return ctx, func() { signal.Stop(sigs); stop() }
}

// interrupts returns a context that the first signal from sigs cancels
// (cause errInterrupt) and whose interruptedAgain channel the second
// closes; the third calls third (the process exits: something did not
// stop when asked twice, and the results file and journals survive a hard
// exit as they survive a kill); later ones are ignored. stop ends the
// watch.
func interrupts(parent context.Context, sigs <-chan os.Signal, third func()) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	again := make(chan struct{})
	done := make(chan struct{})
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				switch n++; n {
				case 1:
					cancel(errInterrupt)
				case 2:
					close(again)
				case 3:
					third()
				}
			case <-done:
				return
			}
		}
	}()
	return context.WithValue(ctx, againKey{}, (<-chan struct{})(again)), func() { close(done); cancel(nil) }
}

// interruptedAgain is closed by the second signal; nil (never ready) when
// ctx is not under interrupts.
func interruptedAgain(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(againKey{}).(<-chan struct{})
	return c
}

// withSignals runs fn: the first SIGINT/SIGTERM cancels its context (stop
// admitting; requests in flight finish within grace), the second closes
// abort (cut them short). An error wrapping job.ErrInterrupted becomes
// exit status 2: re-running the same command resumes.
func withSignals(ctx context.Context, grace time.Duration, fn func(ctx context.Context, abort <-chan struct{}) error) error {
	return underInterrupts(ctx, os.Stderr, grace, fn)
}

// underInterrupts is withSignals writing its lines to w.
func underInterrupts(ctx context.Context, w io.Writer, grace time.Duration, fn func(ctx context.Context, abort <-chan struct{}) error) error {
	abort := make(chan struct{})
	finished := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
		case <-finished:
			return
		}
		if !errors.Is(context.Cause(ctx), errInterrupt) {
			return
		}
		fmt.Fprintf(w, "\nsluice: stopping — letting requests in flight finish (up to %s); interrupt again to abort them\n", grace)
		select {
		case <-interruptedAgain(ctx):
			fmt.Fprintln(w, "sluice: aborting requests in flight")
			close(abort)
		case <-finished:
		}
	}()
	err := fn(ctx, abort)
	close(finished)
	<-watched
	if errors.Is(err, job.ErrInterrupted) {
		return &exitError{code: exitInterrupted, err: err}
	}
	return err
}

// exitWithParent makes the end of standard input — a pipe its parent holds
// and never writes to — a SIGTERM: a parent that dies (however: SIGKILL
// too) closes its end, and sluice drains and exits as for SIGTERM instead
// of running on as an orphan that holds its output's lock. The Python
// client starts every sluice this way (no preexec_fn, no parent-death
// signal, which fires when the parent's thread ends and needs fork()).
// Standard input must be a pipe (or a socket): on a terminal or
// /dev/null the flag would stop sluice at once, or never.
func exitWithParent(stdin *os.File, sigs chan<- os.Signal) error {
	fi, err := stdin.Stat()
	if err != nil {
		return fmt.Errorf("--exit-with-parent: standard input: %w", err)
	}
	if fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return errors.New("--exit-with-parent: standard input must be a pipe its parent holds open (it is not)")
	}
	go func() {
		io.Copy(io.Discard, stdin) // returns at EOF: the parent is gone
		// Nobody reads stderr any more: a write must fail, not kill
		// sluice with SIGPIPE in the middle of its drain.
		signal.Ignore(syscall.SIGPIPE)
		sigs <- syscall.SIGTERM
	}()
	return nil
}
