package results

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
)

const childEnv = "SLUICE_RESULTS_KILL_CHILD" // results file path for the child

// TestKillChild is the child process of TestKill; it is a no-op unless
// SLUICE_RESULTS_KILL_CHILD is set. It resumes the results file, then
// writes records from 8 goroutines with real fsync until it is killed,
// printing "durable <id>" for each id once OnDurable reports it.
func TestKillChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("child of TestKill")
	}
	round := os.Getenv(childEnv + "_ROUND")
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	w, err := Open(path, nil, nil, Options{FlushInterval: time.Millisecond, OnDurable: func(ids []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			fmt.Fprintf(out, "durable %s\n", id)
		}
		out.Flush()
	}})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if err := w.Write(rec(fmt.Sprintf("r%s-g%d-%d", round, g, i), api.ClassOK, "h")); err != nil {
					fmt.Println("write:", err)
					os.Exit(2)
				}
			}
		})
	}
	wg.Wait()
}

// TestKill runs a writer in a child process, kills it with SIGKILL once it
// has reported records durable, and checks that Scan finds every reported
// record and that Open then leaves a clean file. Three rounds resume the
// same file.
func TestKill(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child")
	}
	path := tempPath(t)
	reported := make(map[string]bool)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+path, fmt.Sprintf("%s_ROUND=%d", childEnv, round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		n := 0
		killed := false
		for {
			// A kill can cut the child's last write to the pipe: a line
			// without its newline was never fully reported.
			text, err := br.ReadString('\n')
			if err != nil {
				break
			}
			id, ok := strings.CutPrefix(strings.TrimSuffix(text, "\n"), "durable ")
			if !ok {
				t.Errorf("child: %s", text)
				continue
			}
			reported[id] = true
			// Kill at a different point each round, mid-stream.
			if n++; n == 500*(round+1) && !killed {
				cmd.Process.Kill()
				killed = true
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatalf("round %d: the child exited after %d records before being killed", round, n)
		}

		st, err := Scan(path)
		if err != nil {
			t.Fatalf("round %d: Scan after kill: %v", round, err)
		}
		for id := range reported {
			if _, ok := st.Done[id]; !ok {
				t.Fatalf("round %d: %s was reported durable but is not in the file", round, id)
			}
		}
		if len(st.Duplicates) != 0 {
			t.Fatalf("round %d: duplicates %v", round, st.Duplicates)
		}
		w, err := Open(path, st, nil, Options{})
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if ids := fileIDs(t, path); len(ids) != len(st.Done) {
			t.Fatalf("round %d: %d records in the file, Scan counted %d", round, len(ids), len(st.Done))
		}
	}
}
