package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// arm returns the result of the named arm, or nil.
func (r *JudgeValidationResult) arm(name string) *ArmResult {
	for i := range r.Arms {
		if r.Arms[i].Arm == name {
			return &r.Arms[i]
		}
	}
	return nil
}

// Thin keeps at most about n points of each arm's timeline: the first
// completion, every step of at least 1/n of the items, and the last.
func (r *JudgeValidationResult) Thin(n int) {
	thin := func(a *ArmResult) {
		step := max(1, a.Items/n)
		var out []Point
		last := -step
		for i, p := range a.Timeline {
			if (p.Done > 0 && len(out) == 0) || p.Done-last >= step || i == len(a.Timeline)-1 {
				out = append(out, p)
				last = p.Done
			}
		}
		a.Timeline = out
	}
	for i := range r.Arms {
		thin(&r.Arms[i])
	}
	if r.ScaleCheck != nil {
		thin(r.ScaleCheck)
	}
}

// FirstSeconds is when the arm's first result arrived, in simulated
// seconds (0 if none did).
func (a ArmResult) FirstSeconds() float64 {
	for _, p := range a.Timeline {
		if p.Done > 0 {
			return p.Sim
		}
	}
	return 0
}

// Speedup is base's simulated wall-clock ÷ arm's (0 when either is missing).
func (r *JudgeValidationResult) Speedup(arm, base string) float64 {
	a, b := r.arm(arm), r.arm(base)
	if a == nil || b == nil || a.SimSeconds == 0 {
		return 0
	}
	return b.SimSeconds / a.SimSeconds
}

