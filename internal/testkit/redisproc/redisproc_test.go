package redisproc

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"
)

// TestStartRefusesAnotherServer: a server that answers PING on the port
// (started there since the port was found free) is not taken for ours.
func TestStartRefusesAnotherServer(t *testing.T) {
	if _, ok := Binary(); !ok {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal("redis-server is not installed")
		}
		t.Skip("redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					switch {
					case bytes.Contains(buf[:n], []byte("PING")):
						c.Write([]byte("+PONG\r\n"))
					case bytes.Contains(buf[:n], []byte("CONFIG")):
						c.Write([]byte("*2\r\n$3\r\ndir\r\n$10\r\n/elsewhere\r\n"))
					}
				}
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s, err := Start(t.Context(), t.TempDir(), port)
	if err == nil {
		s.Stop()
		t.Fatal("Start took the server already on the port for its own")
	}
	if !strings.Contains(err.Error(), "another") {
		t.Fatalf("Start: %v", err)
	}
}

func TestStartChecksItsOwnServer(t *testing.T) {
	s := ForTest(t)
	if err := s.checkDir(); err != nil {
		t.Fatal(err)
	}
}
