package main

// End-to-end test that no API key value leaves a full run: keys (and
// their error paths), run on every route, a resume, judge with its cache,
// the proxy, and a fleet over Redis, all against one simulator world with
// distinctive random keys in two organizations (some of them revoked,
// forbidden or unknown, one revoked in the middle of a run), plus a fake
// API that echoes the key it is sent in every error body and header. Then
// every byte the binary wrote — stdout, stderr, every file under the work,
// cache, state, home and temporary directories, HTTP answers of the proxy,
// every Redis key name and value — is searched for every key.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/internal/testkit/redisproc"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// leakWindow is the length of the fragments searched for: any 16
// consecutive characters of a key (or of its base64 or hex form) that no
// other secret shares identify it. Every key is "sk-ant-test-" and 40
// random hex digits, so a window always holds at least 4 random ones.
const leakWindow = 16

// leakSecret is one secret of the test world.
type leakSecret struct {
	name  string // the simulator's label; how failures name the secret
	value string
}

func newLeakSecret(t *testing.T, name string) leakSecret {
	t.Helper()
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return leakSecret{name: name, value: "sk-ant-test-" + hex.EncodeToString(b[:])}
}

// hit says which secret a window belongs to and how it was encoded.
type hit struct {
	secret string
	form   string // raw, base64, base64url, hex
	at     int    // offset of the window in that form
}

// leakNeedles maps every identifying window of every secret to its hit.
type leakNeedles map[string]hit

// newLeakNeedles builds the windows of the raw value, of its standard and
// URL base64 forms at the three byte alignments (only the characters that
// do not depend on the neighbouring bytes), and of its hex form, and drops
// the windows two secrets share (the common "sk-ant-test-" prefix).
func newLeakNeedles(secrets []leakSecret) leakNeedles {
	all := map[string][]hit{}
	add := func(s leakSecret, form, text string) {
		for i := 0; i+leakWindow <= len(text); i++ {
			w := text[i : i+leakWindow]
			hs := all[w]
			if len(hs) > 0 && hs[len(hs)-1].secret == s.name {
				continue
			}
			all[w] = append(hs, hit{s.name, form, i})
		}
	}
	for _, s := range secrets {
		add(s, "raw", s.value)
		add(s, "hex", hex.EncodeToString([]byte(s.value)))
		for shift := range 3 {
			b := append(make([]byte, shift), s.value...)
			full := len(b) / 3 * 4        // characters of complete groups
			skip := []int{0, 2, 3}[shift] // characters holding the padding bytes
			for form, enc := range map[string]*base64.Encoding{"base64": base64.StdEncoding, "base64url": base64.URLEncoding} {
				add(s, form, enc.EncodeToString(b)[skip:full])
			}
		}
	}
	n := leakNeedles{}
	for w, hs := range all {
		if len(hs) == 1 {
			n[w] = hs[0]
		}
	}
	return n
}

// find returns, for each secret found in b, its first hit and offset.
func (n leakNeedles) find(b []byte) map[string]struct {
	h   hit
	off int
} {
	found := map[string]struct {
		h   hit
		off int
	}{}
	for i := 0; i+leakWindow <= len(b); i++ {
		if h, ok := n[string(b[i:i+leakWindow])]; ok {
			if _, seen := found[h.secret]; !seen {
				found[h.secret] = struct {
					h   hit
					off int
				}{h, i}
			}
		}
	}
	return found
}

// leakWorld is the test's world: the simulator, the secrets, the
// directories the binary may write to, and everything it printed.
type leakWorld struct {
	t       *testing.T
	e       *e2e
	secrets []leakSecret
	byName  map[string]string
	needles leakNeedles
	env     []string   // the standard environment of every command
	work    string     // the binary's working directory (e.dir)
	cache   string     // SLUICE_CACHE's directory and every --cache
	state   string     // the proxy's --state-dir
	home    string     // HOME: ~/.cache, ~/.local/state
	tmp     string     // TMPDIR
	secrDir string     // the keys file: a source of keys, not searched
	mu      sync.Mutex // guards what follows: the subtests run in parallel
	// blobs are the outputs searched at the end, by where they came from.
	blobs  map[string][]byte
	order  []string
	nFiles int
	nBytes int64
}

