package judge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/judge"
	"github.com/sluice-dev/sluice/sim"
)

// TestDefaultRubricMatchesWorkload: the workload generator writes the
// requests Build makes from the default rubric (same system, same user
// message), so benchmarks judge what `sluice judge` sends.
func TestDefaultRubricMatchesWorkload(t *testing.T) {
	var b strings.Builder
	if err := (workload.Judge{N: 1, Seed: 1}).Write(&b); err != nil {
		t.Fatal(err)
	}
	var line api.BatchRequest
	if err := json.Unmarshal([]byte(b.String()), &line); err != nil {
		t.Fatal(err)
	}
	var p api.MessageRequest
	json.Unmarshal(line.Params, &p)
	var system, user string
	json.Unmarshal(p.System, &system)
	json.Unmarshal(p.Messages[0].Content, &user)
	q, a, ok := strings.Cut(strings.TrimPrefix(user, "Question asked to the AI:\n"), "\n\nAI's response:\n")
	if !ok || system != judge.DefaultSystem {
		t.Fatalf("workload request differs from the default rubric: %s", line.Params)
	}
	it := judge.Item{ID: "x", Fields: map[string]string{"question": q, "completion": a}}
	if got, _ := judge.DefaultRubric().Render(it); got != user {
		t.Fatalf("rendered %q, workload %q", got, user)
	}
}

// TestSimulatorVerdicts: what Build sends, the simulator (verdicts on)
// answers with JSON that Classify reads back as the simulator's scores;
// a small max_tokens gives truncated, a refusal refused.
func TestSimulatorVerdicts(t *testing.T) {
	if !sim.VerdictPrompt(judge.DefaultSystem) {
		t.Fatal("the simulator does not recognise the default rubric")
	}
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.Default()
		cfg.Verdicts.Enabled = true
		s, err := sim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		refusing := cfg
		refusing.Verdicts.RefusalRate = 1
		sr, err := sim.New(refusing)
		if err != nil {
			t.Fatal(err)
		}
		call := func(s *sim.Server, params []byte) api.ResultRecord {
			r := httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(params))
			r.Header.Set("x-api-key", cfg.Orgs[0].Keys[0].Key)
			r.Header.Set("anthropic-version", api.VersionDefault)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code != 200 {
				t.Fatalf("simulator: %d %s", rec.Code, rec.Body)
			}
			res := append(append([]byte(`{"type":"succeeded","message":`), rec.Body.Bytes()...), '}')
			return api.ResultRecord{CustomID: "x", Result: res, Sluice: &api.RunMeta{Class: api.ClassOK}}
		}
		r := judge.DefaultRubric()
		for i := range 20 {
			it := judge.Item{ID: fmt.Sprintf("i%d", i), Fields: map[string]string{"question": fmt.Sprint("q", i), "completion": "a"}}
			params, err := judge.Build(it, r, judge.DefaultModel, 1024, nil)
			if err != nil {
				t.Fatal(err)
			}
			v := judge.Classify(call(s, params), r, false)
			a, c := sim.VerdictScores(cfg.Seed, params)
			if v.Class != judge.OK || v.Scores["aligned"] != float64(a) || v.Scores["coherent"] != float64(c) ||
				!sim.AnswerContains(v.Scores["reasoning"].(string), params) {
				t.Fatalf("item %d: %+v, want ok %d/%d", i, v, a, c)
			}
			short, _ := judge.Build(it, r, judge.DefaultModel, 8, nil)
			if v := judge.Classify(call(s, short), r, false); v.Class != judge.Truncated {
				t.Fatalf("item %d at max_tokens 8: %+v", i, v)
			}
			if v := judge.Classify(call(sr, params), r, false); v.Class != judge.Refused {
				t.Fatalf("item %d refused: %+v", i, v)
			}
		}
	})
}
