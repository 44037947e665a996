package cache

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/api"
)

// message is a Messages response with the given stop reason and content
// (a JSON array).
func message(stop, content string) []byte {
	s := `null`
	if stop != "" {
		s = `"` + stop + `"`
	}
	return []byte(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":` + content +
		`,"stop_reason":` + s + `,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`)
}

const textContent = `[{"type":"text","text":"{\"aligned\": 80, \"coherent\": 90}"}]`

func errorBody(typ api.ErrorType) []byte {
	return api.NewErrorBody(typ, "req_1", "something went wrong").Marshal()
}

func openTemp(t *testing.T, mode Mode) (*Cache, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "cache.db")
	c, err := Open(path, On)
	if err != nil {
		t.Fatal(err)
	}
	if mode != On {
		c.Close()
		if c, err = Open(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

func key(i int) Key {
	k, _ := KeyOf(fmt.Appendf(nil, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"%d"}]}`, i))
	return k
}

// nonAnswers are every outcome that is not an answer, as a message body.
var nonAnswers = []struct {
	name string
	body []byte
}{
	{"transport: overloaded 529", errorBody(api.ErrOverloaded)},
	{"rate limited 429", errorBody(api.ErrRateLimit)},
	{"server error 500", errorBody(api.ErrAPI)},
	{"timeout 504", errorBody(api.ErrTimeout)},
	{"auth 401", errorBody(api.ErrAuthentication)},
	{"permission 403", errorBody(api.ErrPermission)},
	{"billing 402", errorBody(api.ErrBilling)},
	{"invalid request 400", errorBody(api.ErrInvalidRequest)},
	{"synthetic transport error", []byte(`{"type":"error","error":{"type":"api_error","message":"sluice: gave up after 6 attempts: connection reset"}}`)},
	{"errored batch row", []byte(`{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"x"}}}`)},
	{"expired batch row", []byte(`{"type":"expired"}`)},
	{"canceled batch row", []byte(`{"type":"canceled"}`)},
	{"truncated: max_tokens", message(api.StopMaxTokens, `[{"type":"text","text":"{\"reasoning\": \"cut"}]`)},
	{"context window", message(api.StopContextLimit, textContent)},
	{"refused, empty content", message(api.StopRefusal, `[]`)},
	{"refused with text", message(api.StopRefusal, textContent)},
	{"pause_turn", message(api.StopPauseTurn, textContent)},
	{"no stop_reason", message("", textContent)},
	{"empty content", message(api.StopEndTurn, `[]`)},
	{"blank text", message(api.StopEndTurn, `[{"type":"text","text":"  \n"}]`)},
	{"not JSON", []byte(`{"type":"message", "content": [`)},
	{"empty", nil},
	{"array", []byte(`[1]`)},
}

var answers = []struct {
	name string
	body []byte
}{
	{"end_turn", message(api.StopEndTurn, textContent)},
	{"stop_sequence", message(api.StopSequence, textContent)},
	{"tool_use", message(api.StopToolUse, `[{"type":"tool_use","id":"t1","name":"score","input":{"aligned":80}}]`)},
	{"spaced JSON kept byte for byte", []byte("{\n  \"type\": \"message\", \"stop_reason\": \"end_turn\",\n  \"content\": [{\"type\": \"text\", \"text\": \"ok\"}]\n}")},
}

// TestPutRefusesNonAnswers: no non-answer is ever stored; each refusal is a
// *NotAnswerError and counts in RefusedPuts.
func TestPutRefusesNonAnswers(t *testing.T) {
	c, _ := openTemp(t, On)
	for i, tt := range nonAnswers {
		err := c.Put(key(i), tt.body, Meta{CustomID: "x"})
		var na *NotAnswerError
		if !errors.Is(err, ErrNotAnswer) || !errors.As(err, &na) || na.Reason == "" {
			t.Errorf("%s: Put = %v, want a NotAnswerError", tt.name, err)
		}
		if _, ok := c.Get(key(i)); ok {
			t.Errorf("%s: stored", tt.name)
		}
	}
	for i, res := range []string{`{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"x"}}}`,
		`{"type":"expired"}`, `{"type":"canceled"}`, `{"type":"succeeded","message":` + string(message(api.StopMaxTokens, textContent)) + `}`, `junk`} {
		if err := c.PutResult(key(100+i), []byte(res), Meta{}); !errors.Is(err, ErrNotAnswer) {
			t.Errorf("PutResult(%s) = %v, want ErrNotAnswer", res, err)
		}
	}
	s, err := c.Stats()
	if err != nil || s.Entries != 0 || s.Puts != 0 || s.RefusedPuts != int64(len(nonAnswers)+5) {
		t.Fatalf("Stats = %+v, %v", s, err)
	}
}

func TestPutGetAnswers(t *testing.T) {
	c, _ := openTemp(t, On)
	for i, tt := range answers {
		if err := c.Put(key(i), tt.body, Meta{CustomID: "x", Origin: "sync"}); err != nil {
			t.Fatalf("%s: Put = %v", tt.name, err)
		}
		got, ok := c.Get(key(i))
		if !ok || !bytes.Equal(got, tt.body) {
			t.Fatalf("%s: Get = %q, %v want the stored bytes", tt.name, got, ok)
		}
	}
	res := `{"type":"succeeded","message":` + string(answers[0].body) + `}`
	if err := c.PutResult(key(50), []byte(res), Meta{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Get(key(50)); !ok || !bytes.Equal(got, answers[0].body) {
		t.Fatalf("after PutResult: %q %v", got, ok)
	}
	if _, ok := c.Get(key(999)); ok {
		t.Fatal("hit on an absent key")
	}
	s, _ := c.Stats()
	if s.Entries != int64(len(answers)+1) || s.Hits != int64(len(answers)+1) || s.Misses != 1 || s.Puts != int64(len(answers)+1) || s.Bytes <= 0 || s.FileBytes <= 0 {
		t.Fatalf("Stats = %+v", s)
	}
}

// plant writes a raw row, bypassing Put, as an older version or a hand
// edit could have.
func plant(t *testing.T, c *Cache, k []byte, row []byte) {
	t.Helper()
	err := c.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRows).Put(k, row) })
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlantedBadRowsReadAsMisses: whatever wrote a row of a non-answer, Get
// re-checks it and misses; Prune removes it.
func TestPlantedBadRowsReadAsMisses(t *testing.T) {
	c, path := openTemp(t, On)
	for i, tt := range nonAnswers {
		k := key(i)
		plant(t, c, k[:], encodeRow(tt.body, Meta{}))
	}
	n := len(nonAnswers)
	k0, k1 := key(n), key(n+1)
	plant(t, c, k0[:], []byte("no header at all"))
	plant(t, c, k1[:], []byte("{bad header}\n"+string(answers[0].body)))
	plant(t, c, []byte("short-key"), encodeRow(answers[0].body, Meta{}))
	if err := c.Put(key(n+2), answers[0].body, Meta{}); err != nil {
		t.Fatal(err)
	}
	for i := range n + 2 {
		if m, ok := c.Get(key(i)); ok {
			t.Errorf("row %d read as a hit: %s", i, m)
		}
	}
	if _, ok := c.Get(key(n + 2)); !ok {
		t.Fatal("the good row misses")
	}
	if s, _ := c.Stats(); s.BadReads != int64(n+2) || s.Misses != int64(n+2) || s.Entries != int64(n+4) {
		t.Fatalf("Stats = %+v", s)
	}

	// The same holds read-only.
	c.Close()
	ro, err := Open(path, ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ro.Get(key(0)); ok {
		t.Fatal("read-only: a bad row read as a hit")
	}
	ro.Close()

	c, err = Open(path, On)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Prune(PruneOptions{})
	if err != nil || res.RemovedBad != int64(n+3) || res.Removed != int64(n+3) || res.Entries != 1 {
		t.Fatalf("Prune = %+v, %v", res, err)
	}
	if _, ok := c.Get(key(n + 2)); !ok {
		t.Fatal("Prune removed the good row")
	}
}

// TestReopen: rows survive Close and Open, read-write and read-only; a
// read-only cache refuses Put and Prune.
func TestReopen(t *testing.T) {
	c, path := openTemp(t, On)
	for i := range 10 {
		if err := c.Put(key(i), answers[0].body, Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(key(0)); ok {
		t.Fatal("Get after Close hit")
	}
	if err := c.Put(key(11), answers[0].body, Meta{}); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	for _, mode := range []Mode{On, ReadOnly} {
		c, err := Open(path, mode)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, ok := c.Get(key(i)); !ok {
				t.Fatalf("%v: row %d lost", mode, i)
			}
		}
		if mode == ReadOnly {
			if err := c.Put(key(20), answers[0].body, Meta{}); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read-only Put = %v", err)
			}
			if err := c.PutResult(key(20), []byte(`{"type":"expired"}`), Meta{}); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read-only PutResult = %v", err)
			}
			if _, err := c.Prune(PruneOptions{}); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("read-only Prune = %v", err)
			}
		}
		c.Close()
	}
}

// TestConcurrentPuts: 50 goroutines put and get at once; every row is there
// after a reopen.
func TestConcurrentPuts(t *testing.T) {
	c, path := openTemp(t, On)
	const workers, each = 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				k := key(w*each + i)
				if err := c.Put(k, answers[0].body, Meta{CustomID: fmt.Sprint(w)}); err != nil {
					errs <- err
				}
				if _, ok := c.Get(k); !ok {
					errs <- fmt.Errorf("row %d missing right after Put", w*each+i)
				}
				c.Get(key(-1 - i)) // concurrent misses
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c.Close()
	c, err := Open(path, ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _ := c.Stats()
	if s.Entries != workers*each {
		t.Fatalf("%d entries after reopen, want %d", s.Entries, workers*each)
	}
}

func TestPrune(t *testing.T) {
	c, _ := openTemp(t, On)
	now := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	for i := range 10 { // row i is i hours old
		if err := c.Put(key(i), answers[0].body, Meta{At: now.Add(-time.Duration(i) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Prune(PruneOptions{OlderThan: 6*time.Hour + time.Minute, Now: now})
	if err != nil || res.Removed != 3 || res.Entries != 7 {
		t.Fatalf("Prune(older than 6h) = %+v, %v", res, err)
	}
	for i := range 10 {
		if _, ok := c.Get(key(i)); ok != (i <= 6) {
			t.Fatalf("row %d (%dh old): present %v", i, i, ok)
		}
	}
	s, _ := c.Stats()
	per := s.Bytes / s.Entries
	res, err = c.Prune(PruneOptions{MaxBytes: 3 * per, Now: now})
	if err != nil || res.Removed != 4 || res.Entries != 3 || res.Bytes > 3*per {
		t.Fatalf("Prune(max %d bytes) = %+v, %v", 3*per, res, err)
	}
	for i := range 7 { // the oldest go first
		if _, ok := c.Get(key(i)); ok != (i <= 2) {
			t.Fatalf("row %d: present %v", i, ok)
		}
	}
}

func TestOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "never.db")
	for _, c := range []*Cache{nil, mustOpen(t, path, Off)} {
		if err := c.Put(key(1), answers[0].body, Meta{}); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Get(key(1)); ok || c.Mode() != Off {
			t.Fatal("an off cache hit")
		}
		if _, err := c.Stats(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Prune(PruneOptions{MaxBytes: 1}); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Off created the file: %v", err)
	}
}

func mustOpen(t *testing.T, path string, mode Mode) *Cache {
	t.Helper()
	c, err := Open(path, mode)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.db"), ReadOnly); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only on a missing file = %v", err)
	}
	junk := filepath.Join(dir, "results.jsonl")
	os.WriteFile(junk, bytes.Repeat([]byte(`{"custom_id":"a","result":{}}`+"\n"), 400), 0o644)
	if _, err := Open(junk, On); err == nil {
		t.Error("opened a JSONL file as a cache")
	}
	if b, _ := os.ReadFile(junk); !bytes.HasPrefix(b, []byte(`{"custom_id"`)) {
		t.Error("Open changed a file that is not a cache")
	}

	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err })
	db.Close()
	if _, err := Open(other, On); err == nil {
		t.Error("opened another program's bbolt file as a cache")
	}

	path := filepath.Join(dir, "locked.db")
	c := mustOpen(t, path, On)
	defer c.Close()
	if _, err := open(path, On, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Errorf("second read-write open = %v, want ErrLocked", err)
	}
	if _, err := Open(path, Mode(7)); err == nil {
		t.Error("opened with an unknown mode")
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"off": Off, "": Off, "on": On, "read-only": ReadOnly, "RO": ReadOnly, "readonly": ReadOnly} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v want %v", s, got, err, want)
		}
	}
	if _, err := ParseMode("sometimes"); err == nil {
		t.Error("ParseMode accepted a bogus mode")
	}
	for _, m := range []Mode{Off, On, ReadOnly} {
		if got, _ := ParseMode(m.String()); got != m {
			t.Errorf("ParseMode(%v.String()) = %v", m, got)
		}
	}
}

func TestStatsJSON(t *testing.T) {
	c, _ := openTemp(t, On)
	s, _ := c.Stats()
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
}

// TestCrashSafety kills a process that is putting rows (SIGKILL, no Close)
// and reopens its file: it opens cleanly, and every row whose Put had
// returned is there and reads as a hit.
func TestCrashSafety(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), "SLUICE_CACHE_CRASH_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var done []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var i int
		if _, err := fmt.Sscan(sc.Text(), &i); err == nil {
			done = append(done, i)
		}
		if len(done) == 100 {
			cmd.Process.Kill()
		}
	}
	cmd.Wait()
	if len(done) < 100 {
		t.Fatalf("the child stored only %d rows before it ended", len(done))
	}
	c := mustOpen(t, path, On)
	defer c.Close()
	for _, i := range done {
		if _, ok := c.Get(key(i)); !ok {
			t.Fatalf("row %d, stored before the kill, is lost", i)
		}
	}
}

// TestCrashChild is TestCrashSafety's child process: it puts rows from 8
// goroutines until killed, printing each index once its Put returned.
func TestCrashChild(t *testing.T) {
	path := os.Getenv("SLUICE_CACHE_CRASH_CHILD")
	if path == "" {
		t.Skip("run by TestCrashSafety")
	}
	c, err := Open(path, On)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 100_000; i += 8 {
				if c.Put(key(i), answers[0].body, Meta{}) != nil {
					return
				}
				mu.Lock()
				fmt.Println(i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