func (w *leakWorld) key(name string) string { return w.byName[name] }

// redact replaces every secret in s by its name, for failure messages.
func (w *leakWorld) redact(s string) string {
	for _, k := range w.secrets {
		s = strings.ReplaceAll(s, k.value, "<"+k.name+">")
	}
	return s
}

// sub is the test world's e2e for the subtest t, so that its helpers
// fail t.
func (w *leakWorld) sub(t *testing.T) *e2e {
	e := *w.e
	e.t = t
	return &e
}

// keep records an output to search at the end.
func (w *leakWorld) keep(where string, b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.blobs[where]; dup {
		where = fmt.Sprintf("%s #%d", where, len(w.order))
	}
	w.blobs[where] = append([]byte(nil), b...)
	w.order = append(w.order, where)
}

// check searches b now and fails naming where for every secret in it.
func (w *leakWorld) check(where string, b []byte) {
	w.t.Helper()
	found := w.needles.find(b)
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := found[name]
		lo, hi := max(0, f.off-60), min(len(b), f.off+leakWindow+60)
		w.t.Errorf("KEY LEAK: %s holds the key %q (…%s): %s window at offset %d of the key's %s form, byte %d; context: %q",
			where, name, w.key(name)[len(w.key(name))-4:], f.h.form, f.h.at, f.h.form, f.off, w.redact(string(b[lo:hi])))
	}
}

// withEnv returns the standard environment with the variables in kv
// set (an empty value removes the variable).
func (w *leakWorld) withEnv(kv ...string) []string {
	env := append([]string(nil), w.env...)
	for _, s := range kv {
		name, _, _ := strings.Cut(s, "=")
		out := env[:0]
		for _, e := range env {
			if !strings.HasPrefix(e, name+"=") {
				out = append(out, e)
			}
		}
		env = out
		if !strings.HasSuffix(s, "=") {
			env = append(env, s)
		}
	}
	return env
}

