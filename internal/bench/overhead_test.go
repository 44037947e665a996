package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
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

// TestScheduleKeepsDueTimes: the open loop's slots are evenly spaced at
// the rate, and a slot handed over late (nobody took it) keeps the time it
// was due, so the wait counts against the target instead of thinning the
// load; the schedule closes when its context ends.
func TestScheduleKeepsDueTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		slots := make(chan time.Time) // unbuffered: every hand-over waits for a taker
		start := time.Now()
		go schedule(ctx, 1000, slots)
		for i := range 5 {
			at := <-slots
			if want := start.Add(time.Duration(i) * time.Millisecond); !at.Equal(want) {
				t.Fatalf("slot %d due at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		time.Sleep(10 * time.Millisecond) // a stalled taker: slots 5… are now late
		for i := 5; i < 15; i++ {
			at := <-slots
			if want := start.Add(time.Duration(i) * time.Millisecond); !at.Equal(want) {
				t.Fatalf("late slot %d due at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		if late := time.Since(start); late < 14*time.Millisecond {
			t.Fatalf("took slot 14 at %v, before it was due", late)
		}
		cancel()
		for range slots { // drains what was in hand, then ends
		}
	})
}

// TestLoadCountsTheRequestInFlightAtTheClose: a request sent within the
// window and still in flight as it closes is waited for and its latency
// counted (cutting it would drop the slowest), while the rate counts only
// what was answered within the window.
func TestLoadCountsTheRequestInFlightAtTheClose(t *testing.T) {
	// The window's marks are the signals: the first two requests the
	// server sees after the window opened are answered at once (with one
	// connection, at most the first of them was sent before the mark), the
	// next is held until the window has closed.
	started, closed := make(chan struct{}), make(chan struct{})
	var inWindow atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-started:
			if inWindow.Add(1) >= 3 {
				<-closed // in flight as the window closes
			}
		default:
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	mark := func(start bool) {
		if start {
			close(started)
		} else {
			close(closed)
		}
	}
	o := OverheadRun{Connections: 1, Duration: 100 * time.Millisecond}
	res, err := o.load(t.Context(), "slow", srv.URL, "k", []byte(`{}`), map[string]int{}, 0, mark)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != res.Requests+1 {
		t.Fatalf("%d latencies for %d answered in the window, want one more: the request in flight at the close", res.Sent, res.Requests)
	}
}

// TestLoadEndsItsConnectionsWhenCancelledEarly: cancelled during the
// warm-up, load returns the context's error and leaves no connection
// running (a closed loop used to spin on failing requests forever).
func TestLoadEndsItsConnectionsWhenCancelledEarly(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	o := OverheadRun{Connections: 4, Duration: time.Second, Warmup: time.Minute}
	for _, rate := range []float64{0, 1000} {
		if _, err := o.load(ctx, "cancelled", srv.URL, "k", []byte(`{}`), map[string]int{}, rate, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rate %v: load returned %v, want the context's deadline", rate, err)
		}
	}
	srv.Close()
	if err := goleak.Find(before); err != nil {
		t.Fatal(err)
	}
}

// TestOverheadRunRefusesMeaninglessFlags: a rate that is not a number, not
// finite, or too small or large for the schedule is refused before any
// process starts, as are non-positive sizes.
func TestOverheadRunRefusesMeaninglessFlags(t *testing.T) {
	good := OverheadRun{Connections: 1, BodyBytes: 1, Duration: time.Second}
	for _, rate := range []float64{0, 1, 1000, maxRate} {
		o := good
		o.Rate = rate
		if err := o.check(); err != nil {
			t.Errorf("rate %v refused: %v", rate, err)
		}
	}
	for _, rate := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 1e-9, 0.5, 2 * maxRate} {
		o := good
		o.Rate = rate
		if err := o.check(); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("rate %v: %v, want --rate refused", rate, err)
		}
	}
	for flag, bad := range map[string]func(*OverheadRun){
		"--connections": func(o *OverheadRun) { o.Connections = 0 },
		"--body":        func(o *OverheadRun) { o.BodyBytes = 0 },
		"--duration":    func(o *OverheadRun) { o.Duration = 0 },
		"--warmup":      func(o *OverheadRun) { o.Warmup = -time.Second },
	} {
		o := good
		bad(&o)
		if err := o.check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s out of range: %v, want it refused by name", flag, err)
		}
		// Run refuses it before starting anything (no binary is set: a
		// start would fail differently).
		if _, err := o.Run(t.Context()); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s out of range: Run returned %v, want the flag refused", flag, err)
		}
	}
}

// TestPrintWarnsOfAnUnsustainedRate: an open-loop phase that answered
// well under the scheduled rate is flagged, since the slots it never sent
// never counted their wait; one at the rate is not.
func TestPrintWarnsOfAnUnsustainedRate(t *testing.T) {
	var r OverheadResult
	r.Rate = 1000
	r.DirectAtRate = LoadResult{Name: "direct", Rate: 999}
	r.ProxyAtRate = LoadResult{Name: "proxied", Rate: 700}
	var b strings.Builder
	r.Print(&b)
	if out := b.String(); !strings.Contains(out, "warning: proxied answered 700 req/s of the 1000") || strings.Contains(out, "warning: direct") {
		t.Fatalf("print:\n%s\nwant a warning for proxied only", out)
	}
}
