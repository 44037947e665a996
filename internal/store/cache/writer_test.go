package cache

import (
	"fmt"
	"testing"
)

func params(i int) []byte {
	return fmt.Appendf(nil, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"%d"}]}`, i)
}

// TestWriterStoresAnswersOnly: answers queued on a Writer are readable
// after Close under KeyOf(params, extra...); every non-answer is refused
// and counted, and never reaches the file.
func TestWriterStoresAnswersOnly(t *testing.T) {
	c, _ := openTemp(t, On)
	w := c.NewWriter()
	const n = 5000
	for i := range n {
		w.Add(Entry{Params: params(i), Extra: []string{"fp"}, Message: answers[i%len(answers)].body, Meta: Meta{CustomID: fmt.Sprint("id-", i), Origin: "sync"}})
	}
	for i, tt := range nonAnswers {
		w.Add(Entry{Params: params(n + i), Extra: []string{"fp"}, Message: tt.body})
	}
	w.Add(Entry{Params: []byte("not json"), Message: answers[0].body})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k, _ := KeyOf(params(i), "fp")
		if !c.Contains(k) {
			t.Fatalf("answer %d not stored", i)
		}
		if k2, _ := KeyOf(params(i)); c.Contains(k2) {
			t.Fatalf("answer %d found without its extra key part", i)
		}
	}
	for i := range nonAnswers {
		k, _ := KeyOf(params(n+i), "fp")
		if c.Contains(k) {
			t.Fatalf("non-answer %q stored", nonAnswers[i].name)
		}
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Entries != n || s.Puts != n || s.RefusedPuts != int64(len(nonAnswers)+1) {
		t.Fatalf("Stats = %+v", s)
	}
	if s.Hits != 0 || s.Misses != 0 {
		t.Fatalf("Contains counted gets: %+v", s)
	}
}

// TestContainsRechecks: a planted non-answer row is not contained.
func TestContainsRechecks(t *testing.T) {
	c, _ := openTemp(t, On)
	k := key(1)
	plant(t, c, k[:], encodeRow(nonAnswers[0].body, Meta{}))
	if c.Contains(k) {
		t.Fatal("a planted non-answer row is contained")
	}
	if err := c.Put(k, answers[0].body, Meta{}); err != nil {
		t.Fatal(err)
	}
	if !c.Contains(k) {
		t.Fatal("a stored answer is not contained")
	}
}

// TestWriterReadOnlyAndOff: a Writer on a read-only, Off or nil cache
// drops everything without error.
func TestWriterReadOnlyAndOff(t *testing.T) {
	ro, _ := openTemp(t, ReadOnly)
	off, _ := Open("", Off)
	for _, c := range []*Cache{ro, off, nil} {
		w := c.NewWriter()
		w.Add(Entry{Params: params(1), Message: answers[0].body})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := KeyOf(params(1))
	if ro.Contains(k) {
		t.Fatal("a read-only cache was written")
	}
}
