package client

import (
	"net/http"
	"testing"
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
