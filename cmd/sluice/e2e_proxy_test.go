package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/sim"
)

// proxyUp is a `sluice proxy` that serves, and what callers need.
type proxyUp struct {
	*proc
	base, token string
}

// startProxy starts `sluice proxy --listen addr --state-dir stateDir
// args...` and waits until it serves /healthz to a caller with its token.
func (e *e2e) startProxy(addr, stateDir string, args ...string) proxyUp {
	e.t.Helper()
	p := e.start(append([]string{"proxy", "--listen", addr, "--state-dir", stateDir, "--no-dotenv"}, args...)...)
	base := "http://" + addr
	return proxyUp{proc: p, base: base, token: e.proxyToken(p, base, stateDir)}
}

// call sends one request to the proxy with its token and returns the
// answer, read whole.
func (u proxyUp) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, ok := body.([]byte)
		if !ok {
			raw, _ = json.Marshal(body)
		}
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, u.base+path, rd)
	req.Header.Set("x-api-key", u.token)
	req.Header.Set("anthropic-version", api.VersionDefault)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// batchRows are n rows of a virtual batch, custom_ids r0 … r(n-1), and
// their params by custom_id.
func batchRows(n int, extra map[string]any) ([]map[string]any, map[string][]byte) {
	rows := make([]map[string]any, n)
	params := map[string][]byte{}
	for i := range rows {
		p := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 32,
			"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("virtual batch row %d", i)}}}
		for k, v := range extra {
			p[k] = v
		}
		raw, _ := json.Marshal(p)
		id := fmt.Sprintf("r%d", i)
		rows[i] = map[string]any{"custom_id": id, "params": json.RawMessage(raw)}
		params[id] = raw
	}
	return rows, params
}

// TestProxyKilledMidBatch: a proxy SIGKILLed while a virtual batch runs,
// then started again on its state dir, finishes the batch: every row has
// exactly one result, its own answer, and the simulator answered no body
// more than once beyond what was in flight at the kill.
func TestProxyKilledMidBatch(t *testing.T) {
	const n, capSonnet = 90, 3 // under the planner's smallest batch: the rows run sync
	e := newE2EWith(t, func(c *sim.Config) {
		for k, l := range c.Latency { // about 0.5 s a call at time scale 20
			l.TTFT = sim.Duration(10 * time.Second)
			c.Latency[k] = l
		}
	})
	state := e.path("state")
	addr := freeAddr(t)
	px := e.startProxy(addr, state, "--cap-sonnet", strconv.Itoa(capSonnet))
	rows, params := batchRows(n, nil)
	code, b := px.call(t, "POST", "/v1/messages/batches", map[string]any{"requests": rows})
	var created api.MessageBatch
	if json.Unmarshal(b, &created); code != 200 || created.ID == "" {
		t.Fatalf("create: %d %s", code, b)
	}
	resultsFile := filepath.Join(state, created.ID+".results.jsonl")
	e.waitFor(px.proc, "a fifth of the rows on disk", func() bool {
		raw, _ := os.ReadFile(resultsFile)
		return bytes.Count(raw, []byte("\n")) >= n/5
	})
	if err := px.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	px.wait()
	inFlightBound := int64(capSonnet * len(e.sim.Stats().Orgs))

	px = e.startProxy(addr, state)
	var ended api.MessageBatch
	e.waitFor(px.proc, "the batch's end after the restart", func() bool {
		_, b := px.call(t, "GET", "/v1/messages/batches/"+created.ID, nil)
		json.Unmarshal(b, &ended)
		return ended.ProcessingStatus == api.BatchEnded
	})
	if c := ended.RequestCounts; c.Succeeded != n || c.Errored+c.Canceled+c.Expired != 0 {
		t.Errorf("counts after the restart %+v, want %d succeeded", c, n)
	}
	code, res := px.call(t, "GET", "/v1/messages/batches/"+created.ID+"/results", nil)
	if code != 200 {
		t.Fatalf("results: %d %s", code, res)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(res))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for i := 0; sc.Scan(); i++ {
		var l api.BatchResultLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, sc.Bytes())
		}
		if want := fmt.Sprintf("r%d", i); l.CustomID != want || seen[l.CustomID] {
			t.Fatalf("line %d is %s, want %s once, in request order", i, l.CustomID, want)
		}
		seen[l.CustomID] = true
		if l.Result.Type != api.ResultSucceeded || l.Result.Message == nil || !sim.AnswerContains(l.Result.Message.Content[0].Text, params[l.CustomID]) {
			t.Fatalf("%s: not its own answer: %.300s", l.CustomID, sc.Bytes())
		}
	}
	if len(seen) != n {
		t.Errorf("%d result lines for %d rows", len(seen), n)
	}
	st := e.sim.Stats().Bodies
	if st.ExtraAnswers > inFlightBound {
		t.Errorf("%d bodies answered again: more than the %d that could be in flight at the kill", st.ExtraAnswers, inFlightBound)
	}
	t.Logf("answered again after the kill: %d (bound %d)", st.ExtraAnswers, inFlightBound)
	px.cmd.Process.Signal(os.Interrupt)
	if code := px.wait(); code != 0 {
		t.Errorf("exit status %d\n%s", code, px.stderr.String())
	}
}

