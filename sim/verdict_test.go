package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
)

// judgeBody is a request carrying the default rubric as its system prompt.
func judgeBody(maxTokens int, text string) map[string]any {
	b := msgBody(sonnet, maxTokens, text)
	b["system"] = workload.Rubric
	return b
}

type simVerdict struct {
	Reasoning string `json:"reasoning"`
	Aligned   *int   `json:"aligned"`
	Coherent  *int   `json:"coherent"`
}

func enableVerdicts(refusalRate float64) func(*Config) {
	return func(c *Config) { c.Verdicts = VerdictModel{Enabled: true, RefusalRate: refusalRate} }
}

func TestVerdictPrompt(t *testing.T) {
	tests := []struct {
		name   string
		system string
		want   bool
	}{
		{"default rubric", workload.Rubric, true},
		{"no marker", `Score "aligned" and "coherent" from 0 to 100.`, false},
		{"other fields", `Reply ONLY with a JSON object: {"score": <0-100>}`, false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		if got := VerdictPrompt(tt.system); got != tt.want {
			t.Errorf("%s: VerdictPrompt = %v want %v", tt.name, got, tt.want)
		}
	}
}

// TestVerdictAnswer: with verdicts on, a judge request gets a JSON verdict
// whose reasoning starts with the request's tag, whose scores are
// VerdictScores, whose usage counts its words, and which is the same from
// any org and whether the rubric is a string or a cached system block.
func TestVerdictAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, enableVerdicts(0))
		for i := range 50 {
			body := mustJSON(judgeBody(1000, fmt.Sprintf("Question asked to the AI:\nq%d\n\nAI's response:\na%d", i, i)))
			m := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body))
			other := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyLowPrio, body))
			if m.StopReason != api.StopEndTurn || len(m.Content) != 1 {
				t.Fatalf("body %d: stop %s, %d blocks", i, m.StopReason, len(m.Content))
			}
			text := m.Content[0].Text
			if other.Content[0].Text != text {
				t.Fatalf("body %d: two orgs gave different verdicts", i)
			}
			var v simVerdict
			dec := json.NewDecoder(strings.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil || v.Aligned == nil || v.Coherent == nil {
				t.Fatalf("body %d: verdict %q does not decode: %v", i, text, err)
			}
			if !strings.HasPrefix(text, `{"reasoning": "`+AnswerTag(body)) || !AnswerContains(text, body) || strings.HasPrefix(text, AnswerTag(body)) {
				t.Fatalf("body %d: verdict %q does not carry its tag first in the reasoning", i, text)
			}
			a, c := VerdictScores(s.cfg.Seed, body)
			if *v.Aligned != a || *v.Coherent != c || a < 0 || a > 100 || c < 0 || c > 100 {
				t.Fatalf("body %d: scores %d/%d want %d/%d", i, *v.Aligned, *v.Coherent, a, c)
			}
			if got := int64(len(strings.Fields(text))); got != m.Usage.OutputTokens {
				t.Fatalf("body %d: %d words, usage %d", i, got, m.Usage.OutputTokens)
			}
			if n := m.Usage.OutputTokens; n < int64(max(s.cfg.Output.Min, verdictFixedWords)) || n > int64(max(s.cfg.Output.Max, verdictFixedWords)) {
				t.Fatalf("body %d: %d output tokens outside the output model", i, n)
			}
		}

		// A rubric in system blocks (with a cache breakpoint) is a judge request too.
		b := judgeBody(1000, "blocks")
		b["system"] = []map[string]any{{"type": "text", "text": workload.Rubric, "cache_control": map[string]any{"type": "ephemeral"}}}
		m := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, b))
		if !json.Valid([]byte(m.Content[0].Text)) {
			t.Fatalf("system blocks: %q is not a verdict", m.Content[0].Text)
		}
	})
}

// TestVerdictOnlyWhenAsked: filler answers (tag first) for requests without
// the rubric, and for every request while verdicts are off (the default).
func TestVerdictOnlyWhenAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		on := newTestServer(t, enableVerdicts(0))
		off := newTestServer(t, nil)
		plain := mustJSON(msgBody(sonnet, 1000, "Judge this answer."))
		judge := mustJSON(judgeBody(1000, "Judge this answer."))
		for _, tt := range []struct {
			name string
			s    *Server
			body []byte
		}{{"verdicts on, no rubric", on, plain}, {"verdicts off, rubric", off, judge}} {
			m := decode[api.Message](t, request(t, tt.s, "POST", "/v1/messages", FakeKeyHighPrio, tt.body))
			if !strings.HasPrefix(m.Content[0].Text, AnswerTag(tt.body)+" ") {
				t.Errorf("%s: answer %q does not start with its tag", tt.name, m.Content[0].Text)
			}
		}
	})
}

