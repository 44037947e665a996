package history

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clock is a settable clock for the writer.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// point is a sample whose counters grow with i on n lanes.
func point(t time.Time, i int, lanes int) Point {
	p := Point{T: Millis(t), Done: int64(i * 10), Cost: [3]float64{float64(i) / 100, float64(i) / 100, 0},
		Tok: [4]int64{int64(i * 1000), int64(i * 200), 0, 0}, B: [5]int64{0, 0, 0, 0, 0}}
	for range lanes {
		row := make([]float64, NumCols)
		row[ColSent], row[ColOK], row[Col429] = float64(i*11), float64(i*10), float64(i/7)
		row[ColIn], row[ColOut] = float64(i*1234), float64(i*251)
		row[ColInFlight], row[ColLimit], row[ColCap] = 37, 41, 100
		for d := range NumDims {
			row[ColBucket0+d*BucketCols+BucketLimit] = 4000000
			row[ColBucket0+d*BucketCols+BucketDepth] = 66666
			row[ColBucket0+d*BucketCols+BucketLevel] = float64(12345 + i%1000)
			row[ColBucket0+d*BucketCols+BucketLowered] = float64(i * 3)
		}
		for w := range NumWaits {
			row[ColWait0+w] = float64(i * 17)
		}
		p.L = append(p.L, row)
	}
	return p
}

func lanesRec(t time.Time, n int) Lanes {
	l := Lanes{T: Millis(t)}
	for i := range n {
		l.Lanes = append(l.Lanes, LaneID{Org: string(rune('a' + i)), Pool: "sonnet"})
	}
	return l
}