// start starts `sluice args...` in the work directory with env, as
// e2e.start does but without adding --no-dotenv (the .env is one of the
// key sources here) or --no-progress (its lines are output too).
func (w *leakWorld) start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	for _, a := range args {
		if len(w.needles.find([]byte(a))) > 0 {
			t.Fatalf("%s: a key in argv: %q", name, w.redact(a))
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	p := &proc{cmd: exec.CommandContext(ctx, w.e.bin, args...), done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = w.work, env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

// finish waits for p, keeps its output and returns its exit status.
func (w *leakWorld) finish(t *testing.T, name string, p *proc) int {
	t.Helper()
	code := p.wait()
	t.Logf("%s: exit status %d", name, code)
	w.keep(name+" stdout", p.stdout.Bytes())
	w.keep(name+" stderr", p.stderr.Bytes())
	return code
}

// run runs `sluice args...` to completion; with wantOK it fails unless the
// command exits 0.
func (w *leakWorld) run(t *testing.T, name string, env []string, wantOK bool, args ...string) *proc {
	t.Helper()
	p := w.start(t, name, env, args...)
	if code := w.finish(t, name, p); wantOK && code != 0 {
		t.Fatalf("%s: sluice %s: exit status %d\nstderr:\n%s", name, strings.Join(args, " "), code, w.redact(p.stderr.String()))
	}
	return p
}

// walk keeps every file under dir except those in skip.
func (w *leakWorld) walk(t *testing.T, root string, skip map[string]bool) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || skip[path] {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			w.keep("symlink "+path, []byte(target))
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.nFiles++
		w.nBytes += int64(len(b))
		w.mu.Unlock()
		w.keep("file "+path, b)
		return nil
	})
	if err != nil {
		t.Errorf("walking %s: %v", root, err)
	}
}

// fetchView reads what the view at the state file statePath serves — the
// page, /api/status, /api/history, /metrics — and keeps it all (the state
// file too) to search.
func (w *leakWorld) fetchView(t *testing.T, name, statePath string) {
	t.Helper()
	st, err := view.ReadState(statePath)
	if err != nil {
		t.Errorf("%s: no view state: %v", name, err)
		return
	}
	raw, _ := os.ReadFile(statePath)
	w.keep(name+" view state", raw)
	for _, path := range []string{"/?token=" + st.Token, "/api/status", "/api/history", "/metrics"} {
		req, _ := http.NewRequest("GET", st.Base+path, nil)
		req.Header.Set("Authorization", "Bearer "+st.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: GET %s: %v", name, path, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Errorf("%s: GET %s: %d", name, path, resp.StatusCode)
		}
		var hdr bytes.Buffer
		resp.Header.Write(&hdr)
		w.keep(fmt.Sprintf("%s view GET %s", name, path), append(hdr.Bytes(), b...))
	}
}

// redisDump returns every key name of the Redis at addr and its value,
// read by type, and the server's client list and pub/sub channels.
func redisDump(t *testing.T, addr string) (map[string][]byte, int) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := t.Context()
	out := map[string][]byte{}
	n := 0
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			t.Fatalf("redis SCAN: %v", err)
		}
		for _, k := range ks {
			n++
			var v bytes.Buffer
			typ, err := rdb.Type(ctx, k).Result()
			if err != nil {
				t.Fatalf("redis TYPE %q: %v", k, err)
			}
			fmt.Fprintf(&v, "type %s\n", typ)
			switch typ {
			case "string":
				s, _ := rdb.Get(ctx, k).Result()
				v.WriteString(s)
			case "hash":
				m, _ := rdb.HGetAll(ctx, k).Result()
				for f, x := range m {
					fmt.Fprintf(&v, "%s\t%s\n", f, x)
				}
			case "list":
				l, _ := rdb.LRange(ctx, k, 0, -1).Result()
				v.WriteString(strings.Join(l, "\n"))
			case "set":
				l, _ := rdb.SMembers(ctx, k).Result()
				v.WriteString(strings.Join(l, "\n"))
			case "zset":
				zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
				for _, z := range zs {
					fmt.Fprintf(&v, "%v\t%v\n", z.Member, z.Score)
				}
			case "stream":
				xs, _ := rdb.XRange(ctx, k, "-", "+").Result()
				for _, x := range xs {
					fmt.Fprintf(&v, "%s\t%v\n", x.ID, x.Values)
				}
			case "none": // expired since the SCAN
			default:
				t.Errorf("redis key %q of type %s: not read", k, typ)
			}
			out["redis key name "+k] = []byte(k)
			out["redis value of "+k] = v.Bytes()
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if s, err := rdb.ClientList(ctx).Result(); err == nil {
		out["redis CLIENT LIST"] = []byte(s)
	}
	if chs, err := rdb.PubSubChannels(ctx, "*").Result(); err == nil {
		out["redis PUBSUB CHANNELS"] = []byte(strings.Join(chs, "\n"))
	}
	return out, n
}

// echoAPI is a fake API that puts the key it is sent into every answer:
// a count_tokens probe with key good succeeds; a message with key good is
// refused as invalid (400, an errored result); every other call is a 401.
// Each error body and an x-echo-key header hold the key.
func echoAPI(t *testing.T, good string) (url string, messages *atomic.Int64) {
	messages = new(atomic.Int64)
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		k := r.Header.Get(api.HeaderAPIKey)
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Request-Id", "req_echo_"+k)
		rw.Header().Set("X-Echo-Key", k)
		errBody := func(status int, typ, msg string) {
			rw.WriteHeader(status)
			b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
			rw.Write(b)
		}
		switch {
		case k == good && strings.HasSuffix(r.URL.Path, "/count_tokens"):
			rw.Header().Set("Anthropic-Organization-Id", "00000000-echo-4000-8000-000000000001")
			rw.Write([]byte(`{"input_tokens":12}`))
		case k == good && r.URL.Path == "/v1/messages":
			messages.Add(1)
			rw.Header().Set("Anthropic-Organization-Id", "00000000-echo-4000-8000-000000000001")
			errBody(400, "invalid_request_error", "messages: the request sent with x-api-key "+k+" is invalid (key "+k+")")
		default:
			errBody(401, "authentication_error", "invalid x-api-key: "+k+" is not a key of this organization")
		}
	}))
	t.Cleanup(s.Close)
	return s.URL, messages
}