// TestProxyStateDirHasOneOwner: a second proxy on a state dir a first one
// serves is refused (non-zero exit, naming the holder and its address)
// before it probes a key; one started while the first drains waits for
// it, saying so, then serves. Each has the same --cache, which the
// successor can open only once its predecessor is gone.
func TestProxyStateDirHasOneOwner(t *testing.T) {
	e := newE2EWith(t, func(c *sim.Config) {
		for k, l := range c.Latency { // about 2 s a call at time scale 20
			l.TTFT = sim.Duration(40 * time.Second)
			c.Latency[k] = l
		}
	})
	state, cache := e.path("state"), e.path("cache.db")
	firstAddr := freeAddr(t)
	first := e.startProxy(firstAddr, state, "--cache", cache)
	calls := e.simCalls()
	second := e.start("proxy", "--listen", freeAddr(t), "--state-dir", state, "--no-dotenv", "--cache", cache)
	if code := second.wait(); code == 0 {
		t.Fatal("a second proxy on a served state dir started")
	}
	if s := second.stderr.String(); !strings.Contains(s, "another sluice proxy holds the state dir") ||
		!strings.Contains(s, fmt.Sprintf("pid %d serving http://%s", first.cmd.Process.Pid, firstAddr)) {
		t.Errorf("the refusal does not name the serving holder and its address:\n%s", s)
	}
	if n := e.simCalls() - calls; n != 0 {
		t.Errorf("the refused proxy made %d upstream calls (key probes), want none", n)
	}

	// A call in flight keeps the first proxy draining for about 2 s.
	done := make(chan int, 1)
	go func() {
		code, _ := first.call(t, "POST", "/v1/messages", map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": "hold the drain"}}})
		done <- code
	}()
	e.waitFor(first.proc, "the call in flight", func() bool {
		for _, o := range e.sim.Stats().Orgs {
			for _, l := range o.Pools {
				if l.InFlight > 0 {
					return true
				}
			}
		}
		return false
	})
	first.cmd.Process.Signal(os.Interrupt)
	addr := freeAddr(t)
	next := e.start("proxy", "--listen", addr, "--state-dir", state, "--no-dotenv", "--cache", cache)
	if code := <-done; code != 200 {
		t.Errorf("the call in flight during the drain: %d", code)
	}
	if code := first.wait(); code != 0 {
		t.Errorf("the first proxy's drain: exit %d\n%s", code, first.stderr.String())
	}
	up := proxyUp{proc: next, base: "http://" + addr, token: e.proxyToken(next, "http://"+addr, state)}
	if code, b := up.call(t, "GET", "/v1/messages/batches", nil); code != 200 {
		t.Errorf("the successor: %d %s", code, b)
	}
	next.cmd.Process.Signal(os.Interrupt)
	next.wait()
	if s := next.stderr.String(); !strings.Contains(s, "is held by a proxy that is draining") || !strings.Contains(s, fmt.Sprintf("pid %d draining", first.cmd.Process.Pid)) {
		t.Errorf("the successor did not say it waited for the draining holder:\n%s", s)
	}
}

// TestProxyInterruptEndsTheWaitForTheStateDir: a proxy waiting for its
// draining predecessor's state dir stops at Ctrl-C (exit status 2, saying
// so), without waiting for the predecessor to finish.
func TestProxyInterruptEndsTheWaitForTheStateDir(t *testing.T) {
	e := newE2EWith(t, func(c *sim.Config) {
		for k, l := range c.Latency { // about 20 s a call at time scale 20
			l.TTFT = sim.Duration(400 * time.Second)
			c.Latency[k] = l
		}
	})
	state := e.path("state")
	first := e.startProxy(freeAddr(t), state)
	go func() { // keeps the first proxy draining for about 20 s
		raw, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 16,
			"messages": []map[string]any{{"role": "user", "content": "hold the drain"}}})
		req, _ := http.NewRequestWithContext(t.Context(), "POST", first.base+"/v1/messages", bytes.NewReader(raw))
		req.Header.Set("x-api-key", first.token)
		req.Header.Set("anthropic-version", api.VersionDefault)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	e.waitFor(first.proc, "the call in flight", func() bool {
		for _, o := range e.sim.Stats().Orgs {
			for _, l := range o.Pools {
				if l.InFlight > 0 {
					return true
				}
			}
		}
		return false
	})
	first.cmd.Process.Signal(os.Interrupt)

	// The successor, its stderr read as it comes.
	next := exec.CommandContext(t.Context(), e.bin, "proxy", "--listen", freeAddr(t), "--state-dir", state, "--no-dotenv")
	next.Dir, next.Env = e.dir, e.env
	stderr, err := next.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var said []string
	for line := range lines {
		said = append(said, line)
		if strings.Contains(line, "is held by a proxy that is draining") {
			break
		}
	}
	if len(said) == 0 || !strings.Contains(said[len(said)-1], "draining") {
		t.Fatalf("the successor did not wait for the draining proxy:\n%s", strings.Join(said, "\n"))
	}
	next.Process.Signal(os.Interrupt)
	exited := make(chan error, 1)
	go func() {
		for line := range lines {
			said = append(said, line)
		}
		exited <- next.Wait()
	}()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || !strings.Contains(strings.Join(said, "\n"), "interrupted while waiting for the state dir") {
			t.Errorf("the interrupted successor: %v, want exit status %d saying it was interrupted\n%s", err, exitInterrupted, strings.Join(said, "\n"))
		}
	case <-first.done:
		t.Errorf("the interrupted successor still waited when its predecessor was done\n%s", strings.Join(said, "\n"))
		next.Process.Kill()
		<-exited
	}
}

