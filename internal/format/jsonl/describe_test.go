package jsonl

import (
	"errors"
	"testing"
)

func TestDescribeParamsMatchesValidateLine(t *testing.T) {
	params := `{"model":"claude-haiku-4-5","max_tokens":32,"system":[{"type":"text","text":"be brief"}],` +
		`"messages":[{"role":"user","content":"héllo \"there\""},{"role":"assistant","content":[{"type":"text","text":"hi"}]}]}`
	line, err := ValidateLine([]byte(`{"custom_id":"a","params":` + params + `}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DescribeParams([]byte(" " + params + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Model != line.Model || got.MaxTokens != line.MaxTokens || got.EstInputTokens != line.EstInputTokens || got.Stream {
		t.Fatalf("DescribeParams = %+v, ValidateLine = %+v", got, line)
	}
}

func TestDescribeParamsAllowsStreamAndReportsWhatItRead(t *testing.T) {
	got, err := DescribeParams([]byte(`{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"abcd"}]}`))
	if err != nil || !got.Stream || got.EstInputTokens != 1+4+7 {
		t.Fatalf("stream body: %+v, %v", got, err)
	}
	// A rule broken after model and max_tokens: both are still reported,
	// and the estimate comes from the body's size.
	broken := `{"model":"m","max_tokens":5,"messages":[]}`
	got, err = DescribeParams([]byte(broken))
	var le LineError
	if !errors.As(err, &le) || got.Model != "m" || got.MaxTokens != 5 || got.EstInputTokens != int64(len(broken)/4+7) {
		t.Fatalf("broken body: %+v, %v", got, err)
	}
	for _, bad := range []string{`{"model":`, `[1]`, `"x"`} {
		if _, err := DescribeParams([]byte(bad)); err == nil {
			t.Errorf("DescribeParams(%s) accepted", bad)
		}
	}
}
