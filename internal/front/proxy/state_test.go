package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/front/proxy"
)

// another starts a second proxy over e's dispatcher and keys on dir, as
// a second process would, with cfg changed by opt.
func (e *env) another(dir string, opt func(*proxy.Config)) (*proxy.Proxy, error) {
	cfg := proxy.Config{Dispatcher: e.d, Client: client.New(client.Config{BaseURL: e.base}), Pool: e.pool, StateDir: dir}
	if opt != nil {
		opt(&cfg)
	}
	return proxy.New(cfg)
}

// TestOneProxyPerStateDir: while one proxy serves on a state dir, a second
// is refused at once, with the holder named; while the holder drains, a
// second waits for it (bounded) and starts once it is closed; past the
// wait it is refused too.
func TestOneProxyPerStateDir(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	waited := false
	_, err := e.another(dir, func(c *proxy.Config) {
		c.LockWait = 10 * time.Second // a serving holder is never waited for
		c.OnLockWait = func(string) { waited = true }
	})
	if !errors.Is(err, proxy.ErrStateInUse) || !strings.Contains(err.Error(), "serving") || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("a second proxy on a served state dir: %v, want ErrStateInUse naming the serving holder", err)
	}
	if waited {
		t.Error("a second proxy waited for a holder that serves")
	}

	e.px.Drain()
	if _, err := e.another(dir, nil); !errors.Is(err, proxy.ErrStateInUse) || !strings.Contains(err.Error(), "still draining") {
		t.Fatalf("no wait for a draining holder: %v, want ErrStateInUse saying it still drains", err)
	}
	var holder string
	px, err := e.another(dir, func(c *proxy.Config) {
		c.LockWait = 10 * time.Second
		// The predecessor finishes its drain once the successor waits.
		c.OnLockWait = func(h string) { holder = h; e.close() }
	})
	if err != nil {
		t.Fatalf("a restart during the drain: %v", err)
	}
	defer px.Close()
	if !strings.Contains(holder, "draining since") {
		t.Errorf("the successor was told %q, want the holder's draining line", holder)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "lock"))
	if !strings.Contains(string(raw), "serving since") {
		t.Errorf("the lock file says %q once the successor holds it", raw)
	}
}

// TestStateTokenIsPrivateAndKept: the token is made once, 0600, and read
// back the same; a token file others can read, or an empty one, is
// refused with a message that says what to do.
func TestStateTokenIsPrivateAndKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	tok, err := proxy.StateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "token"))
	if err != nil || fi.Mode().Perm() != 0o600 || len(tok) < 32 {
		t.Fatalf("token file %v (%v), token of %d characters: want 0600 and a long token", fi.Mode(), err, len(tok))
	}
	again, err := proxy.StateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("read again: %v, same token %v", err, again == tok)
	}
	if other, _ := proxy.StateToken(t.TempDir()); other == tok {
		t.Fatal("two state dirs got the same token")
	}
	os.Chmod(filepath.Join(dir, "token"), 0o644)
	if _, err := proxy.StateToken(dir); err == nil || !strings.Contains(err.Error(), "other users") || strings.Contains(err.Error(), tok) {
		t.Fatalf("a token file others can read: %v, want a refusal that does not show the token", err)
	}
	os.WriteFile(filepath.Join(dir, "token"), nil, 0o600)
	os.Chmod(filepath.Join(dir, "token"), 0o600)
	if _, err := proxy.StateToken(dir); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Fatalf("an empty token file: %v", err)
	}
	if _, err := proxy.StateToken(""); err == nil {
		t.Fatal("a token without a state dir")
	}
}

// TestMetricsAndHealthNeedTheToken: with a token, /metrics and /healthz
// answer 401 without it, unless MetricsPublic; any other path too.
func TestMetricsAndHealthNeedTheToken(t *testing.T) {
	const token = "proxy-token-for-the-metrics-test"
	guarded := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token }})
	public := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.Token = token; c.MetricsPublic = true }})
	for _, path := range []string{"/metrics", "/healthz", "/nowhere"} {
		if resp, b := guarded.do("GET", path, nil, "x-api-key", "not-the-token"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d %s, want 401", path, resp.StatusCode, b)
		}
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		if resp, b := guarded.do("GET", path, nil, "x-api-key", token); resp.StatusCode != 200 {
			t.Errorf("%s with the token: %d %s", path, resp.StatusCode, b)
		}
		if resp, b := public.do("GET", path, nil, "x-api-key", ""); resp.StatusCode != 200 {
			t.Errorf("%s with --metrics-public, no token: %d %s", path, resp.StatusCode, b)
		}
	}
	if resp, _ := public.do("POST", "/v1/messages", message("hi"), "x-api-key", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("--metrics-public opened /v1/messages: %d", resp.StatusCode)
	}
}

