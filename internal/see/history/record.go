// Package history is a run's recorded time series and events: the file
// beside the results (docs/see.md), the writer that appends to it and keeps
// it bounded, and the reader that turns it into a Timeline the page and the
// report draw.
//
// A file is JSON lines, one record each, its kind in "k": a segment's start
// (Run), its lane list (Lanes), a sample (Point), an event (Event), the
// text report at a run's end (Report). Counters are cumulative within a
// segment (one process); the Timeline continues them across segments.
package history

import (
	"encoding/json"
	"time"
)

// Version is the format written in every Run record.
const Version = 1

// Record kinds.
const (
	KindRun    = "run"
	KindLanes  = "lanes"
	KindPoint  = "p"
	KindEvent  = "ev"
	KindReport = "report"
)

// NumWaits and NumDims mirror lane.NumWaits and budget.NumDims (the
// sampler checks they agree): the waited-time and bucket columns.
const (
	NumWaits = 8
	NumDims  = 4
)

// Lane columns, in the order a Point's lane rows hold them.
const (
	ColSent     = iota // attempts sent (counter)
	ColOK              // answered 2xx (counter)
	Col429             // answered 429 (counter)
	Col529             // answered 529 (counter)
	Col5xx             // 5xx answers and lost connections (counter)
	ColIn              // input tokens, cache reads and writes included (counter)
	ColOut             // output tokens (counter)
	ColCacheW          // prompt-cache write tokens (counter)
	ColCacheR          // prompt-cache read tokens (counter)
	ColInFlight        // attempts in flight (gauge)
	ColLimit           // the AIMD concurrency limit (gauge)
	ColCap             // the etiquette cap (gauge)
	ColDead            // 1 when the lane's organization has no live key (gauge)
	ColPaused          // 1 while paused by a retry-after (gauge)
	ColWait0           // NumWaits columns: milliseconds work waited, by what held it (counters)
	// ColBucket0 starts NumDims groups of BucketCols columns: a bucket's
	// per-minute limit, learned depth and level (gauges), and Lowered
	// (counter): what the headers took off that sluice's spending did not
	// explain.
	ColBucket0 = ColWait0 + NumWaits
	NumCols    = ColBucket0 + NumDims*BucketCols
)

// Offsets within a bucket's group of columns.
const (
	BucketLimit = iota
	BucketDepth
	BucketLevel
	BucketLowered
	BucketCols
)

// Cols names the lane columns, written in every Run record so that a
// file describes itself.
var Cols = func() []string {
	c := make([]string, NumCols)
	copy(c, []string{"sent", "ok", "429", "529", "5xx", "in_tokens", "out_tokens", "cache_write", "cache_read",
		"in_flight", "limit", "cap", "dead", "paused"})
	for i := range NumWaits {
		c[ColWait0+i] = "waited_ms_" + string(rune('0'+i))
	}
	for d := range NumDims {
		for j, s := range []string{"limit", "depth", "level", "lowered"} {
			c[ColBucket0+d*BucketCols+j] = "bucket" + string(rune('0'+d)) + "_" + s
		}
	}
	return c
}()

// Counter reports whether lane column c is cumulative (continued across
// segments by the Timeline), rather than a gauge.
func Counter(c int) bool {
	switch {
	case c <= ColCacheR:
		return true
	case c >= ColWait0 && c < ColBucket0:
		return true
	case c >= ColBucket0:
		return (c-ColBucket0)%BucketCols == BucketLowered
	}
	return false
}

// Run starts a segment: one process recording.
type Run struct {
	K       string   `json:"k"`
	V       int      `json:"v"`
	Seg     int      `json:"seg"`
	T       int64    `json:"t"`
	Cmd     string   `json:"cmd"` // run, judge, proxy
	PID     int      `json:"pid"`
	Total   int      `json:"total"`    // requests in the input
	Todo    int      `json:"todo"`     // requests this process gives a result
	Done0   int      `json:"done0"`    // done before it started
	MaxCost float64  `json:"max_cost"` // USD; 0: none
	Cols    []string `json:"cols"`
}

// LaneID names a lane: organization label and model pool.
type LaneID struct {
	Org  string `json:"org"`
	Pool string `json:"pool"`
}

// Lanes is a segment's lane list from this record on, in column order.
type Lanes struct {
	K     string   `json:"k"`
	T     int64    `json:"t"`
	Lanes []LaneID `json:"lanes"`
}

// Point is one sample.
type Point struct {
	K    string `json:"k"`
	T    int64  `json:"t"`
	Done int64  `json:"done"` // results done: before this segment and durable since
	// Cost is the ledger's USD: total, sync, batch (counters).
	Cost [3]float64 `json:"cost"`
	// Unpriced counts requests of models without a price (a counter): with
	// any, Cost is only the priced part and the cost is unknown.
	Unpriced int64 `json:"unpriced,omitempty"`
	// Tok is the ledger's tokens: input, output, cache write, cache read
	// (counters; batch answers included).
	Tok [4]int64 `json:"tok"`
	// B is the batch path: submitted, results, re-routed (counters),
	// pending, in flight (gauges).
	B [5]int64 `json:"b"`
	// L holds a row of NumCols columns per lane of the segment's Lanes.
	L [][]float64 `json:"l"`
}

// Event is an event record (internal/engine/event.Event on disk). Times are
// Unix milliseconds; predictions seconds.
type Event struct {
	K     string  `json:"k"`
	T     int64   `json:"t"`
	Kind  string  `json:"kind"`
	State string  `json:"state,omitempty"`
	Lane  string  `json:"lane,omitempty"`
	ID    string  `json:"id,omitempty"`
	Batch string  `json:"batch,omitempty"`
	N     int     `json:"n,omitempty"`
	Why   string  `json:"why,omitempty"`
	Route string  `json:"route,omitempty"`
	Share float64 `json:"share,omitempty"`
	Pred  float64 `json:"pred,omitempty"`
	Low   float64 `json:"low,omitempty"`
	High  float64 `json:"high,omitempty"`
}

// Report is a run's end: its text report (job.Report) as JSON and, for a
// judge, its summary (judge.Summary).
type Report struct {
	K      string          `json:"k"`
	T      int64           `json:"t"`
	Report json.RawMessage `json:"report,omitempty"`
	Judge  json.RawMessage `json:"judge,omitempty"`
	// Status is how the run ended: done, interrupted, failed.
	Status string `json:"status,omitempty"`
}

// Millis is t as Unix milliseconds.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// head is what the writer and the reader need of any record.
type head struct {
	K   string `json:"k"`
	T   int64  `json:"t"`
	Seg int    `json:"seg"`
}
