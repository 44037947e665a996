package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

func TestWriterGroupCommit(t *testing.T) {
	const n, maxBatch = 1000, 64
	path := tempPath(t)
	var r recorder
	w, err := Open(path, nil, nil, Options{NoSync: true, MaxBatch: maxBatch, FlushInterval: time.Hour, OnDurable: r.onDurable})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		id := fmt.Sprintf("r-%04d", i)
		want = append(want, id)
		if err := w.Write(rec(id, api.ClassOK, "h")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.ids(); !slices.Equal(got, want) {
		t.Fatalf("OnDurable reported %d ids, want all %d in write order", len(got), n)
	}
	if got := fileIDs(t, path); !slices.Equal(got, want) {
		t.Fatalf("file holds %d records, want all %d in write order", len(got), n)
	}
	// The interval is an hour, so every commit but the last was a full batch.
	for i, b := range r.batches {
		if len(b) != maxBatch && i != len(r.batches)-1 {
			t.Errorf("commit %d held %d records want %d", i, len(b), maxBatch)
		}
	}
	if len(r.batches) != (n+maxBatch-1)/maxBatch {
		t.Errorf("%d commits want %d", len(r.batches), (n+maxBatch-1)/maxBatch)
	}
}

// TestWriterFlushInterval checks a lone record is committed within the
// interval, without Close.
func TestWriterFlushInterval(t *testing.T) {
	durable := make(chan []string, 1)
	w, err := Open(tempPath(t), nil, nil, Options{FlushInterval: 5 * time.Millisecond, OnDurable: func(ids []string) { durable <- ids }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	if err := w.Write(rec("solo", api.ClassOK, "h")); err != nil {
		t.Fatal(err)
	}
	select {
	case ids := <-durable:
		if !slices.Equal(ids, []string{"solo"}) {
			t.Errorf("OnDurable(%v) want [solo]", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lone record was not committed within 5s; FlushInterval is 5ms")
	}
	if d := time.Since(start); d < 5*time.Millisecond {
		t.Errorf("committed after %v, before the 5ms interval", d)
	}
}

func TestWriterCloseFlushes(t *testing.T) {
	path := tempPath(t)
	var r recorder
	w, err := Open(path, nil, nil, Options{FlushInterval: time.Hour, OnDurable: r.onDurable})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "b", "c", "d", "e"}
	for _, id := range want {
		if err := w.Write(rec(id, api.ClassOK, "h")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.ids(); !slices.Equal(got, want) {
		t.Errorf("OnDurable by the time Close returned: %v want %v", got, want)
	}
	if got := fileIDs(t, path); !slices.Equal(got, want) {
		t.Errorf("file ids %v want %v", got, want)
	}
	if err := w.Write(rec("late", api.ClassOK, "h")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v want nil", err)
	}
}

// TestWriterConcurrent has 100 goroutines write at once: every record must
// land exactly once as a complete line, in each goroutine's order, and be
// reported durable exactly once.
func TestWriterConcurrent(t *testing.T) {
	const goroutines, each = 100, 50
	path := tempPath(t)
	var r recorder
	w, err := Open(path, nil, nil, Options{FlushInterval: time.Millisecond, MaxBatch: 128, OnDurable: r.onDurable})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := w.Write(rec(fmt.Sprintf("g%d-%d", g, i), api.ClassOK, "h")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ids := fileIDs(t, path)
	if len(ids) != goroutines*each {
		t.Fatalf("file holds %d records want %d", len(ids), goroutines*each)
	}
	next := make(map[int]int) // goroutine → next index expected
	for _, id := range ids {
		var g, i int
		if _, err := fmt.Sscanf(id, "g%d-%d", &g, &i); err != nil {
			t.Fatalf("bad id %q", id)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: record %d found where %d was due", g, i, next[g])
		}
		next[g]++
	}
	if got := r.ids(); !slices.Equal(got, ids) {
		t.Errorf("OnDurable reported %d ids; want the file's %d, in file order", len(got), len(ids))
	}
}

func TestWriteRejects(t *testing.T) {
	w, err := Open(tempPath(t), nil, nil, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tests := []struct {
		name string
		rec  api.ResultRecord
		err  string
	}{
		{"no custom_id", api.ResultRecord{Result: json.RawMessage(`{}`)}, "results: record without a custom_id"},
		{"invalid result JSON", api.ResultRecord{CustomID: "a", Result: json.RawMessage(`{"type":`)}, `results: record "a": the result is not valid JSON: unexpected end of JSON input`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := w.Write(tt.rec); err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("Write() = %v want an error starting %q", err, tt.err)
			}
		})
	}
	if err := w.Err(); err != nil {
		t.Errorf("a rejected record made the Writer fail: %v", err)
	}
}

// TestWriterEncoding checks a line is the record compacted, HTML unescaped,
// with one trailing newline.
func TestWriterEncoding(t *testing.T) {
	path := tempPath(t)
	w, err := Open(path, nil, nil, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	r := api.ResultRecord{
		CustomID: "a",
		Result:   json.RawMessage("{\"type\": \"succeeded\",\n \"text\": \"<b>&amp;</b>\\n\"}"),
		Sluice:   &api.RunMeta{ParamsHash: "h", Class: api.ClassOK},
	}
	if err := w.Write(r); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"custom_id":"a","result":{"type":"succeeded","text":"<b>&amp;</b>\n"},"sluice":{"params_hash":"h","class":"ok"}}` + "\n"
	if string(got) != want {
		t.Errorf("file =\n%s\nwant\n%s", got, want)
	}
}

// TestWriterStickyError breaks the file under the Writer: the failing
// commit is never reported, and the Writer refuses everything after it.
func TestWriterStickyError(t *testing.T) {
	var r recorder
	w, err := Open(tempPath(t), nil, nil, Options{FlushInterval: time.Millisecond, OnDurable: r.onDurable})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec("before", api.ClassOK, "h")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(r.ids()) == 1 })
	w.f.Close() // the disk goes away
	if err := w.Write(rec("lost", api.ClassOK, "h")); err != nil {
		t.Fatal(err) // queued before the failure is known
	}
	waitFor(t, func() bool { return w.Err() != nil })
	if err := w.Write(rec("after", api.ClassOK, "h")); err == nil || err != w.Err() {
		t.Errorf("Write after a failed commit = %v want the sticky error %v", err, w.Err())
	}
	if err := w.Close(); err == nil || !strings.HasPrefix(err.Error(), "results: ") || !errors.Is(err, os.ErrClosed) {
		t.Errorf("Close() = %v want the first error, a results: error wrapping os.ErrClosed", err)
	}
	if got := r.ids(); !slices.Equal(got, []string{"before"}) {
		t.Errorf("OnDurable reported %v want only [before]", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}

// TestWriterBackpressure fills the queue while OnDurable holds the Writer's
// goroutine: Write must block, not grow memory, and resume once it drains.
func TestWriterBackpressure(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	w, err := Open(tempPath(t), nil, nil, Options{NoSync: true, MaxBatch: 1, FlushInterval: time.Millisecond,
		OnDurable: func([]string) { once.Do(func() { <-release }) }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() {
		n := 0
		for i := range queueLen + 10 {
			if w.Write(rec(fmt.Sprintf("b-%d", i), api.ClassOK, "h")) == nil {
				n++
			}
		}
		done <- n
	}()
	select {
	case <-done:
		t.Fatal("queueLen+10 Writes returned while the Writer was stalled")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if n := <-done; n != queueLen+10 {
		t.Errorf("%d Writes succeeded want %d", n, queueLen+10)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkWriter(b *testing.B) {
	path := b.TempDir() + "/results.jsonl"
	w, err := Open(path, nil, nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := rec("bench-00000000", api.ClassOK, "0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	b.SetBytes(int64(len(line(r.CustomID, api.ClassOK, r.Sluice.ParamsHash))))
	b.ResetTimer()
	for range b.N {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
