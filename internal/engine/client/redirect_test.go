package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

const redirectSecret = "sk-ant-test-redirect-secret-0001"

// TestRedirectIsNeverFollowed: net/http keeps x-api-key on a cross-host
// redirect, so the client must not follow one. A 307 to another host is the
// answer, classified as final, with an error that names the target and
// never the key; the other host receives nothing.
func TestRedirectIsNeverFollowed(t *testing.T) {
	var stolen atomic.Int32
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Add(1)
		w.WriteHeader(200)
	}))
	t.Cleanup(thief.Close)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, thief.URL+r.URL.Path+"?token=abc", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(api.Close)
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: redirectSecret}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: api.URL})
	for _, path := range []string{"/v1/messages", "/v1/messages/batches"} {
		o := c.Do(context.Background(), p.Keys()[0], "POST", path, []byte(`{}`))
		if o.Class != client.Invalid || o.Status != http.StatusTemporaryRedirect {
			t.Errorf("%s: class %v status %d, want a final 307", path, o.Class, o.Status)
		}
		msg := o.Err.Error()
		if !strings.Contains(msg, "redirect") || !strings.Contains(msg, thief.URL) || strings.Contains(msg, "token=abc") || strings.Contains(msg, redirectSecret) {
			t.Errorf("%s: error %q: want the redirect and its target without query or key", path, msg)
		}
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("the redirect target received %d requests", n)
	}
}
