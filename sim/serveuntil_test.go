package sim

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// ServeUntil answers until its context ends, then stops cleanly: nil, and
// the listener refuses what comes after.
func TestServeUntilStopsWithItsContext(t *testing.T) {
	srv, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeUntil(ctx, ln, time.Second) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/_sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeUntil after its context ended: %v, want nil", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/_sim/stats"); err == nil {
		t.Error("the simulator still answers after ServeUntil returned")
	}
}