// WriteMarkdown writes docs/validation-judge.md: the table, the speedups, the
// kill/resume figures and how they were measured. svgName is the plot's
// file name beside it.
func (r *JudgeValidationResult) WriteMarkdown(w io.Writer, command, svgName string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Validation on the #658-shaped workload\n\n")
	p("%s LLM-as-judge calls (Claude Sonnet 4.5, `%s`, the default rubric: 120–400 input tokens, 64–256 output tokens each), run the old ways and with sluice, one arm after another, each in a fresh simulator of the same world: the three-org preset (30k / 90k / 30k RPM on Sonnet 4.5), whose Message Batches queue reproduces what the old system observed — a 500-request batch is done in about 5 minutes, a batch above 5,000 requests starves for 8 hours before it starts.\n\n",
		commas(r.N), r.Model)
	p("Regenerate everything on this page (the table, `validation-judge.json` and the plot) with:\n\n```sh\n%s\n```\n\n", command)
	p("Measured %s; the whole bench took %s of real time on %s.\n\n", r.Started.Format("2006-01-02"), fmtSimDur(r.Duration), r.Machine)

	p("## Results\n\n")
	p("Wall-clock is in the simulated API's time: real seconds × the arm's time scale (see *How it is measured*). Cost is what the simulator billed, sync and batch (half price) apart — never claimed equal.\n\n")
	p("| arm | wall-clock (simulated) | first result | real s: prep + send × K | done | lost | requests/min | 429s | retries | batches | cost sync | cost batch | route / binding limit | planner predicted |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	for _, a := range r.Arms {
		pred := "—"
		if a.PredictedSeconds > 0 {
			pred = fmt.Sprintf("%s (×%.2f)", fmtSimDur(a.PredictedSeconds), a.SimSeconds/a.PredictedSeconds)
		}
		bind := sanitize(a.Binding)
		if a.Route != "" {
			bind = "**" + a.Route + "**; " + bind
		}
		p("| %s | **%s** | %s | %.1f + %.1f × %g | %s | %s | %s | %s | %s | %s | $%.2f | $%.2f | %s | %s |\n",
			a.Title, fmtSimDur(a.SimSeconds), fmtSimDur(a.FirstSeconds()), a.PrepSeconds, a.SendSeconds, a.TimeScale, commas(a.Done), commas(a.Lost),
			commas(int(math.Round(a.RPM))), commas(int(a.Limited)), commas(int(a.Retries)), commas(int(a.Batches)),
			a.SyncUSD, a.BatchUSD, bind, pred)
	}
	p("\n(planner predicted: the wall-clock `plan.Decide` gave the route it chose, and measured ÷ predicted in brackets.)\n\n")

	p("## Speedup\n\nSimulated wall-clock of the baseline ÷ that of the sluice arm, at the same model, world and N:\n\n")
	p("| sluice arm | vs A (sequential 500s) | vs B (8,000 × 8) | vs C (sync, 50) |\n|---|---:|---:|---:|\n")
	for _, s := range []string{ArmLatency, ArmCost} {
		if r.arm(s) == nil {
			continue
		}
		p("| %s |", r.arm(s).Title)
		for _, b := range []string{ArmBaselineA, ArmBaselineB, ArmBaselineC} {
			if x := r.Speedup(s, b); x > 0 {
				p(" **%.1f×** |", x)
			} else {
				p(" — |")
			}
		}
		p("\n")
	}
	p("\n![completed requests over simulated time, one line per arm](%s)\n\n", svgName)

	if b := r.arm(ArmBaselineB); b != nil {
		p("## Baseline B: the #658 failure, reproduced\n\n")
		p("The old judge router cut the job into %s batches of 8,000 and submitted 8 at once on one key. Every one of them is above the queue's starvation threshold, so none starts for 8 hours: its first result came after **%s**",
			commas(int(math.Ceil(float64(r.N)/8000))), fmtSimDur(b.FirstSeconds()))
		if a := r.arm(ArmBaselineA); a != nil {
			p(", where a 500-request batch (baseline A) gave its first results after %s", fmtSimDur(a.FirstSeconds()))
		}
		p(" — the observation of #658: small batches clear in minutes while large ones starve. Then the 8 share one organization's processing rate, and each batch submitted as one ends starves 8 hours again. Eight times the parallelism bought nothing: it finished in %s", fmtSimDur(b.SimSeconds))
		if a := r.arm(ArmBaselineA); a != nil {
			p(", against %s for the sequential 500s", fmtSimDur(a.SimSeconds))
		}
		p(". sluice never creates a batch above the planner's chunk size (below the threshold), keeps a window of them in flight on every organization's queue at once, and puts the rest on sync when that is faster.\n\n")
	}

	if k := r.Kill; k != nil {
		p("## Kill and resume\n\n")
		p("The latency arm again, as a child process (`sluice-bench %s`, the same code), SIGKILLed once %s results were durable (a point drawn from the seed), then re-run with the same command to resume:\n\n", ArmChildCommand, commas(k.AtKill))
		p("| items in | verdict rows out | distinct ids | duplicate result rows (at the kill / after the resume) | missing | billed twice by the simulator | extra wall-clock the crash cost |\n|---:|---:|---:|---:|---:|---:|---:|\n")
		p("| %s | %s | %s | %d / %d | %d | %d | %s |\n\n", commas(k.Items), commas(k.VerdictRows), commas(k.Unique), k.DuplicatesAtKill, k.Duplicates, k.Missing, k.BilledTwice, fmtSimDur(k.ExtraSeconds))
		verdict := "within"
		if k.BilledTwice > int64(k.InFlightCap) {
			verdict = "**above** — more than the requests in flight at the kill were paid twice"
		}
		p("Only requests in flight at the kill may be billed twice: at most %d sync calls (three organizations × the Sonnet cap; batches are journaled before they are created, so a resumed run adopts them instead of paying again). Measured: %d, %s that bound. The extra wall-clock is the resumed job's end to end (two process starts, key discovery, the resume scan, the verdicts rewrite) less the uninterrupted arm's.\n\n", k.InFlightCap, k.BilledTwice, verdict)
	}

	if c := r.ScaleCheck; c != nil {
		if a := r.arm(c.Arm); a != nil {
			ratio := c.SimSeconds / a.SimSeconds
			p("## Time-scale check\n\n%s again at half its time scale (K = %g instead of %g): %s simulated (%.0f s real) against %s — a ratio of %.3f. ",
				c.Title, c.TimeScale, a.TimeScale, fmtSimDur(c.SimSeconds), c.RealSeconds, fmtSimDur(a.SimSeconds), ratio)
			if math.Abs(ratio-1) < 0.02 {
				p("Within 2 %%: the simulated wall-clock does not depend on the time scale the bench chose.\n\n")
			} else {
				lo, hi := math.Min(1, ratio), math.Max(1, ratio)
				p("The two differ by %.0f %%: the time scale's own effect (every real millisecond an arm spends between simulated events — HTTP round trips, JSON, scheduling — counts K times) plus run-to-run noise (where each batch's end falls in the poll schedule). Read the speedups against this arm as uncertain by that much: against baseline A, the latency arm's is between **%.0f×** and **%.0f×**.\n\n",
					100*math.Abs(1-ratio), r.Speedup(ArmLatency, ArmBaselineA)*lo, r.Speedup(ArmLatency, ArmBaselineA)*hi)
			}
		}
	}
	p("## How it is measured\n\n")
	p("- **One world, fresh each arm.** Each arm starts a new `sluice sim` child process with the same configuration (`bench.ValidationWorld`: the three-org preset, judge verdicts on, 64–256-token answers) and the same %s items; only the time scale differs.\n", commas(r.N))
	p("- **Time scales.** The simulator divides every latency and delay by its time scale K and multiplies every per-minute limit by K, so an arm's behaviour in simulated time does not depend on K, as long as this machine keeps up. Each arm gets the K that makes it last about 75 s of real time, capped so no arm needs more than 1,000 Messages calls per real second (this 2-core machine, not the simulated API, would be the limit beyond that).\n")
	p("- **Wall-clock** = preparation + sending × K. Preparation — reading the items and building the requests (and, for sluice, validating them, the resume scan and the key probes) — is CPU work that takes the same real time against the real API, so it counts as measured, unscaled; it is in the *real s* column as `prep + send`. From the first send to the last result, real time × K. sluice's own clocks (warm-up ramp, AIMD window, batch polls, stuck threshold) run on the simulator's clock, as `sluice demo` runs them; the old ways' clocks (batch polls every 30 s, SDK backoff) are scaled the same way.\n")
	p("- **Baselines** are written in `internal/bench/judgevalidation.go` from the old system's description (`../shared/reference/source-system.md`): A and B on the batch key (its organization's queue alone), C on the high-priority key with 50 workers and the official SDKs' retry policy (2 retries, `retry-after` honoured, else 0.5 s × 2ⁿ up to 8 s with jitter); a request that fails its retries is lost, as it was.\n")
	p("- **sluice arms** are `judgejob.RunFile` — what `sluice judge` runs — on all three keys, with the planner deciding the route (`--route auto`), no response cache (every answer is paid for), and the same engine as every other command.\n")
	p("- **Done** counts verdicts of class `ok`, for every arm: the baselines' results are classified with the same rubric after their clock stops. **Lost** is the rest (errored, expired, failed after retries, or not ok). 429s are the simulator's own count.\n")
}

