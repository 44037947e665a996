package judge

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// AllGroup names the summary row that counts every verdict.
const AllGroup = "(all)"

// Summary is the per-group account of a set of verdicts: how many fell in
// each class, and the mean and count of each numeric score over the ok
// verdicts. It encodes as JSON as is; WriteText and WriteCSV render it.
type Summary struct {
	// Fields are the rubric's numeric fields, in declaration order.
	Fields []Field `json:"fields"`
	// Sentinels are the rubric's whole-reply sentinels.
	Sentinels []string `json:"sentinels,omitempty"`
	// Groups: AllGroup first, then every label in sorted order.
	Groups []GroupSummary `json:"groups"`
}

// GroupSummary is one row of a Summary.
type GroupSummary struct {
	Group string `json:"group"`
	N     int    `json:"n"`
	// Classes counts verdicts per class; every class is present.
	Classes map[Class]int `json:"classes"`
	// Scores has an entry per numeric field.
	Scores map[string]ScoreSummary `json:"scores"`
	// Sentinels counts ok verdicts that were a whole-reply sentinel.
	Sentinels map[string]int `json:"sentinels,omitempty"`
}

// ScoreSummary is one numeric field over a group's ok verdicts.
type ScoreSummary struct {
	// N counts the ok verdicts with a number in this field; Mean is their
	// mean (0 when N is 0).
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	// Sentinels counts the ok verdicts holding a field sentinel (such as
	// "REFUSAL") instead of a number; they are not in N or Mean.
	Sentinels map[string]int `json:"sentinels,omitempty"`
}

// Tally accumulates verdicts into a Summary without keeping them, so a
// million verdicts cost a few maps. It is not safe for concurrent use.
type Tally struct {
	fields    []Field
	sentinels []string
	groups    map[string]*groupTally
}

type groupTally struct {
	n         int
	classes   map[Class]int
	sum       map[string]float64
	count     map[string]int
	fieldSent map[string]map[string]int
	sentinels map[string]int
}

// NewTally returns an empty tally for verdicts under r.
func NewTally(r *Rubric) *Tally {
	t := &Tally{sentinels: slices.Clone(r.Sentinels), groups: map[string]*groupTally{}}
	for _, f := range r.Fields {
		if f.Numeric() {
			t.fields = append(t.fields, f)
		}
	}
	return t
}

// Summarize tallies vs under r.
func Summarize(r *Rubric, vs []Verdict) Summary {
	t := NewTally(r)
	for _, v := range vs {
		t.Add(v)
	}
	return t.Summary()
}

// Add counts v in AllGroup and in each of its distinct group labels.
func (t *Tally) Add(v Verdict) {
	t.group(AllGroup).add(t, v)
	for i, g := range v.Groups {
		if g == AllGroup || slices.Contains(v.Groups[:i], g) {
			continue
		}
		t.group(g).add(t, v)
	}
}

func (t *Tally) group(name string) *groupTally {
	g := t.groups[name]
	if g == nil {
		g = &groupTally{classes: map[Class]int{}, sum: map[string]float64{}, count: map[string]int{},
			fieldSent: map[string]map[string]int{}, sentinels: map[string]int{}}
		t.groups[name] = g
	}
	return g
}

func (g *groupTally) add(t *Tally, v Verdict) {
	g.n++
	g.classes[v.Class]++
	if v.Class != OK {
		return
	}
	if v.Sentinel != "" {
		g.sentinels[v.Sentinel]++
		return
	}
	for _, f := range t.fields {
		switch x := v.Scores[f.Name].(type) {
		case string:
			if g.fieldSent[f.Name] == nil {
				g.fieldSent[f.Name] = map[string]int{}
			}
			g.fieldSent[f.Name][x]++
		default:
			if n, ok := number(x); ok {
				g.sum[f.Name] += n
				g.count[f.Name]++
			}
		}
	}
}

