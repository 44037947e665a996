package dispatch_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// refuseKey answers every call of key with status and body, and every
// other call with a message after 100 ms; after counts the calls of mate
// that arrived after the first refusal.
type refuseKey struct {
	key, mate string
	status    int
	body      []byte

	mu      sync.Mutex
	refused bool
	after   int
}

func (h *refuseKey) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get("x-api-key")
	h.mu.Lock()
	if k == h.key {
		h.refused = true
	} else if k == h.mate && h.refused {
		h.after++
	}
	h.mu.Unlock()
	if k == h.key {
		w.WriteHeader(h.status)
		w.Write(h.body)
		return
	}
	var p struct {
		Model string `json:"model"`
	}
	json.NewDecoder(r.Body).Decode(&p)
	time.Sleep(100 * time.Millisecond)
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"` + p.Model + `","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
}

// TestRefusalScope: one key of an organization is refused for good. A
// workspace's usage limit kills that key only — its organization's other
// key may be in another workspace, and serves on; the organization's
// billing kills both of its keys at once, and the other organization
// answers everything. Nothing is lost either way (keys.ApplyRefusal).
func TestRefusalScope(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		body      []byte
		siblingOK bool // the refused key's org-mate lives and answers
	}{
		{"workspace limit", 400, api.NewErrorBody(api.ErrInvalidRequest, "req_w",
			"You have reached your specified workspace API usage limits. You will regain access on 2026-06-01 at 00:00 UTC.").Marshal(), true},
		{"billing", 402, api.NewErrorBody(api.ErrBilling, "req_b", "Your organization has a billing problem.").Marshal(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// high_prio's and batch's values in pipeDispatcher.
				h := &refuseKey{key: "sk-ant-test-fake-key-0000000001", mate: "sk-ant-test-fake-key-0000000002", status: tc.status, body: tc.body}
				d, _, pool := pipeDispatcher(t, h, dispatch.Config{},
					map[string]string{"high_prio": "org-a", "batch": "org-a", "low_prio": "org-b"})
				var mu sync.Mutex
				byKey := map[string]int{}
				var wg sync.WaitGroup
				for _, r := range requests(60, "claude-sonnet-4-5") {
					wg.Add(1)
					if err := d.Submit(t.Context(), r, func(res dispatch.Result) {
						defer wg.Done()
						mu.Lock()
						defer mu.Unlock()
						if res.Class != api.ClassOK {
							t.Errorf("%s: class %s status %d err %v", res.Request.ID, res.Class, res.Status, res.Err)
						}
						byKey[res.Key]++
					}); err != nil {
						t.Fatal(err)
					}
				}
				wg.Wait()
				hp, _ := pool.ByLabel("high_prio")
				mate, _ := pool.ByLabel("batch")
				if dead, _ := hp.Dead(); !dead {
					t.Error("the refused key lives")
				}
				if dead, why := mate.Dead(); dead == tc.siblingOK {
					t.Errorf("the refused key's org-mate: dead %v (%s), want dead %v", dead, why, !tc.siblingOK)
				}
				if byKey["high_prio"] != 0 || byKey["low_prio"] == 0 {
					t.Errorf("answers by key %v", byKey)
				}
				h.mu.Lock()
				after := h.after
				h.mu.Unlock()
				if (after > 0) != tc.siblingOK {
					t.Errorf("%d calls with the org-mate after the refusal; want some: %v", after, tc.siblingOK)
				}
			})
		})
	}
}