// A killed run leaves a torn line; the resumed one cuts it, starts a
// second segment, and the timeline continues its counters with a gap.
func TestKillAndResumeContinueTheTimeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl.history")
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w, err := Open(path, Run{Cmd: "run", Total: 100, Todo: 100}, Options{Now: c.now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(lanesRec(c.t, 2))
	for i := 1; i <= 5; i++ {
		c.t = c.t.Add(time.Second)
		if err := w.Append(point(c.t, i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	// SIGKILL: no Close; a half-written line at the end.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"k":"p","t":17000`)
	f.Close()

	c.t = c.t.Add(time.Minute) // the gap
	w2, err := Open(path, Run{Cmd: "run", Total: 100, Todo: 50, Done0: 50}, Options{Now: c.now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if w2.Seg() != 2 {
		t.Fatalf("resumed segment %d, want 2", w2.Seg())
	}
	w2.Append(lanesRec(c.t, 3)) // a lane more
	for i := 1; i <= 3; i++ {
		c.t = c.t.Add(time.Second)
		w2.Append(point(c.t, i, 3))
	}
	w2.Append(Event{T: Millis(c.t), Kind: "interrupt"})
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	tl, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Segments) != 2 || tl.Len() != 8 || len(tl.Lanes) != 3 || len(tl.Events) != 1 {
		t.Fatalf("segments %d, points %d, lanes %d, events %d; want 2, 8, 3, 1", len(tl.Segments), tl.Len(), len(tl.Lanes), len(tl.Events))
	}
	if gap := tl.Segments[1].Start - tl.Segments[0].End; gap < 60_000 {
		t.Errorf("gap %d ms between the segments, want at least a minute", gap)
	}
	// Lane a's attempts: 55 at the kill, then 11, 22, 33 more.
	sent := tl.Lanes[0].C[ColSent]
	if want := []float64{11, 22, 33, 44, 55, 66, 77, 88}; !equal(sent, want) {
		t.Errorf("lane a's attempts %v, want %v", sent, want)
	}
	// Lane c appears in the second segment only.
	if c := tl.Lanes[2].C[ColSent]; !math.IsNaN(c[0]) || c[7] != 33 {
		t.Errorf("lane c's attempts %v, want NaN before it existed and 33 at the end", c)
	}
	// Gauges are not continued.
	if got := tl.Lanes[0].C[ColInFlight][7]; got != 37 {
		t.Errorf("in flight %v after resume, want the gauge as sampled (37)", got)
	}
	if got := tl.Cost[0][7]; math.Abs(got-0.08) > 1e-9 {
		t.Errorf("cost %v at the end, want 0.05 + 0.03", got)
	}
	if s := tl.Since(tl.T[5]); s.Len() != 2 || len(s.Lanes[0].C[ColOK]) != 2 || len(s.Events) != 1 {
		t.Errorf("Since: %d points, want 2", s.Len())
	}
}

// An event stamped before the last point a page holds, recorded after
// the page's poll, still reaches the page's next poll.
func TestSinceReturnsEventsStampedLate(t *testing.T) {
	tl := NewTimeline()
	tl.AddRun(Run{Cmd: "run"})
	for i := range 3 {
		if err := tl.AddPoint(Point{T: int64(1000 * (i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	tl.Events = append(tl.Events, Event{K: KindEvent, T: 2500, Kind: "batch", State: "created", ID: "late"})
	s := tl.Since(3000)
	if s.Len() != 0 || len(s.Events) != 1 || s.Events[0].ID != "late" {
		t.Errorf("Since(3000): %d points, events %+v; want none and the late event", s.Len(), s.Events)
	}
}

func equal(a Series, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A day sampled every second on six lanes stays under the size goal, the
// counters' last values survive the downsampling, and recent points keep
// their resolution.
func TestRetentionBoundsTheFile(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a day of samples")
	}
	path := filepath.Join(t.TempDir(), "day.history")
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w, err := Open(path, Run{Cmd: "run", Total: 1_000_000}, Options{Now: c.now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(lanesRec(c.t, 6))
	const day = 24 * 3600
	var peak int64
	for i := 1; i <= day; i++ {
		c.t = c.t.Add(time.Second)
		if err := w.Append(point(c.t, i, 6)); err != nil {
			t.Fatal(err)
		}
		if i%600 == 0 {
			st, _ := os.Stat(path)
			peak = max(peak, st.Size())
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	t.Logf("a day at 1 s on 6 lanes: %d bytes after the last compaction, %d at most between compactions, %d compactions", st.Size(), peak, w.Compactions())
	if st.Size() > 10<<20 || peak > 10<<20 {
		t.Errorf("the history of a day is %d bytes (peak %d), over the 10 MB goal", st.Size(), peak)
	}
	tl, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tl.Lanes[5].C[ColOK][tl.Len()-1]; got != float64(day*10) {
		t.Errorf("the last count is %v after downsampling, want %d", got, day*10)
	}
	// The last 10 minutes at a second.
	n := 0
	for _, ts := range tl.T {
		if ts > Millis(c.t)-10*60e3 {
			n++
		}
	}
	if n < 590 {
		t.Errorf("%d points in the last 10 minutes, want one a second", n)
	}
	if tl.Len() > 4000 {
		t.Errorf("%d points kept for a day", tl.Len())
	}
}

func TestSeriesJSON(t *testing.T) {
	s := Series{1, math.NaN(), 2.5, 1e20}
	b, _ := s.MarshalJSON()
	if string(b) != "[1,null,2.5,1e+20]" {
		t.Errorf("%s", b)
	}
	var back Series
	if err := back.UnmarshalJSON(b); err != nil || len(back) != 4 || !math.IsNaN(back[1]) || back[2] != 2.5 {
		t.Errorf("%v %v", back, err)
	}
}

// Retain downsamples a timeline exactly as the file was.
func TestRetainMatchesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h")
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w, err := Open(path, Run{Cmd: "run"}, Options{Now: c.now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	live := NewTimeline()
	live.AddRun(Run{Seg: 1})
	l := lanesRec(c.t, 2)
	w.Append(l)
	live.AddLanes(l)
	for i := 1; i <= 4000; i++ {
		c.t = c.t.Add(time.Second)
		p := point(c.t, i, 2)
		w.Append(p)
		live.AddPoint(p)
	}
	w.Compact()
	live.Retain(w.PointTimes())
	w.Close()
	file, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if live.Len() != file.Len() || live.Len() >= 4000 {
		t.Fatalf("retained %d points, the file %d (of 4000)", live.Len(), file.Len())
	}
	for i := range live.T {
		if live.T[i] != file.T[i] || live.Lanes[1].C[ColOK][i] != file.Lanes[1].C[ColOK][i] {
			t.Fatalf("point %d differs: %d %v, file %d %v", i, live.T[i], live.Lanes[1].C[ColOK][i], file.T[i], file.Lanes[1].C[ColOK][i])
		}
	}
}