// number reads the numeric forms a score takes in memory or from JSON.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// Summary returns the summary so far.
func (t *Tally) Summary() Summary {
	s := Summary{Fields: slices.Clone(t.fields), Sentinels: slices.Clone(t.sentinels)}
	names := make([]string, 0, len(t.groups))
	for name := range t.groups {
		if name != AllGroup {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = append([]string{AllGroup}, names...)
	for _, name := range names {
		g := t.groups[name]
		if g == nil {
			g = t.group(name) // an empty tally still has its AllGroup row
		}
		row := GroupSummary{Group: name, N: g.n, Classes: map[Class]int{}, Scores: map[string]ScoreSummary{}}
		for _, c := range Classes {
			row.Classes[c] = g.classes[c]
		}
		for _, f := range t.fields {
			ss := ScoreSummary{N: g.count[f.Name]}
			if ss.N > 0 {
				ss.Mean = g.sum[f.Name] / float64(ss.N)
			}
			if m := g.fieldSent[f.Name]; len(m) > 0 {
				ss.Sentinels = cloneCounts(m)
			}
			row.Scores[f.Name] = ss
		}
		if len(g.sentinels) > 0 {
			row.Sentinels = cloneCounts(g.sentinels)
		}
		s.Groups = append(s.Groups, row)
	}
	return s
}

func cloneCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// WriteText writes s as an aligned table: one row per group, a column per
// class, and per numeric field "mean (n)" followed by any sentinel counts.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"group", "n"}
	for _, c := range Classes {
		head = append(head, string(c))
	}
	for _, f := range s.Fields {
		head = append(head, f.Name)
	}
	if len(s.Sentinels) > 0 {
		head = append(head, "sentinels")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range s.Groups {
		row := []string{g.Group, strconv.Itoa(g.N)}
		for _, c := range Classes {
			row = append(row, strconv.Itoa(g.Classes[c]))
		}
		for _, f := range s.Fields {
			sc := g.Scores[f.Name]
			cell := "-"
			if sc.N > 0 {
				cell = fmt.Sprintf("%.2f (%d)", sc.Mean, sc.N)
			}
			for _, k := range sortedKeys(sc.Sentinels) {
				cell += fmt.Sprintf(" %s=%d", k, sc.Sentinels[k])
			}
			row = append(row, cell)
		}
		if len(s.Sentinels) > 0 {
			var parts []string
			for _, k := range sortedKeys(g.Sentinels) {
				parts = append(parts, fmt.Sprintf("%s=%d", k, g.Sentinels[k]))
			}
			row = append(row, strings.Join(parts, " "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// WriteCSV writes s as CSV with a header row: group, n, one column per
// class, then per numeric field <name>_n, <name>_mean (empty when n is 0)
// and <name>_<sentinel> for each sentinel the field declares, then
// sentinel_<s> for each whole-reply sentinel.
func (s Summary) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"group", "n"}
	for _, c := range Classes {
		head = append(head, string(c))
	}
	for _, f := range s.Fields {
		head = append(head, f.Name+"_n", f.Name+"_mean")
		for _, sent := range f.Sentinels {
			head = append(head, f.Name+"_"+sent)
		}
	}
	for _, sent := range s.Sentinels {
		head = append(head, "sentinel_"+sent)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, g := range s.Groups {
		row := []string{g.Group, strconv.Itoa(g.N)}
		for _, c := range Classes {
			row = append(row, strconv.Itoa(g.Classes[c]))
		}
		for _, f := range s.Fields {
			sc := g.Scores[f.Name]
			mean := ""
			if sc.N > 0 {
				mean = strconv.FormatFloat(sc.Mean, 'f', -1, 64)
			}
			row = append(row, strconv.Itoa(sc.N), mean)
			for _, sent := range f.Sentinels {
				row = append(row, strconv.Itoa(sc.Sentinels[sent]))
			}
		}
		for _, sent := range s.Sentinels {
			row = append(row, strconv.Itoa(g.Sentinels[sent]))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
