package plan

import (
	"bytes"
	"fmt"
	"math"
	"strings"
)

// The plot of docs/guidelines.md, drawn as plain SVG: two log-log panels,
// wall-clock and cost versus N, sync and batch, with low–high bands.

const (
	svgW, svgH         = 960, 420
	panelW, panelH     = 360, 300
	marginL, marginT   = 80, 50
	panelGap           = 480
	colorSync          = "#1f6fb4"
	colorBatch         = "#d9531e"
	plotPoints         = 51 // N = 10^(1 + i/10)
	plotMinN, plotMaxN = 1.0, 6.0
)

type series struct {
	name, color  string
	low, mid, hi []float64 // per point; low/hi nil for no band
}

type axis struct {
	min, max float64 // log10
	ticks    []float64
	labels   []string
}

// wallCostPlot draws the guidelines' plot for model on world w.
func wallCostPlot(w World, model string) ([]byte, error) {
	j := JudgeJob(1, model)
	p, err := newPlanner(w, j, Options{})
	if err != nil {
		return nil, err
	}
	ns := make([]float64, plotPoints)
	var sw, bw [3][]float64
	var sc, bc []float64
	for i := range ns {
		n := int(math.Round(math.Pow(10, plotMinN+float64(i)/10)))
		ns[i] = float64(n)
		s := planSync(w, p.lanes, p.j, n).wall
		b := planBatch(w, n, 0, 0, DefaultStuckFactor).wall
		for k, v := range []Range{s, b} {
			dst := &sw
			if k == 1 {
				dst = &bw
			}
			dst[0] = append(dst[0], v.Low.Seconds())
			dst[1] = append(dst[1], v.Mid.Seconds())
			dst[2] = append(dst[2], v.High.Seconds())
		}
		sc = append(sc, p.costOf(n, false))
		bc = append(bc, p.costOf(n, true))
	}
	timeTicks := []struct {
		v float64
		l string
	}{{1, "1 s"}, {10, "10 s"}, {60, "1 min"}, {600, "10 min"}, {3600, "1 h"}, {36000, "10 h"}, {360000, "100 h"}}
	wallAxis := axis{min: math.Floor(math.Log10(minOf(sw[0]))), max: math.Ceil(math.Log10(maxOf(bw[2])))}
	for _, t := range timeTicks {
		if lt := math.Log10(t.v); lt >= wallAxis.min && lt <= wallAxis.max {
			wallAxis.ticks, wallAxis.labels = append(wallAxis.ticks, lt), append(wallAxis.labels, t.l)
		}
	}
	costAxis := axis{min: math.Floor(math.Log10(minOf(bc))), max: math.Ceil(math.Log10(maxOf(sc)))}
	for e := costAxis.min; e <= costAxis.max; e++ {
		costAxis.ticks = append(costAxis.ticks, e)
		costAxis.labels = append(costAxis.labels, usdTick(e))
	}
	xAxis := axis{min: plotMinN, max: plotMaxN}
	for e := plotMinN; e <= plotMaxN; e++ {
		xAxis.ticks = append(xAxis.ticks, e)
		xAxis.labels = append(xAxis.labels, nTick(e))
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s, judge shape, %s: sync vs batch (log-log)</text>`+"\n", svgW/2, shortName(model), w.Name)
	panel(&b, 0, "predicted wall-clock", xAxis, wallAxis, ns, []series{
		{"sync", colorSync, sw[0], sw[1], sw[2]},
		{"batch", colorBatch, bw[0], bw[1], bw[2]},
	})
	panel(&b, panelGap, "predicted cost (USD)", xAxis, costAxis, ns, []series{
		{"sync", colorSync, nil, sc, nil},
		{"batch (50 %)", colorBatch, nil, bc, nil},
	})
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

// panel draws one log-log panel at horizontal offset ox.
func panel(b *bytes.Buffer, ox int, title string, x, y axis, ns []float64, ss []series) {
	x0, y0 := float64(ox+marginL), float64(marginT)
	px := func(v float64) float64 { return x0 + (math.Log10(v)-x.min)/(x.max-x.min)*panelW }
	py := func(v float64) float64 { return y0 + panelH - (math.Log10(v)-y.min)/(y.max-y.min)*panelH }
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="13">%s</text>`+"\n", x0+panelW/2, y0-10, title)
	for i, t := range x.ticks {
		xx := x0 + (t-x.min)/(x.max-x.min)*panelW
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", xx, y0, xx, y0+panelH)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xx, y0+panelH+16, x.labels[i])
	}
	for i, t := range y.ticks {
		yy := y0 + panelH - (t-y.min)/(y.max-y.min)*panelH
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, yy, x0+panelW, yy)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, yy+4, y.labels[i])
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, y0, panelW, panelH)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">requests N</text>`+"\n", x0+panelW/2, y0+panelH+36)
	for i, s := range ss {
		if s.low != nil {
			var pts []string
			for k := range ns {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(ns[k]), py(s.low[k])))
			}
			for k := len(ns) - 1; k >= 0; k-- {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(ns[k]), py(s.hi[k])))
			}
			fmt.Fprintf(b, `<polygon points="%s" fill="%s" fill-opacity="0.15" stroke="none"/>`+"\n", strings.Join(pts, " "), s.color)
		}
		var pts []string
		for k := range ns {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(ns[k]), py(s.mid[k])))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.color)
		ly := y0 + 16 + float64(i)*18
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x0+10, ly-4, x0+34, ly-4, s.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0+40, ly, s.name)
	}
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// nTick labels 10^e requests.
func nTick(e float64) string {
	switch v := int(math.Round(math.Pow(10, e))); {
	case v >= 1_000_000:
		return fmt.Sprintf("%dM", v/1_000_000)
	case v >= 1_000:
		return fmt.Sprintf("%dk", v/1_000)
	default:
		return fmt.Sprint(v)
	}
}

// usdTick labels $10^e.
func usdTick(e float64) string {
	v := math.Pow(10, e)
	switch {
	case v < 1:
		return "$" + strings.TrimRight(fmt.Sprintf("%.2f", v), "0")
	case v >= 1000:
		return fmt.Sprintf("$%.0fk", v/1000)
	}
	return fmt.Sprintf("$%.0f", v)
}
