package plan

import (
	"fmt"
	"math"
	"strings"
)

// The plot of docs/guidelines.md: two log-log panels, wall-clock and cost
// versus N, sync and batch, with low–high bands. plan computes the series
// (WallCostPlot); internal/see/guideplot draws them through gonum/plot, so
// that plan keeps no plotting dependency.

const (
	plotPoints         = 51 // N = 10^(1 + i/10)
	plotMinN, plotMaxN = 1.0, 6.0
)

// WallCostPlot is the guidelines' plot as data: for each N, the predicted
// wall-clock (seconds: low, mid, high) and cost (USD) of the judge shape on
// each route.
type WallCostPlot struct {
	Model, World        string
	N                   []float64
	SyncWall, BatchWall [3][]float64 // low, mid, high
	SyncCost, BatchCost []float64
}

// wallCostPlot computes the guidelines' plot for model on world w.
func wallCostPlot(w World, model string) (WallCostPlot, error) {
	out := WallCostPlot{Model: shortName(model), World: w.Name}
	j := JudgeJob(1, model)
	p, err := newPlanner(w, j, Options{})
	if err != nil {
		return out, err
	}
	for i := range plotPoints {
		n := int(math.Round(math.Pow(10, plotMinN+float64(i)/10)))
		out.N = append(out.N, float64(n))
		s := planSync(w, p.lanes, p.j, n).wall
		b := planBatch(w, n, 0, 0, DefaultStuckFactor).wall
		for k, v := range []Range{s, b} {
			dst := &out.SyncWall
			if k == 1 {
				dst = &out.BatchWall
			}
			dst[0] = append(dst[0], v.Low.Seconds())
			dst[1] = append(dst[1], v.Mid.Seconds())
			dst[2] = append(dst[2], v.High.Seconds())
		}
		out.SyncCost = append(out.SyncCost, p.costOf(n, false))
		out.BatchCost = append(out.BatchCost, p.costOf(n, true))
	}
	return out, nil
}

// NTick labels 10^e requests.
func NTick(e float64) string {
	switch v := int(math.Round(math.Pow(10, e))); {
	case v >= 1_000_000:
		return fmt.Sprintf("%dM", v/1_000_000)
	case v >= 1_000:
		return fmt.Sprintf("%dk", v/1_000)
	default:
		return fmt.Sprint(v)
	}
}

// USDTick labels $10^e.
func USDTick(e float64) string {
	v := math.Pow(10, e)
	switch {
	case v < 1:
		return "$" + strings.TrimRight(fmt.Sprintf("%.2f", v), "0")
	case v >= 1000:
		return fmt.Sprintf("$%.0fk", v/1000)
	}
	return fmt.Sprintf("$%.0f", v)
}