// TestEndedBatchLeavesMemory: an ended batch keeps neither its rows' state
// nor its custom_ids in memory; once archived it is not held at all, yet
// it is still retrieved and listed (from its meta file), before and after
// a restart.
func TestEndedBatchLeavesMemory(t *testing.T) {
	dir := t.TempDir()
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
	old := e.createBatch(30, "old")
	e.pollBatch(old.ID)
	if live, rows, ids := proxy.BatchMemory(e.px, old.ID); !live || rows || ids != 0 {
		t.Errorf("an ended batch holds: live %v, rows' state %v, %d custom_ids; want only its summary", live, rows, ids)
	}
	clk.add(24 * time.Hour)
	young := e.createBatch(2, "young")
	e.pollBatch(young.ID)
	clk.add(api.ResultsRetention - time.Hour) // old is due, young is not
	listed := func(e *env) []string {
		_, b := e.do("GET", "/v1/messages/batches?limit=10", nil)
		var page api.Page[api.MessageBatch]
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("list: %s", b)
		}
		var out []string
		for _, m := range page.Data {
			out = append(out, m.ID)
			if m.ID == old.ID && (m.ArchivedAt == nil || m.RequestCounts.Succeeded != 30) {
				t.Errorf("the archived batch listed as %+v", m)
			}
		}
		return out
	}
	for _, ex := range []*env{e, nil} {
		if ex == nil { // again after a restart
			e.close()
			ex = newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir; c.Now = clk.now }})
		}
		if got := listed(ex); len(got) != 2 || got[0] != young.ID || got[1] != old.ID {
			t.Errorf("list %v, want [%s %s] (newest first)", got, young.ID, old.ID)
		}
		if live, _, _ := proxy.BatchMemory(ex.px, old.ID); live {
			t.Error("an archived batch is held in memory")
		}
		resp, b := ex.do("GET", "/v1/messages/batches/"+old.ID, nil)
		var m api.MessageBatch
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.ArchivedAt == nil || m.RequestCounts.Succeeded != 30 || m.ProcessingStatus != api.BatchEnded {
			t.Errorf("retrieve an archived batch: %d %s", resp.StatusCode, b)
		}
		if resp, _ := ex.do("GET", "/v1/messages/batches/"+old.ID+"/results", nil); resp.StatusCode != 404 {
			t.Errorf("results of an archived batch: %d, want 404", resp.StatusCode)
		}
		e = ex
	}
	if resp, b := e.do("DELETE", "/v1/messages/batches/"+old.ID, nil); resp.StatusCode != 200 {
		t.Errorf("delete an archived batch: %d %s", resp.StatusCode, b)
	}
	if got := listed(e); len(got) != 1 || got[0] != young.ID {
		t.Errorf("list after the delete: %v", got)
	}
	if resp, _ := e.do("GET", "/v1/messages/batches/"+old.ID, nil); resp.StatusCode != 404 {
		t.Errorf("retrieve a deleted archived batch: %d, want 404", resp.StatusCode)
	}
}

// TestUnreadableMetaIsSetAside: a meta file that does not parse is renamed
// aside with a warning; the proxy starts and serves the other batches.
func TestUnreadableMetaIsSetAside(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	good := e.createBatch(3, "good")
	e.pollBatch(good.ID)
	e.close()
	bad := filepath.Join(dir, "msgbatch_sluice000000000000000000000bad.json")
	if err := os.WriteFile(bad, []byte(`{"id":"msgbatch_sluice0000`), 0o600); err != nil { // torn
		t.Fatal(err)
	}
	e2 := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
	if _, err := os.Stat(bad + ".unreadable"); err != nil {
		t.Errorf("the unreadable meta was not set aside: %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("the unreadable meta is still in place: %v", err)
	}
	if logs := e2.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "msgbatch_sluice000000000000000000000bad") {
		t.Errorf("no warning naming the batch:\n%s", logs)
	}
	if resp, b := e2.do("GET", "/v1/messages/batches/"+good.ID+"/results", nil); resp.StatusCode != 200 || bytes.Count(b, []byte("\n")) != 3 {
		t.Errorf("the good batch after the restart: %d %s", resp.StatusCode, b)
	}
}