// TestVerdictTruncated: max_tokens cuts the verdict's words, so the JSON is
// unterminated and stop_reason is max_tokens.
func TestVerdictTruncated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, enableVerdicts(0))
		for _, mt := range []int{1, 2, 5, 20} {
			body := mustJSON(judgeBody(mt, fmt.Sprintf("cut at %d", mt)))
			m := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body))
			if m.StopReason != api.StopMaxTokens || m.Usage.OutputTokens != int64(mt) {
				t.Fatalf("max_tokens %d: stop %s, %d output tokens", mt, m.StopReason, m.Usage.OutputTokens)
			}
			text := m.Content[0].Text
			if json.Valid([]byte(text)) || int64(len(strings.Fields(text))) != m.Usage.OutputTokens || !strings.HasPrefix(text, `{"reasoning":`) {
				t.Fatalf("max_tokens %d: cut verdict %q", mt, text)
			}
			if mt >= 2 && !AnswerContains(text, body) {
				t.Fatalf("max_tokens %d: %q lost its tag", mt, text)
			}
		}
	})
}

// TestVerdictRefusals: a refusal_rate fraction of judge bodies is refused
// (stop_reason refusal, no content, no output), the same bodies every time.
func TestVerdictRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		all := newTestServer(t, enableVerdicts(1))
		m := decode[api.Message](t, request(t, all, "POST", "/v1/messages", FakeKeyHighPrio, judgeBody(100, "x")))
		if m.StopReason != api.StopRefusal || len(m.Content) != 0 || m.Usage.OutputTokens != 0 {
			t.Fatalf("refusal_rate 1: %+v", m)
		}

		s := newTestServer(t, enableVerdicts(0.3))
		const n = 400
		refused := 0
		for i := range n {
			body := mustJSON(judgeBody(1000, fmt.Sprintf("item %d", i)))
			m1 := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body))
			m2 := decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyBatch, body))
			if m1.StopReason != m2.StopReason {
				t.Fatalf("item %d: refused once, answered once", i)
			}
			if m1.StopReason == api.StopRefusal {
				refused++
			}
		}
		if f := float64(refused) / n; f < 0.22 || f > 0.38 {
			t.Fatalf("refused %d of %d, want about 30 %%", refused, n)
		}
	})
}

// TestVerdictBatchAndStream: the batch route and streaming give the same
// verdict as a plain call.
func TestVerdictBatchAndStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, enableVerdicts(0))
		var create api.BatchCreate
		var want []string
		for i := range 5 {
			p := judgeBody(100, fmt.Sprintf("batch item %d", i))
			want = append(want, decode[api.Message](t, request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, p)).Content[0].Text)
			create.Requests = append(create.Requests, api.BatchRequest{CustomID: fmt.Sprintf("i%d", i), Params: mustJSON(p)})
		}
		b := createBatch(t, s, FakeKeyBatch, create)
		time.Sleep(10 * time.Minute)
		rows := results(t, s, FakeKeyBatch, b.ID)
		if len(rows) != 5 {
			t.Fatalf("%d rows", len(rows))
		}
		for i, r := range rows {
			if r.Result.Type != api.ResultSucceeded || r.Result.Message.Content[0].Text != want[i] {
				t.Fatalf("row %d: %+v, want text %q", i, r.Result, want[i])
			}
		}

		p := judgeBody(1000, "stream me")
		p["stream"] = true
		body := mustJSON(p)
		rec := request(t, s, "POST", "/v1/messages", FakeKeyHighPrio, body)
		var text strings.Builder
		for line := range strings.SplitSeq(rec.Body.String(), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Delta struct{ Type, Text string } `json:"delta"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil && ev.Delta.Type == "text_delta" {
				text.WriteString(ev.Delta.Text)
			}
		}
		var v simVerdict
		a, c := VerdictScores(s.cfg.Seed, body)
		if err := json.Unmarshal([]byte(text.String()), &v); err != nil || *v.Aligned != a || *v.Coherent != c || !AnswerContains(v.Reasoning, body) {
			t.Fatalf("streamed %q: %v", text.String(), err)
		}
	})
}

func TestVerdictConfigValidation(t *testing.T) {
	cfg := Default()
	cfg.Verdicts = VerdictModel{Enabled: true, RefusalRate: 1.5}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "refusal_rate") {
		t.Fatalf("Validate() = %v, want a refusal_rate error", err)
	}
}
