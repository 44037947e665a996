package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/keys"
)

// TestWireChoice: attempts go over internal/h1 unless the caller asks for
// HTTP/2, gives its own transport, or the base URL is one h1 does not
// serve (user information, a query, another scheme).
func TestWireChoice(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		h1  bool
	}{
		{Config{BaseURL: "http://127.0.0.1:4080"}, true},
		{Config{BaseURL: "https://api.anthropic.com"}, true},
		{Config{}, true}, // the default base URL
		{Config{BaseURL: "http://127.0.0.1:4080/prefix/"}, true},
		{Config{BaseURL: "https://api.anthropic.com", HTTP2: true}, false},
		{Config{BaseURL: "http://127.0.0.1:4080", Transport: roundTripperFunc(nil)}, false},
		{Config{BaseURL: "http://user:pass@127.0.0.1:4080"}, false},
		{Config{BaseURL: "http://127.0.0.1:4080?x=1"}, false},
		{Config{BaseURL: "ftp://127.0.0.1"}, false},
	} {
		_, isH1 := New(tc.cfg).wire.(*h1Wire)
		if isH1 != tc.h1 {
			t.Errorf("%+v: over h1 %v, want %v", tc.cfg, isH1, tc.h1)
		}
	}
	if w := New(Config{BaseURL: "http://127.0.0.1:4080/prefix/"}).wire.(*h1Wire); w.prefix != "/prefix" {
		t.Errorf("the base URL's path is sent as %q before every target", w.prefix)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUnsendableRequestsAreInvalid: a request that cannot be written (a
// header value with a line break, a method that is not a token) is a
// final Invalid outcome sent nowhere, on either wire, and its error does
// not carry the header's value.
func TestUnsendableRequestsAreInvalid(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: "sk-ant-test-unsendable-0001"}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, http2 := range []bool{false, true} {
		c := New(Config{BaseURL: srv.URL, HTTP2: http2})
		o, _ := c.Send(context.Background(), p.Keys()[0], "POST", "/v1/messages", []byte(`{}`),
			http.Header{"Anthropic-Beta": {"secret-value\r\nX-Injected: 1"}}, false)
		if o.Class != Invalid || o.Sent || strings.Contains(o.Err.Error(), "secret-value") {
			t.Errorf("http2 %v: header injection: class %v, sent %v, err %v", http2, o.Class, o.Sent, o.Err)
		}
		if o := c.Do(context.Background(), p.Keys()[0], "PO ST", "/v1/messages", nil); o.Class != Invalid {
			t.Errorf("http2 %v: a method with a space: class %v, err %v", http2, o.Class, o.Err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("unsendable requests opened %d connections", n)
	}
}
