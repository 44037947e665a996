// Package guideplot draws the plot of docs/guidelines.md — predicted
// wall-clock and cost against N, sync and batch, on log-log axes with the
// low–high bands — from the series package plan computes, through
// gonum/plot, as a static SVG (issue 41: the plot through a library, not
// by hand). It is a leaf: plan keeps no plotting dependency.
package guideplot

import (
	"bytes"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sluice-dev/sluice/internal/decide/plan"
)

var (
	colorSync  = color.RGBA{0x1f, 0x6f, 0xb4, 0xff}
	colorBatch = color.RGBA{0xd9, 0x53, 0x1e, 0xff}
)

// SVG draws p: two panels side by side, 10 × 4.4 inches.
func SVG(p plan.WallCostPlot) ([]byte, error) {
	wall, err := panel("predicted wall-clock", "wall-clock", p.N, timeTicks, []series{
		{"sync", colorSync, p.SyncWall[0], p.SyncWall[1], p.SyncWall[2]},
		{"batch", colorBatch, p.BatchWall[0], p.BatchWall[1], p.BatchWall[2]},
	})
	if err != nil {
		return nil, err
	}
	cost, err := panel("predicted cost (USD)", "cost", p.N, usdTicks, []series{
		{"sync", colorSync, nil, p.SyncCost, nil},
		{"batch (50 %)", colorBatch, nil, p.BatchCost, nil},
	})
	if err != nil {
		return nil, err
	}
	const w, h = 10 * vg.Inch, 4.4 * vg.Inch
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	title := p.Model + ", judge shape, " + p.World + ": sync vs batch (log-log)"
	top := draw.Crop(dc, 0, 0, 0, -0.35*vg.Inch)
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 13), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter}
	dc.FillText(sty, vg.Point{X: w / 2, Y: h - 0.25*vg.Inch}, title)
	plots := [][]*plot.Plot{{wall, cost}}
	cs := plot.Align(plots, draw.Tiles{Rows: 1, Cols: 2, PadX: 0.4 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.2 * vg.Inch, PadBottom: 0.1 * vg.Inch}, top)
	wall.Draw(cs[0][0])
	cost.Draw(cs[0][1])
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type series struct {
	name         string
	color        color.Color
	low, mid, hi []float64 // low/hi nil: no band
}

func xys(x, y []float64) plotter.XYs {
	out := make(plotter.XYs, len(x))
	for i := range x {
		out[i] = plotter.XY{X: x[i], Y: y[i]}
	}
	return out
}

// panel is one log-log panel of ss against ns.
func panel(title, ylabel string, ns []float64, yticks plot.Ticker, ss []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "requests N"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = nTicks
	p.Y.Tick.Marker = yticks
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = 0.1*vg.Inch, -0.1*vg.Inch
	for _, s := range ss {
		if s.low != nil {
			band := append(xys(ns, s.low), reversed(xys(ns, s.hi))...)
			poly, err := plotter.NewPolygon(band)
			if err != nil {
				return nil, err
			}
			r, g, b, _ := s.color.RGBA()
			poly.Color = color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0x26}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		l, err := plotter.NewLine(xys(ns, s.mid))
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = s.color, vg.Points(2)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p, nil
}

func reversed(v plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(v))
	for i := range v {
		out[i] = v[len(v)-1-i]
	}
	return out
}

// decades returns the powers of ten from below lo to above hi.
func decades(lo, hi float64) []float64 {
	var out []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		out = append(out, e)
	}
	return out
}

// nTicks labels each decade of requests: 10, 100, 1k … 1M.
var nTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, e := range decades(lo, hi) {
		if v := math.Pow(10, e); v >= lo*0.999 && v <= hi*1.001 {
			ts = append(ts, plot.Tick{Value: v, Label: plan.NTick(e)})
		}
	}
	return ts
})

// usdTicks labels each decade of dollars.
var usdTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, e := range decades(lo, hi) {
		if v := math.Pow(10, e); v >= lo*0.999 && v <= hi*1.001 {
			ts = append(ts, plot.Tick{Value: v, Label: plan.USDTick(e)})
		}
	}
	return ts
})

// timeTicks labels durations a person reads: 1 s … 100 h.
var timeTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, t := range []struct {
		v float64
		l string
	}{{1, "1 s"}, {10, "10 s"}, {60, "1 min"}, {600, "10 min"}, {3600, "1 h"}, {36000, "10 h"}, {360000, "100 h"}} {
		if t.v >= lo*0.999 && t.v <= hi*1.001 {
			ts = append(ts, plot.Tick{Value: t.v, Label: t.l})
		}
	}
	return ts
})
