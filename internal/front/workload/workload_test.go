package workload_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/judge"
)

// TestItemsBuildTheSameRequests: the items WriteItems writes, judged with
// the default rubric, are the requests Write writes — same ids, system
// prompt, user message, model and max_tokens.
func TestItemsBuildTheSameRequests(t *testing.T) {
	j := workload.Judge{N: 200, Seed: 9}
	var reqs, items bytes.Buffer
	if err := j.Write(&reqs); err != nil {
		t.Fatal(err)
	}
	if err := j.WriteItems(&items); err != nil {
		t.Fatal(err)
	}
	rs, is := bufio.NewScanner(&reqs), bufio.NewScanner(&items)
	n := 0
	for rs.Scan() {
		if !is.Scan() {
			t.Fatal("fewer items than requests")
		}
		var r api.BatchRequest
		var it judge.Item
		if err := json.Unmarshal(rs.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(is.Bytes(), &it); err != nil {
			t.Fatal(err)
		}
		built, err := judge.Build(it, judge.DefaultRubric(), judge.DefaultModel, judge.DefaultMaxTokens, nil)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		json.Unmarshal(r.Params, &a)
		json.Unmarshal(built, &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if r.CustomID != it.ID || !bytes.Equal(ja, jb) {
			t.Fatalf("line %d: request %s\nitem builds %s", n+1, ja, jb)
		}
		n++
	}
	if n != 200 || is.Scan() {
		t.Fatalf("%d requests, items left over: %v", n, is.Scan())
	}
}
