package job

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// progress renders a live display on a terminal (redrawn in place) or a log
// line per interval otherwise.
type progress struct {
	o       Options
	d       *dispatch.Dispatcher
	ledger  *cost.Ledger
	durable *atomic.Int64
	todo    int
	done0   int
	start   time.Time
	lines   int // lines drawn last time (terminal)
	// per-lane OK counts and tokens at the previous tick, for rates
	prev     map[string][3]int64
	prevTime time.Time
}

func newProgress(o Options, d *dispatch.Dispatcher, l *cost.Ledger, durable *atomic.Int64, todo, done0 int) *progress {
	return &progress{o: o, d: d, ledger: l, durable: durable, todo: todo, done0: done0, start: o.Now(), prev: map[string][3]int64{}}
}

func (p *progress) run(stop <-chan struct{}) {
	if p.o.Progress == nil {
		<-stop
		return
	}
	t := time.NewTicker(p.o.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			p.render(true)
			return
		case <-t.C:
			p.render(false)
		}
	}
}

// cost is the cost so far for the progress line: "$0.1234", or unknown
// when requests of a model without a price were answered (never their
// cost as a number).
func (p *progress) cost() string {
	return p.ledger.Snapshot().Total.FormatUSD()
}

func (p *progress) render(final bool) {
	now := p.o.Now()
	st, lanes := p.d.Snapshot()
	done := int(p.durable.Load())
	elapsed := now.Sub(p.start)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Minutes()
	}
	eta := "?"
	if rate > 0 && p.todo > 0 {
		left := max(0, p.todo-done)
		eta = fmtDur(time.Duration(float64(left) / rate * float64(time.Minute)))
	}
	var b strings.Builder
	if !p.o.Terminal {
		fmt.Fprintf(&b, "progress: %d/%d done, %.0f req/min, in flight %d, 429s %d, 529s %d, 5xx %d, elapsed %s, eta %s, cost %s\n",
			done, p.todo, rate, inFlight(lanes), st.RetriesRateLimited, st.RetriesOverloaded, st.RetriesFailed, fmtDur(elapsed), eta, p.cost())
		fmt.Fprint(p.o.Progress, b.String())
		return
	}
	pct := 100.0
	if p.todo > 0 {
		pct = 100 * float64(done) / float64(p.todo)
	}
	fmt.Fprintf(&b, "sluice run  %d / %d done (%.1f%%)  %.0f req/min  elapsed %s  eta %s  cost %s\x1b[K\n",
		done, p.todo, pct, rate, fmtDur(elapsed), eta, p.cost())
	fmt.Fprintf(&b, "  %-12s %-10s %14s %9s %16s %6s %6s\x1b[K\n", "org", "pool", "in flight/limit", "req/min", "tok/min in/out", "429", "5xx")
	dt := now.Sub(p.prevTime).Minutes()
	for _, l := range lanes {
		key := l.Org + "/" + string(l.Pool)
		cur := [3]int64{l.OK, l.InputTokens, l.OutputTokens}
		prev := p.prev[key]
		p.prev[key] = cur
		var rpm, inpm, outpm float64
		if !p.prevTime.IsZero() && dt > 0 {
			rpm = float64(cur[0]-prev[0]) / dt
			inpm = float64(cur[1]-prev[1]) / dt
			outpm = float64(cur[2]-prev[2]) / dt
		}
		flag := ""
		switch {
		case l.Dead:
			flag = " dead"
		case l.State.Paused:
			flag = " paused"
		case l.State.LowHeadroom:
			flag = " reserve"
		}
		fmt.Fprintf(&b, "  %-12s %-10s %9d/%-4d %9.0f %7s/%-8s %6d %6d%s\x1b[K\n", l.Org, l.Pool, l.State.InFlight, l.State.Limit,
			rpm, human(inpm), human(outpm), l.RateLimited+l.Overloaded, l.Failed, flag)
	}
	p.prevTime = now
	out := b.String()
	if p.lines > 0 {
		fmt.Fprintf(p.o.Progress, "\x1b[%dA", p.lines)
	}
	fmt.Fprint(p.o.Progress, out)
	p.lines = strings.Count(out, "\n")
}

func inFlight(lanes []dispatch.LaneView) int {
	n := 0
	for _, l := range lanes {
		n += l.State.InFlight
	}
	return n
}

// human renders 1234567 as 1.2M.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
