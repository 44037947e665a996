package dispatch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/dispatch"
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