// TestLockStateBeforeNew: a lock taken with LockState is refused to a
// second taker while its holder starts (naming it, and its address once
// set) and handed to New, which serves under it; a lock of another dir is
// refused by New; a wait for a draining holder ends with its context.
func TestLockStateBeforeNew(t *testing.T) {
	dir := t.TempDir()
	lock, err := proxy.LockState(t.Context(), dir, 10*time.Second, func(string) { t.Error("waited for a free state dir") })
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.SetAddr("http://127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	_, err = proxy.LockState(t.Context(), dir, 10*time.Second, nil)
	if !errors.Is(err, proxy.ErrStateInUse) || !strings.Contains(err.Error(), "starting http://127.0.0.1:9 since") {
		t.Fatalf("a second taker while the first starts: %v, want ErrStateInUse naming the holder and its address", err)
	}
	e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio})
	if _, err := e.another(t.TempDir(), func(c *proxy.Config) { c.Lock = lock }); err == nil || !strings.Contains(err.Error(), "Config.Lock") {
		t.Fatalf("New with the lock of another dir: %v", err)
	}
	px, err := e.another(dir, func(c *proxy.Config) { c.Lock = lock })
	if err != nil {
		t.Fatalf("New with the lock taken: %v", err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "lock"))
	if !strings.Contains(string(raw), "serving http://127.0.0.1:9 since") {
		t.Errorf("the lock file says %q once New serves", raw)
	}
	px.Drain()
	ctx, cancel := context.WithCancel(t.Context())
	_, err = proxy.LockState(ctx, dir, time.Minute, func(holder string) {
		if !strings.Contains(holder, "draining http://127.0.0.1:9") {
			t.Errorf("waiting for %q", holder)
		}
		cancel() // Ctrl-C while it waits
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a wait for a draining holder, interrupted: %v, want context.Canceled", err)
	}
	px.Close()
	again, err := proxy.LockState(t.Context(), dir, 0, nil)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	again.Release()
}

// TestBadBatchFilesDoNotStopTheStart: a meta file that parses but does not
// hold what its batch needs (a custom_id per row) is set aside like one
// that does not parse; a batch whose files cannot be opened is left in
// place, not served, with a warning. Either way the proxy starts and
// serves the other batches.
func TestBadBatchFilesDoNotStopTheStart(t *testing.T) {
	const times = `"created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-02T00:00:00Z"`
	for _, tc := range []struct {
		name, meta string
		results    bool // the results file is a directory: it cannot be opened
		metaDir    bool // the meta "file" is a directory
		aside      bool // the meta is set aside (.unreadable), else left in place
	}{
		{name: "no custom_ids for its rows", meta: `{"id":"%s","n":3}`, aside: true},
		{name: "fewer custom_ids than rows", meta: `{"id":"%s",` + times + `,"n":3,"custom_ids":["a","b"]}`, aside: true},
		{name: "more custom_ids than rows", meta: `{"id":"%s",` + times + `,"n":1,"custom_ids":["a","b"]}`, aside: true},
		{name: "ended, not ordered, no custom_ids", meta: `{"id":"%s",` + times + `,"ended_at":"2026-01-01T01:00:00Z","n":2}`, aside: true},
		{name: "a negative count", meta: `{"id":"%s",` + times + `,"ended_at":"2026-01-01T01:00:00Z","results_ordered":true,"n":-1}`, aside: true},
		{name: "its results file cannot be opened", meta: `{"id":"%s",` + times + `,"n":2,"custom_ids":["a","b"]}`, results: true},
		{name: "its meta is a directory", metaDir: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
			good := e.createBatch(2, "good")
			e.pollBatch(good.ID)
			e.close()
			const id = "msgbatch_sluice0000000000000000000000bad"
			meta := filepath.Join(dir, id+".json")
			if tc.metaDir {
				if err := os.Mkdir(meta, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(meta, []byte(strings.ReplaceAll(tc.meta, "%s", id)), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.results {
				if err := os.Mkdir(filepath.Join(dir, id+".results.jsonl"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			e2 := newEnv(t, options{upstream: fastFake(), keysEnv: onlyHighPrio, proxy: func(c *proxy.Config) { c.StateDir = dir }})
			if logs := e2.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, id) {
				t.Errorf("no warning naming the batch:\n%s", logs)
			}
			_, err := os.Stat(meta + ".unreadable")
			if aside := err == nil; aside != tc.aside {
				t.Errorf("meta set aside: %v, want %v", aside, tc.aside)
			}
			if _, err := os.Stat(meta); (err == nil) == tc.aside {
				t.Errorf("meta still in place: %v, want %v", err == nil, !tc.aside)
			}
			if resp, b := e2.do("GET", "/v1/messages/batches/"+id, nil); resp.StatusCode != 404 {
				t.Errorf("the bad batch: %d %s, want 404 (not served)", resp.StatusCode, b)
			}
			if resp, b := e2.do("GET", "/v1/messages/batches/"+good.ID+"/results", nil); resp.StatusCode != 200 || bytes.Count(b, []byte("\n")) != 2 {
				t.Errorf("the good batch after the restart: %d %s", resp.StatusCode, b)
			}
		})
	}
}
