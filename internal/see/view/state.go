package view

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/see/watch"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
)

// State is what a process serving a view leaves for `sluice status`:
// beside its results (StatePath) and in the user's state directory
// (RunningDir), both mode 0600 (the URL holds the token) and removed at
// exit. A file whose process is gone is stale.
type State struct {
	PID     int       `json:"pid"`
	Cmd     string    `json:"cmd"`
	Results string    `json:"results,omitempty"` // absolute path ("" for the proxy)
	URL     string    `json:"url"`               // the page, with its token
	Base    string    `json:"base"`              // http://host:port
	Token   string    `json:"token"`
	Started time.Time `json:"started"`
}

// StatePath is the state file of the run writing results.
func StatePath(results string) string { return results + ".ui.json" }

// RunningDir is where every serving process registers:
// $XDG_STATE_HOME/sluice/running, else ~/.local/state/sluice/running.
func RunningDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sluice", "running")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "sluice", "running")
	}
	return ""
}

// Publish writes st beside the results (if any) and in RunningDir, and
// returns the function that removes them. The file beside the results is
// left alone while it names another live process (a second run refused
// the results lock must not take the first's place), and remove deletes
// only files that still name st.PID.
func Publish(st State) (remove func(), err error) {
	var paths []string
	if st.Results != "" {
		p := StatePath(st.Results)
		if old, err := ReadState(p); err != nil || old.PID == st.PID || !Alive(old.PID) {
			paths = append(paths, p)
		}
	}
	if d := RunningDir(); d != "" {
		if err := os.MkdirAll(d, 0o700); err == nil {
			paths = append(paths, filepath.Join(d, strconv.Itoa(st.PID)+".json"))
		}
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	var written []string
	removeOwn := func() {
		for _, p := range written {
			if cur, err := ReadState(p); err == nil && cur.PID == st.PID {
				os.Remove(p)
			}
		}
	}
	for _, p := range paths {
		if err := atomicfile.Write(p, 0o600, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
			removeOwn()
			return func() {}, fmt.Errorf("view: %w", err)
		}
		written = append(written, p)
	}
	return removeOwn, nil
}

// ReadState reads a state file.
func ReadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// Running lists the states in RunningDir, oldest first (stale ones too:
// FetchStatus tells).
func Running() []State {
	d := RunningDir()
	if d == "" {
		return nil
	}
	ms, _ := filepath.Glob(filepath.Join(d, "*.json"))
	var out []State
	for _, m := range ms {
		if st, err := ReadState(m); err == nil {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// ErrNotRunning: the process a state file names does not answer.
var ErrNotRunning = errors.New("not running")

// FetchStatus asks the process st names for its status.
func FetchStatus(st State) (watch.Status, error) {
	var s watch.Status
	req, err := http.NewRequest("GET", st.Base+"/api/status", nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("Authorization", "Bearer "+st.Token)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return s, fmt.Errorf("%w (pid %d, %s)", ErrNotRunning, st.PID, st.Base)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return s, fmt.Errorf("%s/api/status: HTTP %d", st.Base, resp.StatusCode)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
