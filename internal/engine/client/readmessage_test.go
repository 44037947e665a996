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

// BenchmarkReadMessage reads a short Message as the simulator sends it.
func BenchmarkReadMessage(b *testing.B) {
	ans := []byte(`{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-haiku-4-5-20251001",` +
		`"content":[{"type":"text","text":"The answer is correct: 4.\nScore: 5"}],"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":312,"cache_creation_input_tokens":0,"cache_read_input_tokens":3000,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":16,"service_tier":"standard"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := readMessage(ans); err != nil {
			b.Fatal(err)
		}
	}
}