func TestNoKeyLeavesAFullRun(t *testing.T) {
	start := time.Now()
	w := &leakWorld{t: t, byName: map[string]string{}, blobs: map[string][]byte{}}
	for _, name := range []string{"alpha1", "alpha2", "forbidden", "beta1", "doomed", "revoked", "stranger", "proxy-token"} {
		s := newLeakSecret(t, name)
		w.secrets = append(w.secrets, s)
		w.byName[name] = s.value
	}
	w.needles = newLeakNeedles(w.secrets)
	k := w.key

	// Two organizations: alpha (two good keys and a forbidden one), beta (a
	// good key, one revoked mid-run, one revoked from the start); the
	// stranger is no key of either.
	w.e = newE2EWith(t, func(c *sim.Config) {
		c.TimeScale = batchTimeScale
		c.Verdicts.Enabled = true
		c.Orgs = c.Orgs[:2]
		c.Orgs[0].Name, c.Orgs[1].Name = "alpha", "beta"
		c.Orgs[0].Keys = []sim.KeyConfig{{Label: "alpha1", Key: k("alpha1")}, {Label: "alpha2", Key: k("alpha2")},
			{Label: "forbidden", Key: k("forbidden"), Status: sim.KeyForbidden}}
		c.Orgs[1].Keys = []sim.KeyConfig{{Label: "beta1", Key: k("beta1")}, {Label: "doomed", Key: k("doomed")},
			{Label: "revoked", Key: k("revoked"), Status: sim.KeyRevoked}}
	})
	e := w.e
	w.work, w.cache, w.state, w.home, w.tmp, w.secrDir = e.dir, t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()

	// The keys come from every source a user has: the environment
	// (ANTHROPIC_API_KEY, ANTHROPIC_API_KEYS with a labelled and an
	// unlabelled item), a group-readable .env, and a keys file with a
	// taken label and a duplicate value (both warned about).
	dotEnv := fmt.Sprintf("# test keys\n%s=%s\nexport %s=%q\n", keys.EnvBatch, k("beta1"), keys.EnvLowPrio, k("doomed"))
	keysFile := filepath.Join(w.secrDir, "keys.txt")
	keysText := fmt.Sprintf("# test keys\nrevoked=%s\nbatch=%s\n\ndup=%s\n", k("revoked"), k("stranger"), k("alpha2"))
	if err := os.WriteFile(e.path(".env"), []byte(dotEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keysFile, []byte(keysText), 0o600); err != nil {
		t.Fatal(err)
	}
	w.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.home, "TMPDIR=" + w.tmp,
		"ANTHROPIC_BASE_URL=" + e.url, "SLUICE_CACHE=" + filepath.Join(w.cache, "responses.db"),
		keys.EnvAPIKey + "=" + k("alpha1"),
		keys.EnvAPIKeys + "=alpha2=" + k("alpha2") + ", " + k("forbidden"),
	}
	kf := []string{"--keys-file", keysFile}
	args := func(a ...string) []string { return append(a, kf...) }

	t.Run("keys", func(t *testing.T) {
		out := w.run(t, "keys --limits", w.env, true, args("keys", "--limits", "claude-sonnet-4-5")...).stdout.String()
		// The keys are shown by label and last four characters.
		for _, name := range []string{"alpha1", "beta1", "revoked", "stranger"} {
			if !strings.Contains(out, k(name)[len(k(name))-4:]) {
				t.Errorf("sluice keys does not show the key %s by its last four characters:\n%s", name, w.redact(out))
			}
		}
	})

	// The jobs share the simulator and run at once. They are not
	// t.Parallel subtests, which -parallel (GOMAXPROCS) would queue: they
	// mostly wait, on their processes and the batch polls.
	t.Run("jobs", func(t *testing.T) {
		var wg sync.WaitGroup
		job := func(name string, f func(t *testing.T)) { wg.Go(func() { t.Run(name, f) }) }
		defer wg.Wait()
		job("sync_with_a_key_revoked_midway", func(t *testing.T) {
			e := w.sub(t)
			const n = 400
			if err := (workload.Judge{N: n, Seed: 71, NoRubric: true, MaxTokens: 64}).WriteFile(e.path("sync.jsonl")); err != nil {
				t.Fatal(err)
			}
			p := w.start(t, "run sync", w.env, args("run", "sync.jsonl", "-o", "sync-out.jsonl", "--route", "sync",
				"--cap-sonnet", "4", "--cache", filepath.Join(w.cache, "run.db"), "--report", "sync-report.json")...)
			e.waitForLines(p, e.path("sync-out.jsonl"), 40)
			w.fetchView(t, "run sync", view.StatePath(e.path("sync-out.jsonl")))
			if err := e.sim.SetKeyStatus("doomed", sim.KeyRevoked); err != nil {
				t.Fatal(err)
			}
			// Once keys died, the view (page, status, history, metrics) again.
			w.fetchView(t, "run sync after the revocation", view.StatePath(e.path("sync-out.jsonl")))
			if code := w.finish(t, "run sync", p); code != 0 {
				t.Fatalf("run sync: exit status %d\nstderr:\n%s", code, w.redact(p.stderr.String()))
			}
			rc := exec.Command(w.e.bin, "report", "sync-out.jsonl", "-o", "sync-again.report.html")
			rc.Dir, rc.Env = w.work, w.env
			if out, err := rc.CombinedOutput(); err != nil {
				t.Errorf("sluice report: %v\n%s", err, w.redact(string(out)))
			}
			e.checkExactlyOnce(e.path("sync.jsonl"), e.path("sync-out.jsonl"))
			st := e.sim.Stats().Orgs
			if d := st["beta"].Keys["doomed"]; d.Calls == 0 || d.Denied == 0 {
				t.Errorf("the doomed key made %d calls and was refused %d times: the revocation did not reach a running job", d.Calls, d.Denied)
			}
			for org, name := range map[string]string{"alpha": "forbidden", "beta": "revoked"} {
				if st[org].Keys[name].Denied == 0 {
					t.Errorf("the %s key was never refused", name)
				}
			}
			rep := e.readReport(e.path("sync-report.json"))
			dead := 0
			for _, kr := range rep.Keys {
				if kr.Dead {
					dead++
				}
			}
			if dead < 2 {
				t.Errorf("report: %d dead keys, want at least the revoked and the stranger ones: %+v", dead, rep.Keys)
			}
			// Resume: every request is done.
			w.run(t, "run sync resume", w.env, true, args("run", "sync.jsonl", "-o", "sync-out.jsonl", "--route", "sync",
				"--cache", filepath.Join(w.cache, "run.db"), "--report", "sync-report2.json")...)
			if r := e.readReport(e.path("sync-report2.json")); r.Requests.AlreadyDone != n {
				t.Errorf("resume: %d already done, want %d", r.Requests.AlreadyDone, n)
			}
		})

		job("batch", func(t *testing.T) {
			e := w.sub(t)
			if err := (workload.Judge{N: 200, Seed: 72, NoRubric: true, MaxTokens: 64}).WriteFile(e.path("batch.jsonl")); err != nil {
				t.Fatal(err)
			}
			w.run(t, "run batch", w.env, true, args("run", "batch.jsonl", "-o", "batch-out.jsonl", "--route", "batch", "--chunk", "100",
				"--cache", filepath.Join(w.cache, "batch.db"), "--report", "batch-report.json")...)
			e.checkBatchResults(e.path("batch.jsonl"), e.path("batch-out.jsonl"), func(string) string { return "batch" })
			if len(e.journal(e.path("batch-out.jsonl.batch-journal"))) == 0 {
				t.Error("no batch journal")
			}
		})

		job("auto", func(t *testing.T) {
			e := w.sub(t)
			const n = 150
			if err := (workload.Judge{N: n, Seed: 73, NoRubric: true, MaxTokens: 64}).WriteFile(e.path("auto.jsonl")); err != nil {
				t.Fatal(err)
			}
			w.run(t, "run auto", w.env, true, args("run", "auto.jsonl", "-o", "auto-out.jsonl", "--route", "auto", "--prefer", "balanced",
				"--report", "auto-report.json")...)
			if got := e.readResults(e.path("auto-out.jsonl")); len(got) != n {
				t.Errorf("auto: %d results for %d requests", len(got), n)
			}
		})

		job("judge", func(t *testing.T) {
			e := w.sub(t)
			const n = 120
			if err := (workload.Judge{N: n, Seed: 74}).WriteItemsFile(e.path("items.jsonl")); err != nil {
				t.Fatal(err)
			}
			w.run(t, "judge", w.env, true, args("judge", "items.jsonl", "-o", "verdicts.jsonl", "--max-tokens", "1024",
				"--csv", "summary.csv", "--summary", "summary.json", "--report", "judge-report.json")...)
			if lines := bytes.Count(must(os.ReadFile(e.path("verdicts.jsonl"))), []byte("\n")); lines != n {
				t.Errorf("judge: %d verdict rows for %d items", lines, n)
			}
			w.run(t, "judge again", w.env, true, args("judge", "items.jsonl", "-o", "verdicts2.jsonl", "--max-tokens", "1024", "--report", "judge-report2.json")...)
			if rep := e.readReport(e.path("judge-report2.json")); rep.Cache.Hits != n {
				t.Errorf("second judge: %d cache hits, want %d", rep.Cache.Hits, n)
			}
			w.run(t, "cache stats", w.env, true, "cache", "stats", "--json")
		})

		job("proxy", func(t *testing.T) {
			addr := freeAddr(t)
			env := w.withEnv("SLUICE_PROXY_TOKEN=" + k("proxy-token"))
			p := w.start(t, "proxy", env, args("proxy", "--listen", addr, "--state-dir", w.state, "--cache", filepath.Join(w.cache, "proxy.db"))...)
			base := "http://" + addr
			call := func(method, path string, body any) (int, []byte) {
				t.Helper()
				var rd io.Reader
				if body != nil {
					raw, _ := json.Marshal(body)
					rd = bytes.NewReader(raw)
				}
				req, _ := http.NewRequest(method, base+path, rd)
				req.Header.Set("x-api-key", k("proxy-token"))
				req.Header.Set("anthropic-version", api.VersionDefault)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var hdr bytes.Buffer
				resp.Header.Write(&hdr)
				w.keep(fmt.Sprintf("proxy answer to %s %s", method, path), append(hdr.Bytes(), b...))
				return resp.StatusCode, b
			}
			for {
				if p.exited() {
					w.finish(t, "proxy", p)
					t.Fatalf("sluice proxy exited: %d\n%s", p.cmd.ProcessState.ExitCode(), w.redact(p.stderr.String()))
				}
				hreq, _ := http.NewRequest("GET", base+"/healthz", nil)
				hreq.Header.Set("x-api-key", k("proxy-token"))
				if resp, err := http.DefaultClient.Do(hreq); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			msg := func(text string, stream bool) map[string]any {
				return map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
					"messages": []map[string]any{{"role": "user", "content": text}}}
			}
			for i := range 4 {
				if code, b := call("POST", "/v1/messages", msg(fmt.Sprintf("hello, proxy %d", i%2), i == 3)); code != 200 {
					t.Errorf("proxy message %d: %d %s", i, code, w.redact(string(b)))
				}
			}
			code, b := call("POST", "/v1/messages/batches", map[string]any{"requests": []map[string]any{
				{"custom_id": "one", "params": msg("in a batch", false)}, {"custom_id": "two", "params": msg("also in a batch", false)}}})
			var mb struct {
				ID     string `json:"id"`
				Status string `json:"processing_status"`
			}
			if json.Unmarshal(b, &mb); code != 200 || mb.ID == "" {
				t.Errorf("proxy batch create: %d %s", code, w.redact(string(b)))
			}
			for deadline := time.Now().Add(8 * time.Second); mb.ID != "" && mb.Status != "ended" && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				_, b := call("GET", "/v1/messages/batches/"+mb.ID, nil)
				json.Unmarshal(b, &mb)
			}
			if mb.Status == "ended" {
				if code, b := call("GET", "/v1/messages/batches/"+mb.ID+"/results", nil); code != 200 || bytes.Count(b, []byte("\n")) < 1 {
					t.Errorf("proxy batch results: %d %s", code, w.redact(string(b)))
				}
			} else {
				t.Logf("proxy batch %s still %q: its results were not read", mb.ID, mb.Status)
			}
			call("GET", "/v1/messages/batches", nil)
			call("GET", "/metrics", nil)
			call("GET", "/healthz", nil)
			// The proxy's view, found where sluice status finds it.
			if ms, _ := filepath.Glob(filepath.Join(w.home, ".local", "state", "sluice", "running", "*.json")); len(ms) > 0 {
				for _, m := range ms {
					w.fetchView(t, "proxy", m)
				}
			} else {
				t.Error("the proxy registered no view for sluice status")
			}
			// A caller without the token is refused.
			req, _ := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{}`))
			req.Header.Set("x-api-key", k("stranger"))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				w.keep("proxy answer to a caller without the token", b)
			}
			p.cmd.Process.Signal(os.Interrupt)
			if code := w.finish(t, "proxy", p); code != 0 {
				t.Errorf("proxy: exit status %d after SIGINT\n%s", code, w.redact(p.stderr.String()))
			}
		})

		job("fleet", func(t *testing.T) {
			e := w.sub(t)
			rs := redisproc.ForTest(t)
			const jobs, n = 2, 150
			var ps []*proc
			for j := range jobs {
				in := fmt.Sprintf("fleet%d.jsonl", j)
				if err := (workload.Judge{N: n, Seed: uint64(80 + j), NoRubric: true, MaxTokens: 64}).WriteFile(e.path(in)); err != nil {
					t.Fatal(err)
				}
				ps = append(ps, w.start(t, fmt.Sprintf("fleet run %d", j), w.env, args("run", in, "-o", fmt.Sprintf("fleet-out%d.jsonl", j),
					"--route", "sync", "--fleet", rs.URL(), "--fleet-job", "leak-job", "--cap-sonnet", "6")...))
			}
			// Redis while the members hold permits, then after they left.
			e.waitForLines(ps[0], e.path("fleet-out0.jsonl"), 10)
			mid, nmid := redisDump(t, rs.Addr())
			for where, b := range mid {
				w.keep("mid-run "+where, b)
			}
			for j, p := range ps {
				if code := w.finish(t, fmt.Sprintf("fleet run %d", j), p); code != 0 {
					t.Fatalf("fleet run %d: exit status %d\nstderr:\n%s", j, code, w.redact(p.stderr.String()))
				}
				if !strings.Contains(p.stderr.String(), "fleet: joined") {
					t.Errorf("fleet run %d did not join the fleet:\n%s", j, w.redact(p.stderr.String()))
				}
				e.checkExactlyOnce(e.path(fmt.Sprintf("fleet%d.jsonl", j)), e.path(fmt.Sprintf("fleet-out%d.jsonl", j)))
			}
			w.run(t, "fleet status", w.env, true, "fleet", "status", "--fleet", rs.URL())
			w.run(t, "fleet status --json", w.env, true, "fleet", "status", "--fleet", rs.URL(), "--json")
			end, nend := redisDump(t, rs.Addr())
			for where, b := range end {
				w.keep(where, b)
			}
			if nmid == 0 || nend == 0 {
				t.Errorf("Redis held %d keys mid-run and %d at the end: the fleet wrote nothing", nmid, nend)
			}
			t.Logf("Redis: %d keys mid-run, %d at the end", nmid, nend)
			w.walk(t, rs.Dir, nil)
		})

		job("error_paths", func(t *testing.T) {
			e := w.sub(t)
			if err := (workload.Judge{N: 5, Seed: 75, NoRubric: true, MaxTokens: 16}).WriteFile(e.path("few.jsonl")); err != nil {
				t.Fatal(err)
			}
			none := []string{keys.EnvAPIKey + "=", keys.EnvAPIKeys + "=", keys.EnvBatch + "=", keys.EnvLowPrio + "="}
			// Only dead keys: the probe refuses all of them.
			deadEnv := w.withEnv(append(none, keys.EnvAPIKey+"="+k("revoked"), keys.EnvAPIKeys+"="+k("stranger")+","+k("forbidden"))...)
			if p := w.run(t, "run with only dead keys", deadEnv, false, "run", "few.jsonl", "-o", "dead-out.jsonl", "--no-dotenv", "--report", "dead-report.json"); p.cmd.ProcessState.ExitCode() == 0 {
				t.Error("a run with only dead keys exited 0")
			}
			// A key value with a space, and malformed key-file lines holding keys.
			if p := w.run(t, "keys with a bad value", w.withEnv(append(none, keys.EnvAPIKey+"="+k("alpha1")+" trailing")...), false, "keys", "--no-dotenv"); p.cmd.ProcessState.ExitCode() == 0 {
				t.Error("a key value with a space was accepted")
			}
			for i, line := range []string{"bad label=" + k("alpha1"), k("alpha2") + " " + k("beta1"), "ok=" + k("beta1") + " x"} {
				bad := filepath.Join(w.secrDir, fmt.Sprintf("bad%d.txt", i))
				if err := os.WriteFile(bad, []byte("# bad\n"+line+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if p := w.run(t, fmt.Sprintf("keys with bad keys file %d", i), w.withEnv(none...), false, "keys", "--no-dotenv", "--keys-file", bad); p.cmd.ProcessState.ExitCode() == 0 {
					t.Errorf("keys file line %d (%s) was accepted", i, w.redact(line))
				}
			}
			// An API that echoes the key in every error: the probe's 401s and
			// the messages' 400s (errored results) carry the key.
			echo, messages := echoAPI(t, k("alpha1"))
			echoEnv := w.withEnv(append(none, keys.EnvAPIKey+"="+k("alpha1"), keys.EnvBatch+"="+k("beta1"), keys.EnvLowPrio+"="+k("revoked"))...)
			p := w.run(t, "run on the echoing API", echoEnv, false, "run", "few.jsonl", "-o", "echo-out.jsonl",
				"--no-dotenv", "--base-url", echo, "--route", "sync", "--report", "echo-report.json")
			code := p.cmd.ProcessState.ExitCode()
			if messages.Load() == 0 {
				t.Errorf("the echoing API got no message (run exit status %d): the errored-result path was not exercised", code)
			}
			if got := e.readResults(e.path("echo-out.jsonl")); len(got) != 5 {
				t.Errorf("run on the echoing API (exit status %d): %d results for 5 requests", code, len(got))
			} else {
				// The API's echo of the key reached the result, redacted
				// to the key's label and last four characters.
				redacted := "(…" + k("alpha1")[len(k("alpha1"))-4:] + ")"
				for id, r := range got {
					var res api.BatchResult
					if json.Unmarshal(r.Result, &res); res.Type != api.ResultErrored || !bytes.Contains(r.Result, []byte(redacted)) {
						t.Errorf("%s on the echoing API: result %s, want errored with the echoed key shown as %s", id, w.redact(string(r.Result)), redacted)
					}
				}
			}
		})
	})

	// Every file the binary could have written, everywhere it could write.
	// The key sources (.env here, the keys files elsewhere) hold the keys
	// by design: they must be left as they were.
	if b, err := os.ReadFile(e.path(".env")); err != nil || string(b) != dotEnv {
		t.Errorf(".env was changed or removed (%v)", err)
	}
	if b, err := os.ReadFile(keysFile); err != nil || string(b) != keysText {
		t.Errorf("the keys file was changed or removed (%v)", err)
	}
	w.walk(t, w.work, map[string]bool{e.path(".env"): true})
	for _, d := range []string{w.cache, w.state, w.home, w.tmp} {
		w.walk(t, d, nil)
	}
	entries, _ := os.ReadDir(w.secrDir)
	for _, d := range entries {
		if n := d.Name(); n != "keys.txt" && !(strings.HasPrefix(n, "bad") && strings.HasSuffix(n, ".txt")) {
			t.Errorf("%s appeared beside the keys files: it is not searched", n)
		}
	}
	for _, want := range []string{"sync-out.jsonl", "batch-out.jsonl.batch-journal", "verdicts.jsonl",
		"sync-out.jsonl.history", "sync-out.report.html", "sync-again.report.html", "verdicts.jsonl.results.jsonl.history", "verdicts.report.html"} {
		if _, ok := w.blobs["file "+e.path(want)]; !ok {
			t.Errorf("%s was not searched", want)
		}
	}
	var total int64
	for _, where := range w.order {
		total += int64(len(w.blobs[where]))
		w.check(where, w.blobs[where])
	}
	t.Logf("searched %d outputs (%d files, %d bytes of them), %d bytes in all, for %d windows of %d secrets, in %v",
		len(w.order), w.nFiles, w.nBytes, total, len(w.needles), len(w.secrets), time.Since(start).Round(time.Millisecond))
}
