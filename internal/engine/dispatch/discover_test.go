package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/pipenet"
	"github.com/sluice-dev/sluice/keys"
)

// TestDiscoverStopsOnARedirect: a base URL that redirects (http to https,
// a moved gateway) is not the API's. The run stops at the key probe with
// an error that says so, instead of sending every request into a redirect
// the client will not follow.
func TestDiscoverStopsOnARedirect(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example"+r.URL.Path, http.StatusMovedPermanently)
	}))
	t.Cleanup(ts.Close)
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: "sk-ant-test-fake-key-0000000001"}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dispatch.Discover(context.Background(), client.New(client.Config{BaseURL: ts.URL}), p.Keys(), "claude-sonnet-4-5")
	if err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), "elsewhere.example") {
		t.Fatalf("Discover: %v, want an error naming the redirect", err)
	}
	if dead, _ := p.Keys()[0].Dead(); dead {
		t.Error("a redirect killed the key")
	}
}

// TestDiscoverReprobesARefusal runs in fake time: a key refused once at
// start (an auth blip) is re-probed and kept; a key refused twice is dead; a
// key refused the probed model (403) twice is dead for that model's pool
// only.
func TestDiscoverReprobesARefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const blip, revoked, forbidden = "sk-ant-test-fake-key-0000000001", "sk-ant-test-fake-key-0000000002", "sk-ant-test-fake-key-0000000003"
		var mu sync.Mutex
		calls := map[string]int{}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := r.Header.Get("x-api-key")
			mu.Lock()
			calls[k]++
			n := calls[k]
			mu.Unlock()
			w.Header().Set("anthropic-organization-id", "org-"+k[len(k)-1:])
			switch {
			case k == revoked || (k == blip && n == 1):
				w.WriteHeader(401)
				w.Write(api.NewErrorBody(api.ErrAuthentication, "req_a", "invalid x-api-key").Marshal())
			case k == forbidden:
				w.WriteHeader(403)
				w.Write(api.NewErrorBody(api.ErrPermission, "req_p", "no permission").Marshal())
			default:
				w.Write([]byte(`{"input_tokens":3}`))
			}
		})
		ln := pipenet.Listen()
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		c := client.New(client.Config{BaseURL: "http://fake", Dial: ln.DialContext})
		defer c.CloseIdle()
		p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{
			keys.EnvAPIKey: blip, keys.EnvBatch: revoked, keys.EnvLowPrio: forbidden}), NoDotEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := dispatch.Discover(t.Context(), c, p.Keys(), "claude-sonnet-4-5"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != keys.DefaultHealth.ProbeAfter {
			t.Errorf("Discover took %v, want one re-probe delay (%v)", took, keys.DefaultHealth.ProbeAfter)
		}
		get := func(label string) *keys.Key { k, _ := p.ByLabel(label); return k }
		if dead, why := get("high_prio").Dead(); dead || get("high_prio").Org() != "org-1" {
			t.Errorf("the key refused once is dead (%s) or has no org (%q)", why, get("high_prio").Org())
		}
		if dead, _ := get("batch").Dead(); !dead {
			t.Error("the key refused twice is live")
		}
		k := get("low_prio")
		if dead, _ := k.DeadFor(api.PoolSonnet4); !dead {
			t.Error("the key refused Sonnet twice may still serve Sonnet")
		}
		if dead, _ := k.Dead(); dead || k.Org() != "org-3" {
			t.Errorf("the key refused one model is dead for all (%v) or has no org (%q)", dead, k.Org())
		}
		if calls[blip] != 2 || calls[revoked] != 2 || calls[forbidden] != 2 {
			t.Errorf("probes per key %v, want two each", calls)
		}
	})
}

// TestDiscoverRefusesAMistypedWorkspace runs in fake time: a key whose
// workspace the API refuses (a 403 naming the workspace, twice) is dead
// and Discover fails naming its label and workspace, never its value,
// though another key is live; a 403 that names no workspace still only
// refuses the model's pool.
func TestDiscoverRefusesAMistypedWorkspace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const typo, fine, model = "sk-ant-test-fake-key-0000000001", "sk-ant-test-fake-key-0000000002", "sk-ant-test-fake-key-0000000003"
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := r.Header.Get("x-api-key")
			w.Header().Set("anthropic-organization-id", "org-1")
			switch {
			case r.Header.Get("anthropic-workspace-id") == "wrkspc_reserch":
				w.WriteHeader(403)
				w.Write(api.NewErrorBody(api.ErrPermission, "req_w", "anthropic-workspace-id: workspace wrkspc_reserch not found in this organization").Marshal())
			case k == model:
				w.WriteHeader(403)
				w.Write(api.NewErrorBody(api.ErrPermission, "req_p", "no permission").Marshal())
			default:
				w.Header().Set("anthropic-workspace-id", "wrkspc_default")
				w.Write([]byte(`{"input_tokens":3}`))
			}
		})
		ln := pipenet.Listen()
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		c := client.New(client.Config{BaseURL: "http://fake", Dial: ln.DialContext})
		defer c.CloseIdle()
		dir := t.TempDir()
		kf := dir + "/keys"
		if err := os.WriteFile(kf, []byte("team="+typo+" workspace=wrkspc_reserch\nsolo="+fine+"\nother="+model+" workspace=wrkspc_ok\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := keys.Load(keys.LoadOptions{KeysFile: kf, NoDotEnv: true, Env: keys.EnvMap(nil)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = dispatch.Discover(t.Context(), c, p.Keys(), "claude-sonnet-4-5")
		if !errors.Is(err, dispatch.ErrWorkspaceRefused) || !strings.Contains(err.Error(), "team(…0001)") ||
			!strings.Contains(err.Error(), "wrkspc_reserch") || strings.Contains(err.Error(), typo) || strings.Contains(err.Error(), "other") {
			t.Fatalf("Discover: %v; want ErrWorkspaceRefused naming team and wrkspc_reserch only, without the key", err)
		}
		get := func(label string) *keys.Key { k, _ := p.ByLabel(label); return k }
		if dead, _ := get("team").Dead(); !dead {
			t.Error("the key whose workspace is refused is live")
		}
		if dead, _ := get("other").Dead(); dead {
			t.Error("a 403 naming no workspace killed the key for every model")
		}
		if dead, _ := get("solo").Dead(); dead || get("solo").ChargedWorkspace() != "wrkspc_default" {
			t.Errorf("solo: dead %v, workspace %q (from the answer's header)", dead, get("solo").ChargedWorkspace())
		}
	})
}
