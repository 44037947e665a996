package client

import "testing"

func TestReadMessage(t *testing.T) {
	u, stop, err := readMessage([]byte(` {"content":[{"type":"text","text":"{\"usage\":1}"}],"stop_reason":"max_tokens",` +
		`"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":7}}`))
	if err != nil || stop != "max_tokens" || u.InputTokens != 12 || u.OutputTokens != 3 || u.CacheReadInputTokens != 7 {
		t.Fatalf("readMessage = %+v %q %v", u, stop, err)
	}
	for _, bad := range []string{`{"usage":`, `[]`, `"text"`, `{"usage":"none"}`} {
		if _, _, err := readMessage([]byte(bad)); err == nil {
			t.Errorf("readMessage(%s) accepted", bad)
		}
	}
}
