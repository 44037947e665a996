package job_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/sim"
)

// TestVersionRefusalsStopBeforeSending: a job sent with API version
// 2026-10-21 whose lines carry what that version refuses (a temperature,
// an assistant document) stops before the first call, naming the lines and
// the field; with --skip-invalid those lines are recorded invalid_input and
// the others sent — the API never sees a request it would refuse.
func TestVersionRefusalsStopBeforeSending(t *testing.T) {
	e := newEnv(t, 0, func(c *sim.Config) { c.TimeScale = 2000 })
	var ps []map[string]any
	for i := range 100 {
		p := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("q %d", i)}}}
		switch i % 25 {
		case 3:
			p["temperature"] = 1 // refused even at its default
		case 11:
			p["messages"] = []map[string]any{{"role": "user", "content": "a"}, {"role": "assistant", "content": []map[string]any{{"type": "document", "source": map[string]any{}}}}}
		}
		ps = append(ps, p)
	}
	writeLines(t, e.in, ps)
	o := e.options()
	o.Dispatch.Client = client.New(client.Config{BaseURL: e.base, MaxConns: 64, Version: api.Version20261021})

	_, err := e.run(o)
	var inv *job.InvalidInputError
	if !errors.As(err, &inv) || inv.Total != 8 {
		t.Fatalf("err = %v, want 8 invalid lines", err)
	}
	msg := err.Error()
	for _, want := range []string{"in.jsonl:4: params.temperature: API version 2026-10-21 refuses temperature", "in.jsonl:12: params.messages[1].content[0]: API version 2026-10-21 refuses a document block", "--anthropic-version 2023-06-01"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if e.simCalls() != 0 {
		t.Fatalf("%d calls reached the API", e.simCalls())
	}

	o.SkipInvalid = true
	rep, err := e.run(o)
	if err != nil {
		t.Fatal(err)
	}
	got := e.readResults()
	invalid := 0
	for id, r := range got {
		if r.Sluice.Class == api.ClassInvalidInput {
			invalid++
			if !strings.Contains(string(r.Result), "2026-10-21") {
				t.Errorf("%s: %s", id, r.Result)
			}
		}
	}
	if len(got) != 100 || invalid != 8 || rep.Succeeded != 92 || rep.Errored.Final != 0 {
		t.Errorf("%d results, %d invalid_input, %d succeeded, %d final", len(got), invalid, rep.Succeeded, rep.Errored.Final)
	}
	for _, org := range e.sim.Stats().Orgs {
		if n := org.Counters.Versions[api.Version20230601]; n != 0 {
			t.Errorf("%d calls sent with 2023-06-01", n)
		}
	}
}

// TestTheSimulatorRefusesWhatTheVersionRefuses: without the check (sent
// with 2023-06-01 rules but the API answering 2026-10-21's), each such line
// would be a 400 — the simulator holds the API's rule, so the check above
// spares real refusals.
func TestTheSimulatorRefusesWhatTheVersionRefuses(t *testing.T) {
	e := newEnv(t, 0, func(c *sim.Config) { c.TimeScale = 2000 })
	c := client.New(client.Config{BaseURL: e.base, Version: api.Version20261021})
	pool := e.options().Dispatch.Keys
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":8,"temperature":1,"messages":[{"role":"user","content":"x"}]}`)
	o := c.Do(t.Context(), pool[0], "POST", "/v1/messages", body)
	if o.Status != 400 || !strings.Contains(string(o.Body), "temperature") {
		t.Fatalf("2026-10-21 with a temperature: %d %s", o.Status, o.Body)
	}
	o = client.New(client.Config{BaseURL: e.base}).Do(t.Context(), pool[0], "POST", "/v1/messages", body)
	if o.Status != 200 {
		t.Fatalf("2023-06-01 with a temperature: %d %s", o.Status, o.Body)
	}
}
