package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
)

// Series is a column of numbers; NaN (no value: the lane did not exist
// then) is written as JSON null.
type Series []float64

// MarshalJSON writes the numbers compactly, NaN as null.
func (s Series) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+len(s)*4)
	b = append(b, '[')
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			b = append(b, "null"...)
		case v == math.Trunc(v) && math.Abs(v) < 1e15:
			b = strconv.AppendInt(b, int64(v), 10)
		default:
			b = strconv.AppendFloat(b, v, 'g', 6, 64)
		}
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Series) UnmarshalJSON(b []byte) error {
	var raw []*float64
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = make(Series, len(raw))
	for i, p := range raw {
		(*s)[i] = math.NaN()
		if p != nil {
			(*s)[i] = *p
		}
	}
	return nil
}

// Segment is one process's part of a timeline.
type Segment struct {
	Seg     int     `json:"seg"`
	Cmd     string  `json:"cmd"`
	PID     int     `json:"pid"`
	Start   int64   `json:"start"`
	End     int64   `json:"end"` // its last point (Start when it has none)
	Total   int     `json:"total"`
	Todo    int     `json:"todo"`
	Done0   int     `json:"done0"`
	MaxCost float64 `json:"max_cost"`
}

// LaneSeries is one lane's columns over the timeline.
type LaneSeries struct {
	LaneID
	C [NumCols]Series `json:"c"`
}

// Timeline is a history in columns, ready to draw: one entry per point in
// T and in every series, counters continued across segments (a resumed
// run's series go on from where the last process stopped), NaN where a
// lane did not exist.
type Timeline struct {
	V        int           `json:"v"`
	Cols     []string      `json:"cols"`
	Segments []Segment     `json:"segments"`
	Lanes    []*LaneSeries `json:"lanes"`
	T        []int64       `json:"t"`
	Seg      []int         `json:"seg"` // index into Segments, per point
	Done     Series        `json:"done"`
	Cost     [3]Series     `json:"cost"`
	Unpriced Series        `json:"unpriced"` // requests without a price (Point.Unpriced)
	Tok      [4]Series     `json:"tok"`
	B        [5]Series     `json:"b"`
	Events   []Event       `json:"events"`
	// Report is the last run's end, if one was recorded.
	Report *Report `json:"report,omitempty"`

	b builder
}

// builder is what Add keeps between records.
type builder struct {
	cur    []int // the current segment's lane columns → index in Lanes
	byID   map[LaneID]int
	off    [][]float64 // per lane: what earlier segments counted (counters)
	last   [][]float64 // per lane: the current segment's last row
	offTop [3 + 4 + 3 + 1]float64
	lastTp [3 + 4 + 3 + 1]float64
}

// NewTimeline returns an empty timeline.
func NewTimeline() *Timeline {
	return &Timeline{V: Version, Cols: Cols, b: builder{byID: map[LaneID]int{}}}
}

// Read reads the history file at path into a timeline (a torn last line
// is skipped).
func Read(path string) (*Timeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	tl := NewTimeline()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		if err := tl.AddLine(sc.Bytes()); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	if len(tl.Segments) == 0 {
		return nil, fmt.Errorf("%w: %s has no run record", ErrFormat, path)
	}
	return tl, nil
}

// FromLines builds a timeline from a Writer's Lines.
func FromLines(lines [][]byte) (*Timeline, error) {
	tl := NewTimeline()
	for _, l := range lines {
		if err := tl.AddLine(l); err != nil {
			return nil, err
		}
	}
	return tl, nil
}

