// Package workload generates deterministic, judge-shaped request files: the
// LLM-as-judge calls sluice exists for (a rubric as the system prompt, one
// question/answer pair per request), with a chosen token shape.
package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/judge"
)

// Rubric is the default judge rubric (judge.DefaultSystem): aligned and
// coherent scores 0-100.
const Rubric = judge.DefaultSystem

// Judge describes a judge-shaped workload.
type Judge struct {
	N         int
	Model     string // default claude-sonnet-4-5-20250929
	MaxTokens int    // default 256
	// InputMin and InputMax bound the approximate input tokens per request
	// (rubric included); default 120-400.
	InputMin, InputMax int
	Seed               uint64
	// IDPrefix prefixes custom_ids (default "item").
	IDPrefix string
	// NoRubric leaves the system prompt out (small lines for memory tests).
	NoRubric bool
	// System, if set, is every request's system prompt instead of the
	// rubric: a long shared prefix (`sluice-bench caching`).
	System string
}

// system is the system prompt every request shares.
func (j Judge) system() string {
	if j.System != "" {
		return j.System
	}
	return Rubric
}

var words = strings.Fields(`the a model answer question user assistant because therefore however example
policy safety honest helpful reasoning evidence claim result method data analysis report plan
explain describe compare summarize evaluate consider propose argue support refute context detail`)

// Write writes the workload as Message Batches request lines to w.
func (j Judge) Write(w io.Writer) error {
	if j.Model == "" {
		j.Model = "claude-sonnet-4-5-20250929"
	}
	if j.MaxTokens == 0 {
		j.MaxTokens = 256
	}
	return j.each(w, func(id, q, a string) any {
		params := map[string]any{
			"model": j.Model, "max_tokens": j.MaxTokens,
			"messages": []map[string]any{{"role": "user",
				"content": "Question asked to the AI:\n" + q + "\n\nAI's response:\n" + a}},
		}
		if !j.NoRubric {
			params["system"] = j.system()
		}
		return map[string]any{"custom_id": id, "params": params}
	})
}

// each draws the workload's items — id, question, answer — and writes
// line(id, question, answer) for each, as JSON, to w. Write and WriteItems
// share it, so they draw the same items.
func (j Judge) each(w io.Writer, line func(id, q, a string) any) error {
	if j.InputMin == 0 {
		j.InputMin = 120
	}
	if j.InputMax < j.InputMin {
		j.InputMax = max(400, j.InputMin)
	}
	if j.IDPrefix == "" {
		j.IDPrefix = "item"
	}
	rng := rand.New(rand.NewPCG(j.Seed, 0x10b))
	rubricTokens := (len(j.system()) + 3) / 4
	if j.NoRubric {
		rubricTokens = 0
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	for i := range j.N {
		target := j.InputMin + rng.IntN(j.InputMax-j.InputMin+1) - rubricTokens
		q, a := text(rng, max(8, target/3)), text(rng, max(8, target-target/3))
		if err := enc.Encode(line(fmt.Sprintf("%s-%07d", j.IDPrefix, i), q, a)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes the workload to path.
func (j Judge) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := j.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// text returns about n tokens of filler (a word is about 1.3 tokens).
func text(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n*3/4; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// WriteItems writes the same workload as judge items, one
// {"id", "question", "completion"} object per line (ids from IDPrefix, as
// in Write): judged with the default rubric, each gives the request Write
// writes for it, so `sluice judge` on these items and `sluice run` on
// Write's requests send the same thing.
func (j Judge) WriteItems(w io.Writer) error {
	return j.each(w, func(id, q, a string) any {
		return map[string]string{"id": id, "question": q, "completion": a}
	})
}

// WriteItemsFile writes WriteItems to path.
func (j Judge) WriteItemsFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := j.WriteItems(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