// armColors are the plot's line colours, by arm.
var armColors = map[string]string{
	ArmBaselineA: "#8c564b", ArmBaselineB: "#d62728", ArmBaselineC: "#ff7f0e",
	ArmLatency: "#1f77b4", ArmCost: "#2ca02c",
}

// WriteSVG plots completed requests (as a share of N) against simulated
// time on a log axis (one line per arm): the arms span minutes to days.
func (r *JudgeValidationResult) WriteSVG(w io.Writer) {
	const (
		width, height         = 900, 480
		left, right           = 70, 250
		top, bottom           = 40, 60
		plotW, plotH          = width - left - right, height - top - bottom
		minMinute     float64 = 1
	)
	maxMin := minMinute * 10
	for _, a := range r.Arms {
		maxMin = math.Max(maxMin, a.SimSeconds/60)
	}
	decades := math.Ceil(math.Log10(maxMin / minMinute))
	x := func(sec float64) float64 {
		m := math.Max(sec/60, minMinute)
		return left + plotW*math.Log10(m/minMinute)/decades
	}
	y := func(frac float64) float64 { return top + plotH*(1-frac) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s judge calls: completed over simulated time</text>`+"\n", left, commas(r.N))
	for _, t := range []struct {
		min   float64
		label string
	}{{1, "1 min"}, {5, "5 min"}, {15, "15 min"}, {60, "1 h"}, {180, "3 h"}, {600, "10 h"}, {1440, "1 day"}, {2880, "2 days"}, {10080, "1 week"}} {
		if t.min > minMinute*math.Pow(10, decades) {
			break
		}
		xx := x(t.min * 60)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xx, top, xx, top+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xx, top+plotH+18, t.label)
	}
	for i := 0; i <= 4; i++ {
		yy := y(float64(i) / 4)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, left+plotW, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", left-6, yy+4, i*25)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">simulated wall-clock (log scale)</text>`+"\n", left+plotW/2, height-15)
	fmt.Fprintf(&b, `<text transform="rotate(-90)" x="%d" y="18" text-anchor="middle">requests completed</text>`+"\n", -(top + plotH/2))
	for i, a := range r.Arms {
		// A step line: the count holds until the next completion, so a
		// batch's results show as the jump they are.
		var pts []string
		prev := y(0)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(0), prev))
		for _, pt := range a.Timeline {
			xx, yy := x(pt.Sim), y(float64(pt.Done)/float64(max(1, a.Items)))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", xx, prev, xx, yy))
			prev = yy
		}
		col := armColors[a.Arm]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		ly := top + 10 + i*36
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", left+plotW+15, ly, left+plotW+35, ly, col)
		title, rest, _ := strings.Cut(a.Title, " — ")
		if rest == "" {
			title, rest = "sluice", strings.TrimPrefix(a.Title, "sluice judge ")
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s: %s</text>`+"\n", left+plotW+40, ly+4, title, fmtSimDur(a.SimSeconds))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">%s</text>`+"\n", left+plotW+40, ly+17, trim(rest, 34))
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

func trim(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
