package proxy

// The state dir's owner: one process at a time holds its lock, and the
// caller token the proxy keeps there. See docs/proxy.md, "On disk".

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/store/filelock"
)

// ErrStateInUse is returned (wrapped, with the holder's status line) by
// New when another process holds the state dir's lock: two proxies on one
// state dir would both send, and pay for, every unsent virtual batch row.
var ErrStateInUse = errors.New("proxy: another sluice proxy holds the state dir")

const (
	lockName  = "lock"
	tokenName = "token"
)

// StateLock is a state dir's lock, held for the proxy's life. Its file
// holds one status line for whoever finds it held: "pid N <state>
// [ADDR] since T", state starting, serving or draining, ADDR the
// proxy's address once known (SetAddr).
//
// New takes it, unless Config.Lock holds it already: `sluice proxy`
// takes it with LockState before anything else that the state dir's
// owner alone may do — binding its port, probing the keys (upstream
// calls), opening its cache — so a second proxy is refused before it
// spends anything, and an interrupt ends its wait for a draining one.
type StateLock struct {
	dir   string
	l     *filelock.Lock
	state string
	addr  string
}

// LockState takes the lock of the state dir dir (creating it, 0700),
// noting "starting". A holder that is draining (a restart racing its
// predecessor's drain) is waited for, up to wait, or until ctx ends (its
// error is returned); waiting, if set, is told once, with the holder's
// status line. A holder that serves or starts, or still drains after
// wait, gives ErrStateInUse. Pass the lock to New (Config.Lock), or
// Release it.
func LockState(ctx context.Context, dir string, wait time.Duration, waiting func(holder string)) (*StateLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("proxy: state dir: %w", err)
	}
	return lockState(ctx, dir, wait, waiting)
}

// lockState is LockState on a dir that exists.
func lockState(ctx context.Context, dir string, wait time.Duration, waiting func(holder string)) (*StateLock, error) {
	path := filepath.Join(dir, lockName)
	deadline := time.Now().Add(wait)
	said := false
	for {
		l, err := filelock.Try(path, 0o600)
		if err == nil {
			s := &StateLock{dir: dir, l: l}
			if err := s.note("starting"); err != nil {
				l.Release()
				return nil, fmt.Errorf("proxy: state dir lock: %w", err)
			}
			return s, nil
		}
		if !errors.Is(err, filelock.ErrLocked) {
			return nil, fmt.Errorf("proxy: state dir lock: %w", err)
		}
		holder := readHolder(path)
		if i := strings.IndexByte(holder, '\n'); i >= 0 {
			holder = holder[:i] // the first line: a rewrite may leave a tail for a moment
		}
		draining := strings.Contains(holder, " draining ")
		if !draining || !time.Now().Before(deadline) {
			what := "stop it first, or give this one another --state-dir"
			if draining {
				what = fmt.Sprintf("it is still draining after %s; wait for it to exit, or give this one another --state-dir", wait)
			}
			return nil, fmt.Errorf("%w %s (%s): %s", ErrStateInUse, dir, holder, what)
		}
		if !said && waiting != nil {
			waiting(holder)
		}
		said = true
		t := time.NewTimer(min(filelock.PollEvery, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// readHolder is the status line of the lock file at path, or a stand-in
// when it has none yet (its holder has just taken it).
func readHolder(path string) string {
	b, err := os.ReadFile(path)
	line := strings.TrimSpace(string(b))
	if err != nil || line == "" {
		return "pid unknown, starting"
	}
	return line
}

// SetAddr notes the address the proxy serves on (e.g.
// "http://127.0.0.1:8787") in the status line, for whoever finds the
// lock held.
func (s *StateLock) SetAddr(addr string) error {
	if s == nil {
		return nil
	}
	s.addr = addr
	return s.note(s.state)
}

// note rewrites the status line: "pid N <state> [ADDR] since <now>".
func (s *StateLock) note(state string) error {
	if s == nil || s.l == nil {
		return nil
	}
	s.state = state
	f := s.l.File()
	line := fmt.Sprintf("pid %d %s", os.Getpid(), state)
	if s.addr != "" {
		line += " " + s.addr
	}
	line += " since " + time.Now().UTC().Format(time.RFC3339) + "\n"
	// Written over the old line, then cut to length: a reader never finds
	// the file empty (it would take the holder for one just starting).
	if _, err := f.WriteAt([]byte(line), 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(line)))
}

// Release lets the lock go; calling it again does nothing. Once the lock
// is given to New, Proxy.Close releases it.
func (s *StateLock) Release() error {
	if s == nil {
		return nil
	}
	return s.l.Release()
}

// StateToken returns the caller token kept in the state dir dir (the file
// "token"), creating it — 24 random bytes, hex, mode 0600, synced — when
// there is none, so it is the same across restarts. A token file others
// may read is refused: its token may have been read. The token is a
// secret: callers print it only when asked (`sluice proxy token`).
func StateToken(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("proxy: no state dir to keep a token in")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("proxy: state dir: %w", err)
	}
	path := filepath.Join(dir, tokenName)
	for range 2 {
		tok, err := readToken(path)
		if !errors.Is(err, fs.ErrNotExist) {
			return tok, err
		}
		if err := createToken(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("proxy: creating the token file: %w", err)
		}
		// Created, or another process created it first: read it.
	}
	return readToken(path)
}

// readToken reads the token file at path, refusing one that is not
// private or holds no token.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("proxy: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("proxy: the token file %s can be read by other users (mode %04o): its token may be known; delete the file (a new token is made at the next start) or chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("proxy: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("proxy: the token file %s holds no token (at least 16 characters, one line): delete it and a new one is made", path)
	}
	return tok, nil
}

// createToken writes a new random token to path, failing with
// fs.ErrExist if the file exists. The token is written whole to a
// temporary file first and linked into place (link never replaces), so a
// reader never sees a file without its token.
func createToken(path string) error {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".token.tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString("sluice-" + hex.EncodeToString(raw[:]) + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