// AddLine adds one record line; a line of an unknown kind is skipped.
func (tl *Timeline) AddLine(line []byte) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	var h head
	if err := json.Unmarshal(line, &h); err != nil {
		return nil // a torn or foreign line: skipped
	}
	var err error
	switch h.K {
	case KindRun:
		var r Run
		if err = json.Unmarshal(line, &r); err == nil {
			if r.V != Version {
				return fmt.Errorf("%w (version %d)", ErrFormat, r.V)
			}
			tl.AddRun(r)
		}
	case KindLanes:
		var l Lanes
		if err = json.Unmarshal(line, &l); err == nil {
			tl.AddLanes(l)
		}
	case KindPoint:
		var p Point
		if err = json.Unmarshal(line, &p); err == nil {
			err = tl.AddPoint(p)
		}
	case KindEvent:
		var e Event
		if err = json.Unmarshal(line, &e); err == nil {
			tl.Events = append(tl.Events, e)
		}
	case KindReport:
		var r Report
		if err = json.Unmarshal(line, &r); err == nil {
			tl.Report = &r
		}
	}
	return err
}

// AddRun starts a segment: the counters so far become its offsets.
func (tl *Timeline) AddRun(r Run) {
	b := &tl.b
	for i := range b.last {
		for c, v := range b.last[i] {
			if Counter(c) && !math.IsNaN(v) {
				b.off[i][c] += v
			}
			b.last[i][c] = math.NaN()
		}
	}
	for i := range b.lastTp {
		if !math.IsNaN(b.lastTp[i]) && topCounter(i) {
			b.offTop[i] += b.lastTp[i]
		}
		b.lastTp[i] = 0
	}
	b.cur = nil
	tl.Segments = append(tl.Segments, Segment{Seg: r.Seg, Cmd: r.Cmd, PID: r.PID, Start: r.T, End: r.T,
		Total: r.Total, Todo: r.Todo, Done0: r.Done0, MaxCost: r.MaxCost})
}

// topCounter says which of the job-wide columns (cost 3, tokens 4, batch
// counters 3) are counters: all of them.
func topCounter(int) bool { return true }

// AddLanes sets the current segment's lane columns.
func (tl *Timeline) AddLanes(l Lanes) {
	b := &tl.b
	b.cur = b.cur[:0]
	for _, id := range l.Lanes {
		i, ok := b.byID[id]
		if !ok {
			i = len(tl.Lanes)
			b.byID[id] = i
			ls := &LaneSeries{LaneID: id}
			for c := range ls.C {
				ls.C[c] = make(Series, len(tl.T))
				for k := range ls.C[c] {
					ls.C[c][k] = math.NaN()
				}
			}
			tl.Lanes = append(tl.Lanes, ls)
			nan := make([]float64, NumCols)
			for c := range nan {
				nan[c] = math.NaN()
			}
			b.off = append(b.off, make([]float64, NumCols))
			b.last = append(b.last, nan)
		}
		b.cur = append(b.cur, i)
	}
}

// errNoSegment: a point before any run record.
var errNoSegment = errors.New("history: a point before any run record")

// AddPoint adds a sample.
func (tl *Timeline) AddPoint(p Point) error {
	if len(tl.Segments) == 0 {
		return errNoSegment
	}
	b := &tl.b
	seg := len(tl.Segments) - 1
	tl.Segments[seg].End = p.T
	tl.T = append(tl.T, p.T)
	tl.Seg = append(tl.Seg, seg)
	tl.Done = append(tl.Done, float64(p.Done))
	top := [11]float64{p.Cost[0], p.Cost[1], p.Cost[2], float64(p.Tok[0]), float64(p.Tok[1]), float64(p.Tok[2]), float64(p.Tok[3]),
		float64(p.B[0]), float64(p.B[1]), float64(p.B[2]), float64(p.Unpriced)}
	for i, v := range top {
		b.lastTp[i] = v
		top[i] = v + b.offTop[i]
	}
	for i := range 3 {
		tl.Cost[i] = append(tl.Cost[i], top[i])
	}
	for i := range 4 {
		tl.Tok[i] = append(tl.Tok[i], top[3+i])
	}
	for i := range 3 {
		tl.B[i] = append(tl.B[i], top[7+i])
	}
	tl.Unpriced = append(tl.Unpriced, top[10])
	tl.B[3] = append(tl.B[3], float64(p.B[3]))
	tl.B[4] = append(tl.B[4], float64(p.B[4]))
	seen := make([]bool, len(tl.Lanes))
	for j, row := range p.L {
		if j >= len(b.cur) {
			break
		}
		i := b.cur[j]
		seen[i] = true
		ls := tl.Lanes[i]
		for c := range NumCols {
			v := math.NaN()
			if c < len(row) {
				v = row[c]
			}
			if Counter(c) && !math.IsNaN(v) {
				b.last[i][c] = v
				v += b.off[i][c]
			}
			ls.C[c] = append(ls.C[c], v)
		}
	}
	for i, ls := range tl.Lanes {
		if !seen[i] {
			for c := range ls.C {
				ls.C[c] = append(ls.C[c], math.NaN())
			}
		}
	}
	return nil
}

