package dispatch_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// forbidOpus refuses keyBad (403 permission_error) on Opus models and
// answers everything else after a second.
func forbidOpus(keyBad string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&p)
		if r.Header.Get("x-api-key") == keyBad && strings.Contains(p.Model, "opus") {
			w.WriteHeader(403)
			w.Write(api.NewErrorBody(api.ErrPermission, "req_f", "Your API key does not have permission to use the specified resource.").Marshal())
			return
		}
		time.Sleep(time.Second)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"` + p.Model + `","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
	})
}

// TestForbiddenModelSparesOtherModels runs in fake time: one of an org's two
// keys is refused Opus for good. Its Opus requests move to the other key, it
// dies for Opus only once the refusals have lasted, and it keeps serving
// Sonnet throughout.
func TestForbiddenModelSparesOtherModels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bad = "sk-ant-test-fake-key-0000000001" // high_prio's value in pipeDispatcher
		d, _, pool := pipeDispatcher(t, forbidOpus(bad), dispatch.Config{},
			map[string]string{"high_prio": "org-a", "batch": "org-a"})
		var mu sync.Mutex
		byKey := map[string]map[string]int{} // model → key label → answers
		var wg sync.WaitGroup
		submit := func(model string, n int) {
			for _, r := range requests(n, model) {
				wg.Add(1)
				r.ID = model + "/" + r.ID
				if err := d.Submit(t.Context(), r, func(res dispatch.Result) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if res.Class != api.ClassOK {
						t.Errorf("%s: class %s status %d err %v", res.Request.ID, res.Class, res.Status, res.Err)
					}
					if byKey[model] == nil {
						byKey[model] = map[string]int{}
					}
					byKey[model][res.Key]++
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Two minutes of steady work on both models, so the refusals last.
		for range 120 {
			submit("claude-opus-4-1", 5)
			submit("claude-sonnet-4-5", 5)
			time.Sleep(time.Second)
		}
		wg.Wait()
		k, _ := pool.ByLabel("high_prio")
		if dead, _ := k.DeadFor(api.PoolOpus4); !dead {
			t.Error("the key refused Opus for two minutes is not dead for Opus")
		}
		if dead, why := k.Dead(); dead {
			t.Fatalf("a 403 on Opus killed the whole key: %s", why)
		}
		if n := byKey["claude-opus-4-1"]["high_prio"]; n != 0 {
			t.Errorf("%d Opus answers credited to the refused key", n)
		}
		if n := byKey["claude-sonnet-4-5"]["high_prio"]; n < 200 {
			t.Errorf("the key refused Opus served only %d of 600 Sonnet requests (want about half)", n)
		}
		if dead, _ := k.DeadFor(api.PoolSonnet4); dead {
			t.Error("dead for Sonnet")
		}
	})
}
