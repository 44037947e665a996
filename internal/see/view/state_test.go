package view

import (
	"os"
	"path/filepath"
	"testing"
)

// A second process refused the results lock publishes and then removes
// its state: the first process's file beside the results survives both.
func TestPublishLeavesALiveOthersState(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	results := filepath.Join(t.TempDir(), "out.jsonl")
	first := State{PID: os.Getppid(), Cmd: "run", Results: results, Base: "http://127.0.0.1:1"} // alive: our parent
	if !Alive(first.PID) {
		t.Skip("this platform cannot tell a live process")
	}
	if _, err := Publish(first); err != nil {
		t.Fatal(err)
	}
	remove, err := Publish(State{PID: os.Getpid(), Cmd: "run", Results: results, Base: "http://127.0.0.1:2"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ReadState(StatePath(results)); err != nil || st.PID != first.PID {
		t.Fatalf("after the second publish the state names pid %d (%v), want the first's %d", st.PID, err, first.PID)
	}
	remove()
	if st, err := ReadState(StatePath(results)); err != nil || st.PID != first.PID {
		t.Fatalf("the second process's remove took the first's state: %+v %v", st, err)
	}
}

// A state left by a process that is gone is taken over, and removed by
// its new owner.
func TestPublishReplacesADeadProcesssState(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	results := filepath.Join(t.TempDir(), "out.jsonl")
	const gone = 1<<31 - 1
	if Alive(gone) {
		t.Skip("this platform cannot tell a dead process")
	}
	if _, err := Publish(State{PID: gone, Cmd: "run", Results: results}); err != nil {
		t.Fatal(err)
	}
	remove, err := Publish(State{PID: os.Getpid(), Cmd: "run", Results: results})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ReadState(StatePath(results)); err != nil || st.PID != os.Getpid() {
		t.Fatalf("state names pid %d (%v), want ours", st.PID, err)
	}
	remove()
	if _, err := os.Stat(StatePath(results)); !os.IsNotExist(err) {
		t.Errorf("our state outlived remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(RunningDir(), "2147483647.json")); err != nil {
		t.Errorf("the dead process's registration in RunningDir is status's to forget, not ours: %v", err)
	}
}
