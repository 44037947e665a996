package history

// tier is one step of the retention: points younger than age are kept
// one every res milliseconds.
type tier struct{ age, res int64 }

// tiers are the retention, youngest first (docs/see.md, "Bounds"): every
// second for 10 minutes, 5 s to an hour, 30 s to 6 hours, 2 minutes to
// 2 days, 10 minutes beyond.
var tiers = []tier{
	{10 * 60e3, 1e3},
	{60 * 60e3, 5e3},
	{6 * 60 * 60e3, 30e3},
	{48 * 60 * 60e3, 120e3},
	{1 << 62, 600e3},
}

// Resolution is the spacing of kept points this old (milliseconds).
func Resolution(age int64) int64 {
	for _, t := range tiers {
		if age < t.age {
			return t.res
		}
	}
	return tiers[len(tiers)-1].res
}

// Keep returns the records a compaction at now (Unix ms) keeps: every
// record that is not a point, the first and last point of each segment,
// and, walking from the newest point back, each point at least its age's
// Resolution (less a tenth, for the sampler's jitter) before the last one
// kept. Dropping a point loses no total: counters are cumulative.
func Keep(recs []kept, now int64) []kept {
	first := map[int]int{} // segment → index of its first point
	last := map[int]int{}
	for i, r := range recs {
		if r.k != KindPoint {
			continue
		}
		if _, ok := first[r.seg]; !ok {
			first[r.seg] = i
		}
		last[r.seg] = i
	}
	keep := make([]bool, len(recs))
	lastKept := int64(-1)
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.k != KindPoint {
			keep[i] = true
			continue
		}
		res := Resolution(now - r.t)
		if first[r.seg] == i || last[r.seg] == i || lastKept < 0 || lastKept-r.t >= res-res/10 {
			keep[i] = true
			lastKept = r.t
		}
	}
	out := make([]kept, 0, len(recs))
	for i, r := range recs {
		if keep[i] {
			out = append(out, r)
		}
	}
	return out
}
