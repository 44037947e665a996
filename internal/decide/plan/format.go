package plan

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// fmtDuration writes d the way the reports do: "2.8 s", "42 s", "5m10s",
// "3h05m".
func fmtDuration(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s < 9.95:
		return fmt.Sprintf("%.1f s", s)
	case s < 59.5:
		return fmt.Sprintf("%.0f s", s)
	case s < 3600-0.5:
		r := int(math.Round(s))
		return fmt.Sprintf("%dm%02ds", r/60, r%60)
	}
	m := int(math.Round(s / 60))
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}

// fmtInt writes n with thousands separators.
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + fmtInt(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// FormatCost renders one of d's cost figures: the amount, or, for a model
// without a price, that it is unknown (never the figure the route choice
// compared, which takes the catalog's highest prices).
func (d Decision) FormatCost(usd float64) string {
	if d.Unpriced != "" {
		return "unknown"
	}
	return fmtUSD(usd)
}

// fmtUSD writes a dollar amount with precision that suits its size.
func fmtUSD(v float64) string {
	switch {
	case v < 0.01:
		return fmt.Sprintf("$%.4f", v)
	case v < 1:
		return fmt.Sprintf("$%.3f", v)
	case v < 1000:
		return fmt.Sprintf("$%.2f", v)
	}
	return "$" + fmtInt(int(math.Round(v)))
}

// fmtRate writes requests per second.
func fmtRate(r float64) string {
	switch {
	case r < 10:
		return fmt.Sprintf("%.2f", r)
	case r < 100:
		return fmt.Sprintf("%.1f", r)
	}
	return fmtInt(int(math.Round(r)))
}

// fmtRange writes a wall-clock range as "mid (low–high)".
func fmtRange(r Range) string {
	return fmt.Sprintf("%s (%s–%s)", fmtDuration(r.Mid), fmtDuration(r.Low), fmtDuration(r.High))
}

// Concurrency writes the peak in flight per sync lane, "100+100+100", or
// "-" when no lane is used.
func (d Decision) Concurrency() string {
	if len(d.Lanes) == 0 {
		return "-"
	}
	parts := make([]string, len(d.Lanes))
	for i, l := range d.Lanes {
		parts[i] = strconv.Itoa(l.Peak)
	}
	return strings.Join(parts, "+")
}

// ChunkWindow writes the batch size and batches in flight per org,
// "500 × 5", or "-" on the sync route.
func (d Decision) ChunkWindow() string {
	if d.Batch == nil {
		return "-"
	}
	return fmt.Sprintf("%s × %d", fmtInt(d.Batch.Chunk), d.Batch.Orgs[0].Window)
}

// WriteText writes the decision as the human report of `sluice plan`.
func (d Decision) WriteText(w io.Writer) error {
	j := d.Job
	var b strings.Builder
	fmt.Fprintf(&b, "%s × %s (input %.0f, output %.0f tokens per request", fmtInt(j.N), j.Model, j.MeanInput, j.MeanOutput)
	if j.MaxTokens > 0 {
		fmt.Fprintf(&b, ", max_tokens %d", j.MaxTokens)
	}
	fmt.Fprintf(&b, ") on %s, priority %s", d.World, d.Priority)
	if d.Deadline > 0 {
		fmt.Fprintf(&b, ", deadline %s", fmtDuration(d.Deadline))
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	route := string(d.Route)
	if d.Route == RouteSplit {
		route = fmt.Sprintf("split: %s sync + %s batch", fmtInt(d.SyncN), fmtInt(d.BatchN))
	}
	fmt.Fprintf(tw, "route\t%s\n", route)
	fmt.Fprintf(tw, "organizations\t%s\n", strings.Join(d.Orgs, ", "))
	fmt.Fprintf(tw, "wall-clock\t%s\n", fmtRange(d.Wall))
	if d.Unpriced != "" {
		fmt.Fprintf(tw, "cost\tunknown: no price for %s (--models FILE or SLUICE_MODELS with its prices makes every figure exact)\n", d.Unpriced)
	} else {
		fmt.Fprintf(tw, "cost\t%s\n", fmtUSD(d.Cost))
	}
	fmt.Fprintf(tw, "binding\t%s\n", d.Binding)
	if d.CacheEffect != "" {
		fmt.Fprintf(tw, "prompt cache\t%.0f %% of requests share %.0f cached tokens (prefixes: %d); %s\n", 100*j.Cached.Share, j.Cached.Tokens, j.Cached.Prefixes, d.CacheEffect)
	}
	if d.Crossover > 0 {
		fmt.Fprintf(tw, "crossover N\t%s (from here on, %s priority sends work to batch)\n", fmtInt(d.Crossover), d.Priority)
	} else {
		fmt.Fprintf(tw, "crossover N\tnone up to %s (%s priority keeps this shape on sync)\n", fmtInt(MaxCrossover), d.Priority)
	}
	tw.Flush()
	b.WriteString("\nwhole job on each route:\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  sync\t%s\t%s\n", fmtRange(d.SyncWall), d.FormatCost(d.SyncCost))
	if d.BatchWall.Mid > 0 {
		fmt.Fprintf(tw, "  batch\t%s\t%s\n", fmtRange(d.BatchWall), d.FormatCost(d.BatchCost))
	} else {
		fmt.Fprintf(tw, "  batch\tnot considered (N below the batch minimum)\t%s\n", d.FormatCost(d.BatchCost))
	}
	tw.Flush()
	if len(d.Lanes) > 0 {
		fmt.Fprintf(&b, "\nsync lanes (ramp %s, mean latency %s):\n", fmtDuration(d.RampTime), fmtDuration(d.Latency))
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  org\tcap\tstart\tpeak\tsteady\treq/s\tbinding")
		for _, l := range d.Lanes {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\t%s\n", l.Org, l.Cap, l.Start, l.Peak, l.Steady, fmtRate(l.Rate), l.Binding)
		}
		tw.Flush()
	}
	if r := d.Batch; r != nil {
		fmt.Fprintf(&b, "\nbatches (chunk %s, stuck after %s):\n", fmtInt(r.Chunk), fmtDuration(d.StuckAfter))
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  org\trequests\tbatches\tin flight\tlast end")
		for _, o := range r.Orgs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", o.Org, fmtInt(o.Requests), fmtInt(o.Batches), o.Window, fmtDuration(o.End))
		}
		tw.Flush()
	}
	fmt.Fprintf(&b, "\n%s\n", wrap(d.Why, 80))
	for _, warn := range d.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		l := len([]rune(word))
		if i > 0 {
			if n+1+l > width {
				b.WriteByte('\n')
				n = 0
			} else {
				b.WriteByte(' ')
				n++
			}
		}
		b.WriteString(word)
		n += l
	}
	return b.String()
}