// Since is the part of tl after t (Unix ms): the points later than t and
// the events later than t − EventOverlap, with every segment and lane
// (what a page that has the rest appends).
func (tl *Timeline) Since(t int64) *Timeline {
	i := len(tl.T)
	for i > 0 && tl.T[i-1] > t {
		i--
	}
	out := &Timeline{V: tl.V, Cols: tl.Cols, Segments: tl.Segments, T: tl.T[i:], Seg: tl.Seg[i:], Done: tl.Done[i:], Unpriced: tl.Unpriced[i:], Report: tl.Report}
	for k := range tl.Cost {
		out.Cost[k] = tl.Cost[k][i:]
	}
	for k := range tl.Tok {
		out.Tok[k] = tl.Tok[k][i:]
	}
	for k := range tl.B {
		out.B[k] = tl.B[k][i:]
	}
	for _, ls := range tl.Lanes {
		o := &LaneSeries{LaneID: ls.LaneID}
		for c := range ls.C {
			o.C[c] = ls.C[c][i:]
		}
		out.Lanes = append(out.Lanes, o)
	}
	for _, e := range tl.Events {
		if e.T > t-EventOverlap {
			out.Events = append(out.Events, e)
		}
	}
	return out
}

// EventOverlap is how far before t Since still returns events (ms): an
// event can be stamped before a point recorded ahead of it (a batch
// event's time is when the chunk changed), so a page that has everything
// up to t gets those again and drops the ones it holds.
const EventOverlap = 60_000

// Retain keeps the points whose times are in keep (sorted, as
// Writer.PointTimes gives them): the timeline downsampled as its file was.
func (tl *Timeline) Retain(keep []int64) {
	j := 0
	idx := make([]int, 0, len(keep))
	for i, t := range tl.T {
		for j < len(keep) && keep[j] < t {
			j++
		}
		if j < len(keep) && keep[j] == t {
			idx = append(idx, i)
		}
	}
	pick := func(s Series) Series {
		for k, i := range idx {
			s[k] = s[i]
		}
		return s[:len(idx)]
	}
	for k, i := range idx {
		tl.T[k], tl.Seg[k] = tl.T[i], tl.Seg[i]
	}
	tl.T, tl.Seg = tl.T[:len(idx)], tl.Seg[:len(idx)]
	tl.Done = pick(tl.Done)
	tl.Unpriced = pick(tl.Unpriced)
	for k := range tl.Cost {
		tl.Cost[k] = pick(tl.Cost[k])
	}
	for k := range tl.Tok {
		tl.Tok[k] = pick(tl.Tok[k])
	}
	for k := range tl.B {
		tl.B[k] = pick(tl.B[k])
	}
	for _, ls := range tl.Lanes {
		for c := range ls.C {
			ls.C[c] = pick(ls.C[c])
		}
	}
}

// Len is the number of points.
func (tl *Timeline) Len() int { return len(tl.T) }
