package cacheprefix_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
	"github.com/sluice-dev/sluice/sim"
)

const min = 1024 // Sonnet 4.5's documented minimum

var rubric = strings.Repeat("Judge the answer for accuracy. ", 700) // ≈ 5,250 tokens by the chars ÷ 4 rule

func req(t *testing.T, v map[string]any) []byte {
	t.Helper()
	if _, ok := v["model"]; !ok {
		v["model"] = "claude-sonnet-4-5"
	}
	if _, ok := v["max_tokens"]; !ok {
		v["max_tokens"] = 16
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func user(text string) map[string]any { return map[string]any{"role": "user", "content": text} }

// survey adds every request and returns, per request, where its shared
// prefix ends (ok false: none).
func survey(reqs [][]byte) ([]cacheprefix.Unit, []bool) {
	s := cacheprefix.NewSurvey()
	for _, r := range reqs {
		units, _ := cacheprefix.Units(r)
		s.Add(units, min, min)
	}
	var at []cacheprefix.Unit
	var ok []bool
	for _, r := range reqs {
		units, _ := cacheprefix.Units(r)
		u, found := s.Shared(units, min, 2)
		at, ok = append(at, u), append(ok, found)
	}
	return at, ok
}

// TestSharedPrefixes: a shared system prompt, a document asked several
// questions, shared few-shot turns, shared tools, two groups with their
// own rubrics — each request's prefix ends where its prompt stops being
// shared; a prompt shared by no other request, or shorter than the
// minimum, has none; the request's own last block is never a prefix.
func TestSharedPrefixes(t *testing.T) {
	doc := strings.Repeat("A long document paragraph. ", 400)
	other := strings.Repeat("Another rubric entirely. ", 800)
	tools := []map[string]any{{"name": "lookup", "description": strings.Repeat("tool text ", 600), "input_schema": map[string]any{"type": "object"}}}
	few := []map[string]any{user(rubric), {"role": "assistant", "content": "Understood."}}
	for _, tt := range []struct {
		name string
		reqs [][]byte
		want []cacheprefix.Place // nil entry: no prefix
	}{
		{"system prompt", [][]byte{
			req(t, map[string]any{"system": rubric, "messages": []any{user("q1")}}),
			req(t, map[string]any{"system": rubric, "messages": []any{user("q2")}}),
		}, []cacheprefix.Place{{Kind: cacheprefix.System}, {Kind: cacheprefix.System}}},
		{"a document asked questions", [][]byte{
			req(t, map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": doc}, map[string]any{"type": "text", "text": "q1"}}}}}),
			req(t, map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": doc}, map[string]any{"type": "text", "text": "q2"}}}}}),
		}, []cacheprefix.Place{{Kind: cacheprefix.Message}, {Kind: cacheprefix.Message}}},
		{"few-shot turns", [][]byte{
			req(t, map[string]any{"messages": append(append([]any{}, few[0], few[1]), user("q1"))}),
			req(t, map[string]any{"messages": append(append([]any{}, few[0], few[1]), user("q2"))}),
		}, []cacheprefix.Place{{Kind: cacheprefix.Message, Msg: 1}, {Kind: cacheprefix.Message, Msg: 1}}},
		{"tools", [][]byte{
			req(t, map[string]any{"tools": tools, "system": "short", "messages": []any{user("q1")}}),
			req(t, map[string]any{"tools": tools, "system": "other short", "messages": []any{user("q2")}}),
		}, []cacheprefix.Place{{Kind: cacheprefix.Tools}, {Kind: cacheprefix.Tools}}},
		{"two groups and a loner", [][]byte{
			req(t, map[string]any{"system": rubric, "messages": []any{user("q1")}}),
			req(t, map[string]any{"system": other, "messages": []any{user("q2")}}),
			req(t, map[string]any{"system": rubric, "messages": []any{user("q3")}}),
			req(t, map[string]any{"system": other, "messages": []any{user("q4")}}),
			req(t, map[string]any{"system": doc + "unique", "messages": []any{user("q5")}}),
		}, []cacheprefix.Place{{Kind: cacheprefix.System}, {Kind: cacheprefix.System}, {Kind: cacheprefix.System}, {Kind: cacheprefix.System}, {}}},
		{"shorter than the minimum", [][]byte{
			req(t, map[string]any{"system": "be brief", "messages": []any{user("q1")}}),
			req(t, map[string]any{"system": "be brief", "messages": []any{user("q2")}}),
		}, []cacheprefix.Place{{}, {}}},
		{"the same whole prompt twice", [][]byte{
			req(t, map[string]any{"messages": []any{user(rubric)}}),
			req(t, map[string]any{"messages": []any{user(rubric)}}),
		}, []cacheprefix.Place{{}, {}}},
	} {
		at, ok := survey(tt.reqs)
		for i, want := range tt.want {
			switch {
			case want == (cacheprefix.Place{}) && ok[i]:
				t.Errorf("%s: request %d: prefix at %+v, want none", tt.name, i, at[i].At)
			case want != (cacheprefix.Place{}) && (!ok[i] || at[i].At != want):
				t.Errorf("%s: request %d: prefix at %+v (found %v), want %+v", tt.name, i, at[i].At, ok[i], want)
			}
		}
	}
	// The groups' prefixes differ.
	g := [][]byte{
		req(t, map[string]any{"system": rubric, "messages": []any{user("q1")}}),
		req(t, map[string]any{"system": other, "messages": []any{user("q2")}}),
		req(t, map[string]any{"system": rubric, "messages": []any{user("q3")}}),
		req(t, map[string]any{"system": other, "messages": []any{user("q4")}}),
	}
	at, _ := survey(g)
	if at[0].Hash != at[2].Hash || at[1].Hash != at[3].Hash || at[0].Hash == at[1].Hash {
		t.Errorf("group fingerprints %x %x %x %x: want two pairs", at[0].Hash, at[1].Hash, at[2].Hash, at[3].Hash)
	}
	// Another model's requests do not share a prefix with these.
	m := req(t, map[string]any{"model": "claude-opus-4-8", "system": rubric, "messages": []any{user("q1")}})
	mu, _ := cacheprefix.Units(m)
	gu, _ := cacheprefix.Units(g[0])
	if mu[0].Hash == gu[0].Hash {
		t.Error("the same system prompt on two models has one fingerprint: caches are per model")
	}
}

// TestOwnBreakpoint: a request that places its own breakpoint says so.
func TestOwnBreakpoint(t *testing.T) {
	r := req(t, map[string]any{"system": []any{map[string]any{"type": "text", "text": rubric, "cache_control": map[string]any{"type": "ephemeral"}}}, "messages": []any{user("q")}})
	if _, own := cacheprefix.Units(r); !own {
		t.Error("a request with a cache_control block: own = false")
	}
	if _, own := cacheprefix.Units(req(t, map[string]any{"system": `talk about "cache_control" fields`, "messages": []any{user("q")}})); own {
		t.Error("a text that mentions cache_control counted as a breakpoint")
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"cache_control": map[string]any{"type": "string"}}}
	if _, own := cacheprefix.Units(req(t, map[string]any{"tools": []any{map[string]any{"name": "t", "input_schema": schema}}, "messages": []any{user("q")}})); own {
		t.Error("a tool schema property named cache_control counted as a breakpoint")
	}
	escaped := []byte(`{"model":"claude-sonnet-4-5","max_tokens":5,"system":[{"type":"text","text":"x","cache\u005fcontrol":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"q"}]}`)
	if _, own := cacheprefix.Units(escaped); !own {
		t.Error("an escaped cache_control key not seen as the request's own breakpoint")
	}
	if _, own := cacheprefix.Units(req(t, map[string]any{"cache_control": map[string]any{"type": "ephemeral"}, "messages": []any{user("q")}})); !own {
		t.Error("top-level automatic caching not seen as the request's own")
	}
}

// TestNoBreakpointOnThinking: a shared assistant turn that ends in a
// thinking block cannot carry the breakpoint; it goes on the block before.
func TestNoBreakpointOnThinking(t *testing.T) {
	turn := map[string]any{"role": "assistant", "content": []any{
		map[string]any{"type": "text", "text": rubric},
		map[string]any{"type": "thinking", "thinking": "hmm", "signature": "sig"}}}
	reqs := [][]byte{
		req(t, map[string]any{"messages": []any{user("start"), turn, user("q1")}}),
		req(t, map[string]any{"messages": []any{user("start"), turn, user("q2")}}),
	}
	at, ok := survey(reqs)
	if want := (cacheprefix.Place{Kind: cacheprefix.Message, Msg: 1, Block: 0}); !ok[0] || at[0].At != want {
		t.Errorf("prefix at %+v (found %v), want the text block %+v before the thinking block", at[0].At, ok[0], want)
	}
}

// TestInjectIsWhatTheAPICaches: the injected requests are valid Messages
// requests with one breakpoint at the prefix's end, keep every other
// member, and the simulator (which implements the documented cache rules)
// writes the prefix on the first and reads it on the second — for a string
// system prompt, a block of a message's content, the last tool, and with
// a one-hour TTL.
func TestInjectIsWhatTheAPICaches(t *testing.T) {
	cfg := sim.Default()
	cfg.TimeScale = 100 // answers in tens of milliseconds; a 5-minute TTL is 3 s
	srv, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	send := func(body []byte) api.Usage {
		t.Helper()
		r, _ := http.NewRequest("POST", ts.URL+"/v1/messages", bytes.NewReader(body))
		r.Header.Set("x-api-key", sim.FakeKeyHighPrio)
		r.Header.Set("anthropic-version", "2023-06-01")
		r.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m api.Message
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
		}
		return m.Usage
	}
	doc := strings.Repeat("A long document paragraph. ", 400)
	tools := []map[string]any{{"name": "lookup", "description": strings.Repeat("tool text ", 600), "input_schema": map[string]any{"type": "object"}}}
	for i, tt := range []struct {
		name string
		mk   func(q string) []byte
		ttl  string
	}{
		{"string system", func(q string) []byte {
			return req(t, map[string]any{"system": rubric, "temperature": 0, "messages": []any{user(q)}})
		}, ""},
		{"document block", func(q string) []byte {
			return req(t, map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": doc}, map[string]any{"type": "text", "text": q}}}}})
		}, "1h"},
		{"tools", func(q string) []byte {
			return req(t, map[string]any{"tools": tools, "system": "about " + q, "messages": []any{user(q)}})
		}, ""},
	} {
		reqs := [][]byte{tt.mk(fmt.Sprint("first ", i)), tt.mk(fmt.Sprint("second ", i))}
		at, ok := survey(reqs)
		if !ok[0] {
			t.Fatalf("%s: no shared prefix", tt.name)
		}
		var usages []api.Usage
		for j, r := range reqs {
			out, err := cacheprefix.Inject(r, at[j].At, tt.ttl)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if !json.Valid(out) || bytes.Count(out, []byte(`"cache_control"`)) != 1 {
				t.Fatalf("%s: injected %.300s …", tt.name, out)
			}
			var before, after map[string]json.RawMessage
			_ = json.Unmarshal(r, &before)
			_ = json.Unmarshal(out, &after)
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Errorf("%s: member %q lost", tt.name, k)
				}
			}
			if _, own := cacheprefix.Units(out); !own {
				t.Errorf("%s: the injected request does not read as having a breakpoint", tt.name)
			}
			usages = append(usages, send(out))
		}
		if usages[0].CacheCreationInputTokens < min || usages[1].CacheReadInputTokens != usages[0].CacheCreationInputTokens {
			t.Errorf("%s: first %+v, second %+v: want a write then a read of the same prefix", tt.name, usages[0], usages[1])
		}
		if tt.ttl == "1h" && usages[0].CacheCreation.Ephemeral1h == 0 {
			t.Errorf("%s: the 1 h TTL was not written as one: %+v", tt.name, usages[0].CacheCreation)
		}
	}
	if _, err := cacheprefix.Inject(req(t, map[string]any{"messages": []any{user("q")}}), cacheprefix.Place{Kind: cacheprefix.Tools}, ""); err == nil {
		t.Error("injecting on tools a request does not have: no error")
	}
	if _, err := cacheprefix.Inject(req(t, map[string]any{"system": "s", "messages": []any{user("q")}}), cacheprefix.Place{Kind: cacheprefix.System}, "2h"); err == nil {
		t.Error("a 2h TTL accepted")
	}
}

// TestSurveyReach: Reach finds, without the requests, what Shared would
// answer for each surveyed request and sums the prefixes that reach the
// larger reading of the minimum: a group whose breakpoint goes deeper
// (a shared document after the shared rubric) counts at the document; a
// group too small for atLeast counts nothing; a prefix between the
// documented minimum and the larger reading gets a breakpoint but no
// relief.
func TestSurveyReach(t *testing.T) {
	doc := strings.Repeat("A shared document sentence. ", 400) // ≈ 2,800 tokens
	short := strings.Repeat("Short rubric words. ", 300)       // ≈ 1,500 tokens: above 1,024, below 2,048
	var reqs [][]byte
	for i := range 20 { // the rubric only
		reqs = append(reqs, req(t, map[string]any{"system": rubric, "messages": []any{user(fmt.Sprint("question ", i))}}))
	}
	for i := range 10 { // the rubric, then a shared document
		reqs = append(reqs, req(t, map[string]any{"system": rubric, "messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": doc}, map[string]any{"type": "text", "text": fmt.Sprint("ask ", i)}}}}}))
	}
	for i := range 5 { // a group below atLeast
		reqs = append(reqs, req(t, map[string]any{"system": "other " + rubric, "messages": []any{user(fmt.Sprint("q ", i))}}))
	}
	for i := range 9 { // shared, but below the larger reading
		reqs = append(reqs, req(t, map[string]any{"system": short, "messages": []any{user(fmt.Sprint("s ", i))}}))
	}
	const relief = 2048
	s := cacheprefix.NewSurvey()
	for _, r := range reqs {
		units, _ := cacheprefix.Units(r)
		s.Add(units, min, relief)
	}
	// What Shared answers, request by request.
	var want cacheprefix.Reach
	chosen := map[uint64]bool{}
	breakpoints := 0
	for _, r := range reqs {
		units, _ := cacheprefix.Units(r)
		u, ok := s.Shared(units, min, 8)
		if !ok {
			continue
		}
		breakpoints++
		if u.Tokens >= relief {
			want.Requests++
			want.Tokens += u.Tokens
			chosen[u.Hash] = true
		}
	}
	want.Prefixes = len(chosen)
	got := s.Reach(8)
	if got != want || want.Requests != 30 || want.Prefixes != 2 || breakpoints != 39 {
		t.Fatalf("Reach = %+v, Shared request by request = %+v (%d breakpoints); want 30 requests over 2 prefixes of 39 with a breakpoint", got, want, breakpoints)
	}
	// A lower threshold takes the small group in too.
	if r := s.Reach(5); r.Requests != 35 || r.Prefixes != 3 {
		t.Fatalf("Reach(5) = %+v, want 35 requests over 3 prefixes", r)
	}
}
