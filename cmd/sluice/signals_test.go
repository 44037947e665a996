package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
)

// TestFirstInterruptStopsSecondAborts: with one owner of the signals, the
// first always says it is stopping and cancels the job's context, and the
// second always aborts what is in flight — whichever goroutine runs first
// (with two handlers, the root context's cancellation could win the
// watcher's select: no "stopping" line, and the second Ctrl-C ignored).
func TestFirstInterruptStopsSecondAborts(t *testing.T) {
	for range 50 { // a race shows in some runs, not every one
		sigs := make(chan os.Signal, 4)
		ctx, stop := interrupts(context.Background(), sigs, func() {})
		var out logbuf.Buffer
		started := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- underInterrupts(ctx, &out, time.Minute, func(ctx context.Context, abort <-chan struct{}) error {
				close(started)
				<-ctx.Done()
				select {
				case <-abort:
					return job.ErrInterrupted
				case <-time.After(10 * time.Second):
					return errors.New("the second interrupt did not abort")
				}
			})
		}()
		<-started
		sigs <- os.Interrupt
		sigs <- os.Interrupt
		err := <-errc
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitInterrupted {
			t.Fatalf("err %v, want exit status %d", err, exitInterrupted)
		}
		if s := out.String(); !strings.Contains(s, "stopping") || !strings.Contains(s, "aborting") {
			t.Fatalf("output %q: want the stopping and the aborting lines", s)
		}
		stop()
	}
}

// TestEndWithoutInterruptSaysNothing: a job that ends, or whose context
// ends for another reason, prints no "stopping" line.
func TestEndWithoutInterruptSaysNothing(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	parent, cancel := context.WithCancel(context.Background())
	ctx, stop := interrupts(parent, sigs, func() {})
	defer stop()
	var out logbuf.Buffer
	err := underInterrupts(ctx, &out, time.Minute, func(ctx context.Context, _ <-chan struct{}) error {
		cancel()
		<-ctx.Done()
		return nil
	})
	if err != nil || out.String() != "" {
		t.Errorf("err %v, output %q: want nil and nothing", err, out.String())
	}
}

// TestThirdInterruptExits: a third signal calls the hard exit, once; the
// first two do not.
func TestThirdInterruptExits(t *testing.T) {
	sigs := make(chan os.Signal, 4)
	exited := make(chan struct{}, 4)
	ctx, stop := interrupts(context.Background(), sigs, func() { exited <- struct{}{} })
	defer stop()
	sigs <- os.Interrupt
	sigs <- os.Interrupt
	<-interruptedAgain(ctx)
	select {
	case <-exited:
		t.Fatal("exited after two interrupts")
	case <-time.After(50 * time.Millisecond):
	}
	sigs <- os.Interrupt
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the third interrupt did not exit")
	}
	sigs <- os.Interrupt
	select {
	case <-exited:
		t.Fatal("the fourth interrupt called the exit again")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestExitWithParent: with --exit-with-parent, the end of standard input
// (the parent's end of the pipe closed: it died) is a SIGTERM; a standard
// input that is not a pipe is refused.
func TestExitWithParent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sigs := make(chan os.Signal, 1)
	if err := exitWithParent(r, sigs); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("bytes a parent might write are ignored\n"))
	select {
	case s := <-sigs:
		t.Fatalf("%v before the parent's end closed", s)
	default:
	}
	w.Close()
	if s := <-sigs; s != syscall.SIGTERM {
		t.Errorf("got %v, want SIGTERM", s)
	}
	f, err := os.Create(t.TempDir() + "/regular")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := exitWithParent(f, sigs); err == nil || !strings.Contains(err.Error(), "pipe") {
		t.Errorf("a regular file as standard input: %v, want a refusal", err)
	}
}
