package view

import (
	"bufio"
	"encoding/json"
	"math"
	"os"

	"github.com/sluice-dev/sluice/judge"
)

// JudgeData is what a judge's report adds: the summary (verdict classes
// per group) and each numeric field's score distribution per group.
type JudgeData struct {
	Summary       judge.Summary  `json:"summary"`
	Distributions []Distribution `json:"distributions"`
}

// Distribution is one numeric field's histogram per group.
type Distribution struct {
	Field  string      `json:"field"`
	Bins   []Bin       `json:"bins"`
	Groups []GroupDist `json:"groups"`
}

// Bin is [Lo, Hi) (the last bin includes Hi).
type Bin struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// GroupDist is one group's counts per bin.
type GroupDist struct {
	Group  string  `json:"group"`
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Counts []int   `json:"counts"`
}

// maxBins is the most bins of a distribution.
const maxBins = 20

// Judge reads the verdicts file and builds the distributions of s's
// numeric fields (bounded by the field's declared range, else by the
// scores seen). A verdicts file that cannot be read gives the summary
// alone.
func Judge(s judge.Summary, verdictsPath string) JudgeData {
	jd := JudgeData{Summary: s}
	var fields []judge.Field
	for _, f := range s.Fields {
		if f.Type == judge.Int || f.Type == judge.Number {
			fields = append(fields, f)
		}
	}
	if len(fields) == 0 {
		return jd
	}
	type sample struct {
		groups []string
		v      float64
	}
	scores := make([][]sample, len(fields))
	f, err := os.Open(verdictsPath)
	if err != nil {
		return jd
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var v judge.Verdict
		if json.Unmarshal(sc.Bytes(), &v) != nil || v.Class != judge.OK {
			continue
		}
		for i, fd := range fields {
			if x, ok := v.Scores[fd.Name].(float64); ok {
				scores[i] = append(scores[i], sample{v.Groups, x})
			}
		}
	}
	for i, fd := range fields {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range scores[i] {
			lo, hi = math.Min(lo, s.v), math.Max(hi, s.v)
		}
		if fd.Min != nil {
			lo = *fd.Min
		}
		if fd.Max != nil {
			hi = *fd.Max
		}
		if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
			continue
		}
		n := maxBins
		if fd.Type == judge.Int && hi-lo+1 <= maxBins {
			n = int(hi-lo) + 1
		}
		if hi <= lo {
			n, hi = 1, lo+1
		}
		width := (hi - lo) / float64(n)
		if fd.Type == judge.Int && n == int(hi-lo)+1 {
			width = 1
		}
		d := Distribution{Field: fd.Name}
		for b := range n {
			d.Bins = append(d.Bins, Bin{Lo: lo + float64(b)*width, Hi: lo + float64(b+1)*width})
		}
		byGroup := map[string]*GroupDist{}
		var order []*GroupDist
		group := func(name string) *GroupDist {
			g := byGroup[name]
			if g == nil {
				g = &GroupDist{Group: name, Counts: make([]int, n)}
				byGroup[name] = g
				order = append(order, g)
			}
			return g
		}
		group(judge.AllGroup)
		for _, gs := range s.Groups {
			group(gs.Group)
		}
		for _, smp := range scores[i] {
			b := min(n-1, max(0, int((smp.v-lo)/width)))
			for _, name := range append([]string{judge.AllGroup}, smp.groups...) {
				g := group(name)
				g.Counts[b]++
				g.N++
				g.Mean += smp.v
			}
		}
		for _, g := range order {
			if g.N > 0 {
				g.Mean /= float64(g.N)
				d.Groups = append(d.Groups, *g)
			}
		}
		jd.Distributions = append(jd.Distributions, d)
	}
	return jd
}