// TestProxyClosesIdleConnections: a kept-alive connection idle for
// --idle-timeout is closed by the proxy.
func TestProxyClosesIdleConnections(t *testing.T) {
	e := newE2E(t)
	addr := freeAddr(t)
	px := e.startProxy(addr, e.path("state"), "--idle-timeout", "300ms")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\nx-api-key: %s\r\n\r\n", addr, px.token)
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("healthz: %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := rd.ReadByte(); err != io.EOF {
		t.Fatalf("an idle connection: read %v, want EOF (closed by the proxy)", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("closed after %s", d)
	}
	px.cmd.Process.Signal(os.Interrupt)
	px.wait()
}

// peakRSS is the peak resident set of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestProxyBodyMemoryIsBounded: 20 concurrent batch creates of 200 MiB
// each — 4 GiB offered at once — do not take the proxy's peak RSS past
// its cap: --max-body-memory (1 GiB, the default) plus the process's own
// 256 MiB (proxyOwnMemory, which its Go memory limit allows too). Creates
// beyond the bound wait for room, or get a 429 with retry-after after
// --max-wait. (Their rows ask for streaming, so they end errored without
// a call upstream: what is measured is the bodies.)
func TestProxyBodyMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	const (
		creates  = 20
		rowsEach = 1000
		bodySize = 200 << 20
		bound    = 1 << 30
		baseline = proxyOwnMemory
	)
	e := newE2E(t)
	addr := freeAddr(t)
	px := e.startProxy(addr, e.path("state"), "--max-wait", "3s")
	text := strings.Repeat("x", bodySize/rowsEach-200)
	var buf bytes.Buffer
	buf.WriteString(`{"requests":[`)
	for i := range rowsEach {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"custom_id":"r%d","params":{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"%s"}]}}`, i, text)
	}
	buf.WriteString(`]}`)
	body := buf.Bytes()
	t.Logf("body of %d MiB, peak RSS before: %d MiB", len(body)>>20, peakRSS(t, px.cmd.Process.Pid)>>20)

	codes := make(chan int, creates)
	for range creates {
		go func() {
			req, _ := http.NewRequest("POST", px.base+"/v1/messages/batches", bytes.NewReader(body))
			req.Header.Set("x-api-key", px.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			if resp.StatusCode == 429 && resp.Header.Get("retry-after") == "" {
				t.Error("a 429 without retry-after")
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	byCode := map[int]int{}
	for range creates {
		byCode[<-codes]++
	}
	peak := peakRSS(t, px.cmd.Process.Pid)
	t.Logf("answers by status %v; peak RSS %d MiB (bound %d MiB + baseline %d MiB)", byCode, peak>>20, bound>>20, baseline>>20)
	if byCode[200] == 0 || byCode[200]+byCode[429] != creates {
		t.Errorf("answers by status %v: want some created and the rest 429", byCode)
	}
	if peak > bound+baseline {
		t.Errorf("peak RSS %d MiB, past the bound of %d MiB (+ %d MiB baseline)", peak>>20, bound>>20, baseline>>20)
	}
	px.cmd.Process.Signal(os.Interrupt)
	if code := px.wait(); code != 0 {
		t.Errorf("exit status %d\n%s", code, px.stderr.String())
	}
}
