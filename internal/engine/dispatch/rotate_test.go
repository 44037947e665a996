package dispatch_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
	"github.com/sluice-dev/sluice/keys"
)

func slowOK() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("anthropic-organization-id", "org-a")
		if strings.HasSuffix(r.URL.Path, "count_tokens") {
			time.Sleep(2 * time.Second)
			w.Write([]byte(`{"input_tokens":3}`))
			return
		}
		var p struct {
			Model string `json:"model"`
		}
		json.NewDecoder(r.Body).Decode(&p)
		time.Sleep(time.Second)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"` + p.Model + `","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`))
	})
}

// TestUnservablePoolWaitsForMoreWork: one model pool is dead for the only
// org's keys and a request for it is queued while nothing flies. The
// dispatcher is still accepting work: a later request for a live pool must
// run (it once stopped at once with ErrNoLiveKey).
func TestUnservablePoolWaitsForMoreWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _, pool := pipeDispatcher(t, slowOK(), dispatch.Config{}, map[string]string{"high_prio": "org-a"})
		for _, k := range pool.Keys() {
			k.MarkDeadFor(api.PoolOf("claude-opus-4-1"), "test")
		}
		op := requests(1, "claude-opus-4-1")[0]
		op.ID = "opus"
		if err := d.Submit(t.Context(), op, func(dispatch.Result) {}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the loop holds the unservable request
		son := requests(1, "claude-sonnet-4-5")[0]
		son.ID = "sonnet"
		res := d.Do(t.Context(), son)
		if res.Class != api.ClassOK {
			t.Errorf("sonnet request for a live pool: class %q err %v (dispatcher err %v)", res.Class, res.Err, d.Err())
		}
	})
}

// TestRotationReplacesTheOnlyKey: a rotation that replaces the only key
// (the common case) must leave no moment without a usable key: the new key
// is probed and joins before the old one retires (retiring first, the
// dispatcher stopped with ErrNoLiveKey in the probe window).
func TestRotationReplacesTheOnlyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, c, pool := pipeDispatcher(t, slowOK(), dispatch.Config{}, map[string]string{"high_prio": "org-a"})
		next, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvBatch: "sk-ant-test-fake-key-9999999999"}), NoDotEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		added, removed := pool.Diff(next)
		done := make(chan dispatch.Result, 10)
		for _, r := range requests(3, "claude-sonnet-4-5") {
			d.Submit(t.Context(), r, func(res dispatch.Result) { done <- res })
		}
		synctest.Wait() // every goroutine waits: the attempts are in flight
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		rotated := make(chan error, 1)
		go func() {
			_, err := dispatch.NewRotator(c, pool.Keys(), "claude-sonnet-4-5", log).Apply(t.Context(), keys.Rotation{Added: added, Removed: removed}, d)
			rotated <- err
		}()
		synctest.Wait() // the new key's probe is in flight
		for _, r := range requests(3, "claude-sonnet-4-5") {
			r.ID = "late-" + r.ID
			d.Submit(t.Context(), r, func(res dispatch.Result) { done <- res })
		}
		for range 6 {
			res := <-done
			if res.Class != api.ClassOK {
				t.Errorf("%s: class %q err %v; dispatcher err %v", res.Request.ID, res.Class, res.Err, d.Err())
			}
		}
		if err := <-rotated; err != nil {
			t.Fatal(err)
		}
		if !removed[0].Retired() {
			t.Fatal("the replaced key is not retired")
		}
		// From now on the new key serves.
		res := d.Do(t.Context(), requests(1, "claude-sonnet-4-5")[0])
		if res.Class != api.ClassOK || res.Key != added[0].Label() {
			t.Errorf("after the rotation: class %q key %q, want ok from %q", res.Class, res.Key, added[0].Label())
		}
	})
}

// refusingBad answers as slowOK does, but refuses (401) every key whose
// value holds "bad": a mistyped key.
func refusingBad() http.Handler {
	ok := slowOK()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("x-api-key"), "bad") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(401)
			w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
			return
		}
		ok.ServeHTTP(w, r)
	})
}

// TestRotationNeverLeavesAnOrgKeyless: an org's only key replaced by a
// bad one mid-run — nothing fails, an error names the kept key, and the
// old key keeps serving; once a good key of the org arrives (the next
// rotation), the old one retires and the new one serves.
func TestRotationNeverLeavesAnOrgKeyless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, c, pool := pipeDispatcher(t, refusingBad(), dispatch.Config{}, map[string]string{"high_prio": "org-a"})
		load := func(value string) *keys.Pool {
			p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvBatch: value}), NoDotEnv: true})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		var logs logbuf.Buffer
		rot := dispatch.NewRotator(c, pool.Keys(), "claude-sonnet-4-5", slog.New(slog.NewTextHandler(&logs, nil)))
		old := pool.Keys()[0]

		bad := load("sk-ant-test-bad-key-0000000001")
		added, removed := pool.Diff(bad)
		done := make(chan dispatch.Result, 10)
		for _, r := range requests(3, "claude-sonnet-4-5") {
			d.Submit(t.Context(), r, func(res dispatch.Result) { done <- res })
		}
		if _, err := rot.Apply(t.Context(), keys.Rotation{Added: added, Removed: removed}, d); err != nil {
			t.Fatal(err)
		}
		if dead, _ := added[0].Dead(); !dead {
			t.Fatal("the bad key was not found dead")
		}
		if old.Retired() {
			t.Fatal("the org's only working key was retired for a bad replacement")
		}
		if s := logs.String(); !strings.Contains(s, "level=ERROR") || !strings.Contains(s, "key="+old.String()) {
			t.Errorf("no error naming the kept key %s:\n%s", old, s)
		}
		for _, r := range requests(3, "claude-sonnet-4-5") {
			r.ID = "later-" + r.ID
			d.Submit(t.Context(), r, func(res dispatch.Result) { done <- res })
		}
		for range 6 {
			if res := <-done; res.Class != api.ClassOK || res.Key != old.Label() {
				t.Errorf("%s: class %q key %q err %v; want ok from the kept key %s (dispatcher err %v)", res.Request.ID, res.Class, res.Key, res.Err, old.Label(), d.Err())
			}
		}

		// The file is fixed: a good key of the same org replaces the bad one.
		cur := pool.Rotated(added, removed)
		good := load("sk-ant-test-fake-key-0000000077")
		added, removed = cur.Diff(good)
		if _, err := rot.Apply(t.Context(), keys.Rotation{Added: added, Removed: removed}, d); err != nil {
			t.Fatal(err)
		}
		if !old.Retired() {
			t.Fatal("the old key did not leave once a working key of its org arrived")
		}
		res := d.Do(t.Context(), requests(1, "claude-sonnet-4-5")[0])
		if res.Class != api.ClassOK || res.Key != added[0].Label() {
			t.Errorf("after the good key joined: class %q key %q, want ok from %q", res.Class, res.Key, added[0].Label())
		}
	})
}
