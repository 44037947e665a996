// Package redisproc runs a private redis-server for tests and benchmarks:
// on a free loopback port, in its own directory, with persistence off, so
// nothing touches a shared Redis's data.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvRequire names the variable that turns a missing redis-server from a
// skip into a failure (CI sets it).
const EnvRequire = "SLUICE_REQUIRE_REDIS"

// Server is a redis-server child process.
type Server struct {
	cmd  *exec.Cmd
	done chan struct{}
	Port int
	Dir  string
}

// Binary returns the path of redis-server, if installed.
func Binary() (string, bool) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/redis-server"); serr == nil {
			return "/usr/bin/redis-server", true
		}
		return "", false
	}
	return p, true
}

// FreePort returns a loopback TCP port nobody listens on (at the time).
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start runs redis-server on port (0: a free one) with dir as its working
// directory, and waits until it answers PING — and is ours: its CONFIG
// GET dir is dir (another server on the port, started since the port was
// found free, is an error, never taken for ours).
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	bin, ok := Binary()
	if !ok {
		return nil, errors.New("redisproc: redis-server is not installed")
	}
	if port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		port = p
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d // as redis-server reports it
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, done: make(chan struct{}), Port: port, Dir: dir}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.ping(); err == nil {
			if err := s.checkDir(); err != nil {
				s.Kill()
				return nil, err
			}
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("redisproc: redis-server exited at start (port %d taken?)", port)
		case <-ctx.Done():
			s.Kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, errors.New("redisproc: redis-server did not answer within 10 s")
		}
	}
}

func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("redisproc: PING answered %q", line)
	}
	return nil
}

// checkDir verifies that the server answering on the port is this one:
// its working directory is s.Dir.
func (s *Server) checkDir() error {
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$3\r\ndir\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	line := func() (string, error) {
		l, err := r.ReadString('\n')
		return strings.TrimSuffix(l, "\r\n"), err
	}
	bulk := func() (string, error) {
		h, err := line()
		if err != nil {
			return "", err
		}
		n, err := strconv.Atoi(strings.TrimPrefix(h, "$"))
		if !strings.HasPrefix(h, "$") || err != nil || n < 0 {
			return "", fmt.Errorf("unexpected %q", h)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	h, err := line()
	if err == nil && h != "*2" {
		err = fmt.Errorf("unexpected %q", h)
	}
	var dir string
	if err == nil {
		if _, err = bulk(); err == nil {
			dir, err = bulk()
		}
	}
	if err != nil {
		return fmt.Errorf("redisproc: another server answers on port %d (CONFIG GET dir: %v)", s.Port, err)
	}
	if dir != s.Dir {
		return fmt.Errorf("redisproc: another redis-server answers on port %d (its dir is not ours)", s.Port)
	}
	return nil
}

// Addr is 127.0.0.1:PORT.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the fleet URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Stop ends the server (SIGINT, then SIGKILL after 5 s) and waits.
func (s *Server) Stop() {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.Kill()
	}
}

// Kill ends the server at once and waits.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// ForTest starts a private redis-server for t, stopped when t ends. It
// skips t when redis-server is not installed, unless SLUICE_REQUIRE_REDIS=1.
func ForTest(t testing.TB) *Server {
	t.Helper()
	if _, ok := Binary(); !ok {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal("redis-server is not installed and " + EnvRequire + "=1")
		}
		t.Skip("redis-server is not installed (set " + EnvRequire + "=1 to fail instead)")
	}
	s, err := Start(t.Context(), t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
