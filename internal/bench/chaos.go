package bench

// `sluice-bench chaos`: one job on the simulator, part sync and part
// batch, with the fault mix on, SIGKILLed at many moments (some aimed at
// batch creates, polls and results downloads) and resumed each time by
// re-running the same command, with a key revoked mid-run and one run that
// meets a full disk. Then it counts what a user would fear: requests lost,
// rows written twice, rows holding another request's answer, requests
// billed more than once, and any key value left anywhere.

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// Chaos is one `sluice-bench chaos` run.
type Chaos struct {
	// Binary is the sluice binary: the simulator and every run are child
	// processes of it.
	Binary string
	// N requests (judge-shaped, Sonnet 4.5); Kills SIGKILLs; Seed seeds the
	// workload, the simulator and the kill schedule.
	N, Kills int
	Seed     uint64
	// TimeScale is the simulator's; Chunk the requests per batch (--chunk).
	TimeScale float64
	Chunk     int
	// NoCache runs without the response cache (it is on by default, so its
	// file is one more place a key could leak to and one more writer the
	// full disk meets).
	NoCache bool
	// NoFullDisk skips the full-disk run.
	NoFullDisk bool
	// Keep keeps the work directory (a tmpfs is copied out first).
	Keep bool
	// Timeout bounds each run that is not killed (the full-disk run, the
	// final runs); one that outlives it is a run that never finishes.
	Timeout time.Duration
	// Log gets one line per event; nil discards them.
	Log io.Writer
}

// The chaos world's fault mix (docs/sim.md, Capacity and faults).
const (
	chaosP529        = 0.03
	chaosP500        = 0.01
	chaosPReset      = 0.005
	chaosPCreateLost = 0.05
)

// chaosRevoked is the label of the key revoked mid-run: high_prio's second
// key, so the organization keeps a live key and its batches go on.
const chaosRevoked = "high_prio_2"

// Kill kinds: when a kill is aimed.
const (
	killStartup  = "startup"          // before the run has written anything
	killRandom   = "random"           // a uniform moment of the run
	killCreate   = "batch create"     // right after a create's intent is journaled
	killPoll     = "batch poll"       // while created batches are being polled
	killDownload = "results download" // while a batch's rows are being written
)

// ChaosKill is one SIGKILL.
type ChaosKill struct {
	Kind string        // what it was aimed at
	At   time.Duration // after the run's start
	// During lists what was going on at the kill (observed from the
	// journal and the results file): batch create, batch poll, results
	// download, sync, startup.
	During []string
	// InFlight is the most Messages calls the simulator held open for
	// sluice in the 250 ms before the kill (sampled every 20 ms).
	InFlight int
	Rows     int // complete result lines after the kill
	// Undurable is the sync answers the simulator had sent whose rows were
	// not durable at the kill: what the kill may make sluice pay again.
	Undurable int64
	// BilledTwice is the simulator's count of bodies answered more than
	// once, just after the kill (the increase over the previous kill's is
	// what this run paid again for earlier kills' answers).
	BilledTwice int64
}

// ChaosDisk is what the full-disk run did.
type ChaosDisk struct {
	Ran      bool
	Why      string // why it did not run, or how it was set up
	Code     int    // the run's exit status
	Stopped  bool   // it exited by itself
	NoSpace  bool   // its stderr says the disk is full
	Rows     int    // complete result lines when it stopped
	InFlight int    // the most calls in flight during the run
	Message  string // the run's last error line
	Resumed  bool   // the space was given back for the runs after it
	// Undurable: sync answers the simulator sent that the run left
	// without a row (in flight when the disk filled).
	Undurable int64
	Wall      time.Duration
	SizeBytes int64 // the filesystem's size during the run
}

// ChaosResult is what a chaos run measured.
type ChaosResult struct {
	Chaos   Chaos
	Wall    time.Duration
	WorkDir string // kept, or "" (removed)
	Kills   []ChaosKill
	// Runs counts every `sluice run` started; Exits their exit statuses
	// (killed runs apart); Panics runs whose stderr shows a Go panic or a
	// fatal runtime error.
	Runs    int
	Exits   map[int]int
	Panics  int
	Disk    ChaosDisk
	Revoked bool // the key was revoked mid-run
	// RevokedAtKill is the kill whose run saw the revocation.
	RevokedAtKill int
	// Final: the runs after the last kill until one exited 0, and
	// whether one did (NeverFinished: one outlived Timeout or none
	// succeeded).
	FinalRuns     int
	FinalWall     time.Duration
	NeverFinished bool
	// Unkilled: sync answers without a row left by runs that stopped by
	// themselves (want 0: a clean stop records what it paid for).
	Unkilled int64
	// VerifyWritten is what a re-run of the completed job wrote (want 0),
	// VerifyCode its exit status.
	VerifyWritten int
	VerifyCode    int

	Rows ChaosRows
	// From the simulator: bodies answered more than once, answers beyond
	// the first, distinct bodies answered.
	BilledTwice, ExtraAnswers, Distinct int64
	// Bound is the sum over the kills (and the full-disk run) of the
	// requests in flight: calls the simulator held open, and answers it
	// had sent whose rows were not yet durable (Undurable, their sum);
	// Ceiling the engine's cap on calls in flight (caps × orgs per event).
	Bound, Undurable, Ceiling int64
	// KeysFound lists every key value (or part or encoding of one) found,
	// as "label (form) in path".
	KeysFound    []string
	FilesScanned int
	BytesScanned int64
	Sim          ChaosSim
	Journal      ChaosJournal
	BatchWaste   ChaosBatchWaste
}

// ChaosRows is the check of the results file against the input.
type ChaosRows struct {
	Rows int
	// Lost: input requests without a succeeded row holding their own
	// answer. Missing: without any row.
	Lost, Missing int
	Duplicated    int // rows beyond the first for one custom_id
	// Foreign: rows whose custom_id is not in the input, or whose answer's
	// tag is another request's (sim.AnswerTag of the row's own params).
	Foreign      int
	NotSucceeded int            // rows of another result type
	ByRoute      map[string]int // succeeded rows by sluice.route
	Torn         int            // bytes after the last newline
	// answeredBy is each good row's route ("sync", "cache", or the batch
	// id for a batch row).
	answeredBy map[string]string
}

// ChaosBatchWaste counts the answers of batches the journal recorded
// (the simulator answers every request of every batch) that no row
// holds: the request's row came from sync, from another batch, or from
// the response cache (which may hold this batch's answer, stored at
// harvest, or a sync answer: not told apart).
type ChaosBatchWaste struct {
	Sync, OtherBatch, Cache int
	// Chunks names the chunks that lost answers to sync or to another
	// batch, with their count and journal history.
	Chunks []string
}

// ChaosSim sums the simulator's counters over the organizations.
type ChaosSim struct {
	Calls, Admitted, Overloaded, ServerErrors, Resets int64
	Denied                                            int64 // 401/403 for the revoked key
	BatchesCreated, CreateLost, BatchRows             int64
	BatchSucceeded, BatchExpired, BatchCanceled       int64
}

// ChaosJournal counts the batch journal's records.
type ChaosJournal struct {
	Intents, Created, Adopted, Harvested, Abandoned, Dropped, Cancels int
	Batches                                                           int // distinct batch ids recorded
}

// Misses names every goal missed, and every sign that the run itself
// went wrong.
func (r ChaosResult) Misses() []string {
	var m []string
	add := func(bad bool, what string) {
		if bad {
			m = append(m, what)
		}
	}
	add(r.Rows.Lost > 0, "requests lost")
	add(r.Rows.Duplicated > 0, "duplicated rows")
	add(r.Rows.Foreign > 0, "foreign rows")
	add(r.BilledTwice > r.Undurable, "more requests billed twice than answers a stop caught before their rows were durable")
	add(r.BatchWaste.Sync+r.BatchWaste.OtherBatch > 0, "batch answers thrown away and paid for again")
	add(len(r.KeysFound) > 0, "keys found")
	add(r.NeverFinished, "a run never finished")
	add(r.Unkilled > 0, "answers without rows from runs that stopped by themselves")
	add(len(r.Kills) < r.Chaos.Kills, "fewer kills than asked (the job finished first)")
	add(r.Panics > 0, "a panic")
	add(r.Rows.Torn > 0, "a torn results file")
	add(r.Disk.Ran && !(r.Disk.NoSpace && r.Disk.Stopped && r.Disk.Code != 0), "the full-disk run did not stop on its full disk with an error")
	add(r.VerifyWritten != 0 || r.VerifyCode != 0, "the re-run of the finished job wrote rows or failed")
	return m
}

// Met reports whether every goal was met.
func (r ChaosResult) Met() bool { return len(r.Misses()) == 0 }

// BilledOK: no more requests billed twice than answers a kill (or the
// full disk) caught before their rows were durable — the only answers a
// stop may make sluice pay for again; a call the simulator held open at a
// kill is never answered, so never billed twice — and no batch's answer
// thrown away for another's.
func (r ChaosResult) BilledOK() bool {
	return r.BilledTwice <= r.Undurable && r.BatchWaste.Sync+r.BatchWaste.OtherBatch == 0
}

// chaosWorld is the state of one chaos run.
type chaosWorld struct {
	c       Chaos
	log     io.Writer
	work    string // the work directory
	simDir  string // the simulator's config (it holds the keys): not scanned
	jobDir  string // the run's directory: results, journal, report, HOME
	logDir  string // every run's stdout and stderr
	in      string // the requests file
	args    []string
	env     []string
	secrets map[string]string // label → value
	sp      *SimProcess
	samp    *inflightSampler
	tmpfs   bool
	runs    int
	res     *ChaosResult

	results tailer
	journal tailer
	js      journalState
	// lines is the results file's complete lines; batchRowAt the time the
	// last batch-route row was seen.
	lines      int
	batchRowAt time.Time
	// Each run: when it started, its first new row.
	runStart, firstRowAt time.Time
	runIntents           int
	runBatchRows         int
	// runOpened: the run's batch path has opened the journal (its "run"
	// record), so it is creating, polling or harvesting.
	runOpened bool
	// syncRows: succeeded sync-route rows in the results file; gap: the
	// simulator's sync answers less syncRows at the last settle; billed:
	// bodies answered more than once then.
	syncRows int
	gap      int64
	billed   int64
}

// chaosTmpfsSize is the tmpfs the job runs on: far more than 100,000
// results and their cache entries need.
const chaosTmpfsSize = "4g"

// Run runs the chaos benchmark.
func (c Chaos) Run(ctx context.Context) (ChaosResult, error) {
	if c.N <= 0 || c.Kills < 0 {
		return ChaosResult{}, fmt.Errorf("bench chaos: --n must be > 0 and --kills ≥ 0")
	}
	if c.TimeScale <= 0 {
		c.TimeScale = 20
	}
	if c.Chunk <= 0 {
		c.Chunk = 250
	}
	if c.Timeout <= 0 {
		c.Timeout = 15 * time.Minute
	}
	res := ChaosResult{Chaos: c, Exits: map[int]int{}, RevokedAtKill: -1}
	w := &chaosWorld{c: c, log: c.Log, res: &res}
	if w.log == nil {
		w.log = io.Discard
	}
	start := time.Now()
	err := w.run(ctx)
	res.Wall = time.Since(start)
	return res, err
}

func (w *chaosWorld) logf(format string, a ...any) {
	fmt.Fprintf(w.log, "chaos: "+format+"\n", a...)
}

func (w *chaosWorld) run(ctx context.Context) (err error) {
	c := w.c
	if w.work, err = os.MkdirTemp("", "sluice-chaos-"); err != nil {
		return err
	}
	defer func() {
		if c.Keep {
			w.res.WorkDir = w.work
			return
		}
		os.RemoveAll(w.work)
	}()
	w.simDir, w.jobDir, w.logDir = filepath.Join(w.work, "sim"), filepath.Join(w.work, "job"), filepath.Join(w.work, "logs")
	for _, d := range []string{w.simDir, w.jobDir, w.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The job runs on a tmpfs of its own, so one run can meet a full disk
	// (the filesystem shrunk to what is used plus a little) and the next
	// find the space back.
	if c.NoFullDisk {
		w.res.Disk.Why = "skipped (--no-full-disk)"
	} else if err := mountTmpfs(w.jobDir, chaosTmpfsSize); err != nil {
		w.res.Disk.Why = "not run: a tmpfs could not be mounted (" + err.Error() + "); it needs root"
	} else {
		w.tmpfs = true
		defer func() {
			if c.Keep {
				if cerr := copyTree(w.jobDir, w.jobDir+"-copy"); cerr != nil {
					w.logf("copying the job directory out of its tmpfs: %v", cerr)
				}
			}
			if uerr := exec.Command("umount", w.jobDir).Run(); uerr != nil {
				w.logf("umount %s: %v", w.jobDir, uerr)
			}
		}()
	}

	// Keys: random values, so a fragment found anywhere is surely one.
	w.secrets = map[string]string{}
	for _, label := range []string{keys.LabelHighPrio, keys.LabelBatch, keys.LabelLowPrio, chaosRevoked} {
		var b [20]byte
		if _, err := crand.Read(b[:]); err != nil {
			return err
		}
		w.secrets[label] = "sk-ant-api03-" + hex.EncodeToString(b[:])
	}
	cfg := chaosSim(c, w.secrets)

	w.in = filepath.Join(w.work, "requests.jsonl")
	if err := (workload.Judge{N: c.N, Seed: c.Seed}).WriteFile(w.in); err != nil {
		return err
	}
	limits := filepath.Join(w.work, "limits.json")
	if err := writeChaosLimits(limits, cfg); err != nil {
		return err
	}
	// The same command every time; keys only in the environment.
	w.args = []string{"run", w.in, "-o", "results.jsonl", "--route", "auto", "--limits-file", limits,
		"--chunk", strconv.Itoa(c.Chunk), "--report", "report.json"}
	if !c.NoCache {
		w.args = append(w.args, "--cache-mode", "on") // ~/.cache/sluice/responses.db under HOME
	}
	home := filepath.Join(w.jobDir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}

	if w.sp, err = StartSim(ctx, c.Binary, cfg, w.simDir); err != nil {
		return err
	}
	defer w.sp.Stop()
	w.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ANTHROPIC_BASE_URL=" + w.sp.Base,
		keys.EnvAPIKey + "=" + w.secrets[keys.LabelHighPrio],
		keys.EnvBatch + "=" + w.secrets[keys.LabelBatch],
		keys.EnvLowPrio + "=" + w.secrets[keys.LabelLowPrio],
		keys.EnvAPIKeys + "=" + chaosRevoked + "=" + w.secrets[chaosRevoked],
	}
	w.results = tailer{path: filepath.Join(w.jobDir, "results.jsonl")}
	w.journal = tailer{path: filepath.Join(w.jobDir, "results.jsonl.batch-journal")}
	w.js = journalState{open: map[string]string{}, batches: map[string]bool{}}
	w.samp = newInflightSampler(w.sp)
	defer w.samp.stop()

	w.logf("work dir %s (job on %s); %d requests, %d kills, seed %d, time scale %g, chunk %d",
		w.work, map[bool]string{true: "a tmpfs of " + chaosTmpfsSize, false: "the work dir's disk"}[w.tmpfs], c.N, c.Kills, c.Seed, c.TimeScale, c.Chunk)
	w.logf("command: sluice %s", strings.Join(w.args, " "))

	if err := w.killLoop(ctx); err != nil {
		return err
	}
	if err := w.finish(ctx); err != nil {
		return err
	}
	return w.measure()
}

// chaosSim is the simulator's world: the three-org preset with the fault
// mix on, a quicker batch queue (so the planner splits the job at every
// size the benchmark runs), random keys and a second key on high_prio.
func chaosSim(c Chaos, secrets map[string]string) sim.Config {
	cfg := sim.Default()
	cfg.Seed = c.Seed
	cfg.TimeScale = c.TimeScale
	cfg.Faults.P529, cfg.Faults.P500, cfg.Faults.PReset, cfg.Faults.PCreateLost = chaosP529, chaosP500, chaosPReset, chaosPCreateLost
	// 250 requests: admitted 22.5 s and processed 10 s after create (API
	// time; about 1.6 s at time scale 20).
	cfg.Batch.AdmissionBase = sim.Duration(10 * time.Second)
	cfg.Batch.AdmissionPerRequest = sim.Duration(50 * time.Millisecond)
	cfg.Batch.ProcessingRate = 25
	orgs := append([]sim.OrgConfig(nil), cfg.Orgs...)
	for i := range orgs {
		ks := []sim.KeyConfig{{Label: orgs[i].Name, Key: secrets[orgs[i].Name]}}
		if orgs[i].Name == keys.LabelHighPrio {
			ks = append(ks, sim.KeyConfig{Label: chaosRevoked, Key: secrets[chaosRevoked]})
		}
		orgs[i].Keys = ks
	}
	cfg.Orgs = orgs
	return cfg
}

// writeChaosLimits writes the planner's view of cfg (plan.FromModel: limits
// and rates × K, delays ÷ K, the batch path's polls on the simulator's
// clock) as a --limits-file, and checks it reads back.
func writeChaosLimits(path string, cfg sim.Config) error {
	w := plan.FromModel(cfg.Model(), nil)
	type latency struct {
		TTFT         sim.Duration `json:"ttft"`
		TokensPerSec float64      `json:"tokens_per_sec"`
		Sigma        float64      `json:"sigma"`
	}
	type batchModel struct {
		AdmissionBase       sim.Duration `json:"admission_base"`
		AdmissionPerRequest sim.Duration `json:"admission_per_request"`
		ProcessingRate      float64      `json:"processing_rate"`
		StarveAbove         int          `json:"starve_above"`
		StarveFor           sim.Duration `json:"starve_for"`
		Expiry              sim.Duration `json:"expiry"`
	}
	type org struct {
		Name          string                   `json:"name"`
		Limits        map[api.Pool]plan.Limits `json:"limits"`
		DefaultLimits *plan.Limits             `json:"default_limits,omitempty"`
		BatchQueueCap int                      `json:"batch_queue_cap"`
		Batch         *batchModel              `json:"batch,omitempty"`
	}
	lat := func(l plan.Latency) latency {
		return latency{sim.Duration(l.TTFT), l.TokensPerSec, l.Sigma}
	}
	bm := func(b plan.BatchModel) *batchModel {
		return &batchModel{sim.Duration(b.AdmissionBase), sim.Duration(b.AdmissionPerRequest), b.ProcessingRate,
			b.StarveAbove, sim.Duration(b.StarveFor), sim.Duration(b.Expiry)}
	}
	file := struct {
		Name           string               `json:"name"`
		Orgs           []org                `json:"orgs"`
		BucketWindow   sim.Duration         `json:"bucket_window"`
		Latency        map[api.Pool]latency `json:"latency"`
		DefaultLatency latency              `json:"default_latency"`
		Output         map[string]int       `json:"output"`
		Batch          *batchModel          `json:"batch"`
		BatchOverhead  sim.Duration         `json:"batch_overhead"`
		PollMin        sim.Duration         `json:"poll_min"`
		PollMax        sim.Duration         `json:"poll_max"`
		Caps           map[api.Family]int   `json:"caps"`
	}{
		Name: fmt.Sprintf("chaos simulator (time scale %g)", cfg.TimeScale), BucketWindow: sim.Duration(w.BucketWindow),
		Latency: map[api.Pool]latency{}, DefaultLatency: lat(w.DefaultLatency),
		Output: map[string]int{"min": w.Output.Min, "max": w.Output.Max}, Batch: bm(w.Batch),
		BatchOverhead: sim.Duration(w.BatchOverhead), PollMin: sim.Duration(w.Poll.Min), PollMax: sim.Duration(w.Poll.Max),
		Caps: w.Caps,
	}
	for p, l := range w.Latency {
		file.Latency[p] = lat(l)
	}
	for _, o := range w.Orgs {
		fo := org{Name: o.Name, Limits: o.Limits, DefaultLimits: o.DefaultLimits, BatchQueueCap: o.BatchQueueCap}
		if o.Batch != nil {
			fo.Batch = bm(*o.Batch)
		}
		file.Orgs = append(file.Orgs, fo)
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return err
	}
	if _, err := plan.ReadWorld(bytes.NewReader(b)); err != nil {
		return fmt.Errorf("bench chaos: the limits file does not read back: %w", err)
	}
	return os.WriteFile(path, b, 0o644)
}

// chaosProc is one `sluice run`.
type chaosProc struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	code    int
	stderr  string // path
}

func (p *chaosProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start starts the command once more.
func (w *chaosWorld) start(name string) (*chaosProc, error) {
	w.runs++
	w.res.Runs++
	base := filepath.Join(w.logDir, fmt.Sprintf("run-%03d-%s", w.runs, strings.ReplaceAll(name, " ", "-")))
	stdout, err := os.Create(base + ".stdout")
	if err != nil {
		return nil, err
	}
	stderr, err := os.Create(base + ".stderr")
	if err != nil {
		stdout.Close()
		return nil, err
	}
	cmd := exec.Command(w.c.Binary, w.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = w.jobDir, w.env, stdout, stderr
	if err := cmd.Start(); err != nil {
		stdout.Close()
		stderr.Close()
		return nil, err
	}
	p := &chaosProc{name: name, cmd: cmd, started: time.Now(), done: make(chan struct{}), stderr: base + ".stderr"}
	w.runStart, w.firstRowAt = p.started, time.Time{}
	w.runIntents, w.runBatchRows, w.runOpened = 0, 0, false
	go func() {
		cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		stdout.Close()
		stderr.Close()
		close(p.done)
	}()
	return p, nil
}

// kill SIGKILLs p and waits for it.
func (p *chaosProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// ended records the exit of a run that was not killed.
func (w *chaosWorld) ended(p *chaosProc) {
	w.res.Exits[p.code]++
	if b, err := os.ReadFile(p.stderr); err == nil && (bytes.Contains(b, []byte("panic:")) || bytes.Contains(b, []byte("fatal error:"))) {
		w.res.Panics++
		w.logf("%s: a panic or fatal error in %s", p.name, p.stderr)
	}
}

// watch reads what the run appended to the journal and the results file.
func (w *chaosWorld) watch() {
	now := time.Now()
	lines, shrunk := w.results.next()
	if shrunk {
		// Rewritten without rows to drive again: count it afresh.
		w.lines, w.syncRows = 0, 0
		w.results.off = 0
		old, _ := w.results.next()
		for _, l := range old {
			w.lines++
			if bytes.Contains(l, []byte(`"route":"sync"`)) && bytes.Contains(l, []byte(`"type":"succeeded"`)) {
				w.syncRows++
			}
		}
	}
	for _, l := range lines {
		w.lines++
		if bytes.Contains(l, []byte(`"route":"sync"`)) && bytes.Contains(l, []byte(`"type":"succeeded"`)) {
			w.syncRows++
		}
		if w.firstRowAt.IsZero() {
			w.firstRowAt = now
		}
		if bytes.Contains(l, []byte(`"route":"batch"`)) {
			w.batchRowAt = now
			w.runBatchRows++
		}
	}
	jl, _ := w.journal.next()
	for _, l := range jl {
		switch w.js.add(l) {
		case "intent":
			w.runIntents++
		case "run":
			w.runOpened = true
		}
	}
}

// during is what was going on at this instant.
func (w *chaosWorld) during(now time.Time) []string {
	var d []string
	if w.runOpened && w.js.state("intent") > 0 {
		d = append(d, killCreate)
	}
	if w.runBatchRows > 0 && now.Sub(w.batchRowAt) < 30*time.Millisecond {
		d = append(d, killDownload)
	}
	if w.runOpened && w.js.state("created")+w.js.state("cancel") > 0 {
		d = append(d, killPoll)
	}
	if w.firstRowAt.IsZero() && w.runIntents == 0 {
		d = append(d, killStartup)
	} else if !w.firstRowAt.IsZero() {
		d = append(d, "sync")
	}
	return d
}

// killLoop runs the command Kills times, killing each run with SIGKILL.
func (w *chaosWorld) killLoop(ctx context.Context) error {
	c := w.c
	rng := rand.New(rand.NewPCG(c.Seed, 0xc4a05))
	kinds := chaosSchedule(c.Kills, rng)
	revokeAt := c.Kills/5 + rng.IntN(max(1, c.Kills*3/10))
	diskAt := c.Kills*2/5 + rng.IntN(max(1, c.Kills/5))
	startup := 500 * time.Millisecond // until a run writes its first row
	attempts := 0
	for k := 0; k < c.Kills; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if attempts++; attempts > 3*c.Kills+20 {
			return fmt.Errorf("bench chaos: %d runs for %d kills: the runs keep exiting by themselves", attempts, k)
		}
		if k == diskAt && w.tmpfs && !w.res.Disk.Ran {
			if err := w.fullDisk(); err != nil {
				return err
			}
		}
		// Pace the kills by the job's progress, so they spread over all of
		// it and the job outlasts them: a random kill comes once the run
		// has written a random number of rows, up to twice an even share
		// of what is left (a share: left ÷ (kills to go + 1), so the last
		// run has some too) and never three quarters of it; an aimed kill
		// whose moment does not come falls back to that most. Times would
		// not do: a run's startup (survey, scan, key probes) and ramp vary
		// too much.
		rowsBefore := w.lines
		left := max(0, c.N-w.lines)
		share := max(1, left/(c.Kills-k+1))
		kind := kinds[k]
		most := rowsBefore + max(1, min(2*share, left*3/4))
		target := rowsBefore + 1 + int(rng.Float64()*float64(most-rowsBefore-1))
		early := time.Duration(rng.Float64() * float64(startup))
		revoke := -1
		if k == revokeAt && !w.res.Revoked {
			revoke = rowsBefore + 1 + int(rng.Float64()*float64(share))
		}
		w.watch()
		p, err := w.start(fmt.Sprintf("kill-%02d", k+1))
		if err != nil {
			return err
		}
		var fire time.Duration = -1
		for {
			w.watch()
			el := time.Since(p.started)
			// A run that writes nothing for long (its requests held by
			// batches being reconciled) is killed at a moment of its own.
			stalled := el > 3*startup+30*time.Second
			if revoke >= 0 && (w.lines >= revoke || stalled) {
				if err := w.revoke(); err != nil {
					p.kill()
					return err
				}
				w.res.RevokedAtKill = k + 1
				revoke = -1
			}
			if p.exited() {
				break
			}
			if fire < 0 {
				switch kind {
				case killCreate:
					if w.runIntents > 0 && w.js.state("intent") > 0 {
						fire = el + time.Duration(rng.Float64()*float64(8*time.Millisecond))
					}
				case killDownload:
					if w.runBatchRows > 0 && time.Since(w.batchRowAt) < 5*time.Millisecond {
						fire = el + time.Duration(rng.Float64()*float64(20*time.Millisecond))
					}
				case killPoll:
					if w.runOpened && !w.firstRowAt.IsZero() && w.js.state("created") > 0 && w.js.state("intent") == 0 && time.Since(w.batchRowAt) > 50*time.Millisecond {
						fire = el + 20*time.Millisecond + time.Duration(rng.Float64()*float64(400*time.Millisecond))
					}
				case killStartup:
					fire = early
				case killRandom:
					if w.lines >= target {
						fire = el
					}
				}
				if fire < 0 && (w.lines >= most || stalled) {
					fire = el
				}
			}
			if fire >= 0 && el >= fire {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if p.exited() {
			w.ended(p)
			w.watch()
			w.res.Unkilled += w.settle()
			if revoke >= 0 {
				// The run ended before its revocation: revoke now, so the
				// next run starts with the key refused.
				if err := w.revoke(); err != nil {
					return err
				}
				w.res.RevokedAtKill = k + 1
			}
			w.logf("%s exited by itself with status %d after %.2f s (%d rows)", p.name, p.code, time.Since(p.started).Seconds(), w.lines)
			if p.code == 0 {
				w.logf("the job finished after %d of %d kills: the kills were paced too slowly", k, c.Kills)
				return nil
			}
			continue
		}
		now := time.Now()
		w.watch()
		during := w.during(now)
		inflight := w.samp.maxSince(now.Add(-250 * time.Millisecond))
		at := now.Sub(p.started)
		first := w.firstRowAt
		if revoke >= 0 {
			// The kill came before the revocation's moment: revoke now,
			// while the run still lives.
			if err := w.revoke(); err != nil {
				p.kill()
				return err
			}
			w.res.RevokedAtKill = k + 1
		}
		p.kill()
		w.watch()
		kl := ChaosKill{Kind: kind, At: at, During: during, InFlight: inflight, Rows: w.lines, Undurable: w.settle()}
		kl.BilledTwice = w.billed
		w.res.Kills = append(w.res.Kills, kl)
		k++
		w.logf("kill %d/%d (%s) at %.2f s during [%s]: %d rows, %d calls open, %d answers not yet durable; billed twice so far %d",
			k, c.Kills, kind, at.Seconds(), strings.Join(during, ", "), w.lines, inflight, kl.Undurable, kl.BilledTwice)
		// Learn how long a run takes to write its first row.
		if !first.IsZero() {
			startup = (startup + first.Sub(p.started)) / 2
		}
	}
	return nil
}

// settle returns the answers the simulator sent on the sync route since
// the last call, less the sync rows that became durable: the answers a
// stop left without a row. Only a stop may leave any; a request answered
// twice while its row was durable would show here too.
func (w *chaosWorld) settle() int64 {
	time.Sleep(100 * time.Millisecond) // let the simulator see the connections go
	st, err := w.sp.Stats()
	if err != nil {
		return 0
	}
	var batchRows int64
	for _, o := range st.Orgs {
		batchRows += o.Batches.Succeeded
	}
	w.billed = st.Bodies.AnsweredMoreThanOnce
	gap := st.Bodies.DistinctAnswered + st.Bodies.ExtraAnswers - batchRows - int64(w.syncRows)
	d := gap - w.gap
	w.gap = gap
	return d
}

// chaosSchedule is the kills' kinds in a seeded order: a fifth each aimed
// at batch creates, polls and results downloads, a tenth at startup, the
// rest at random moments.
func chaosSchedule(n int, rng *rand.Rand) []string {
	var ks []string
	for _, k := range []struct {
		kind  string
		share float64
	}{{killCreate, 0.2}, {killPoll, 0.2}, {killDownload, 0.2}, {killStartup, 0.1}} {
		for range int(float64(n)*k.share + 0.5) {
			ks = append(ks, k.kind)
		}
	}
	for len(ks) < n {
		ks = append(ks, killRandom)
	}
	ks = ks[:n]
	rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	return ks
}

// revoke revokes chaosRevoked on the simulator, for good.
func (w *chaosWorld) revoke() error {
	body := fmt.Sprintf(`{"label":%q,"status":%q}`, chaosRevoked, sim.KeyRevoked)
	resp, err := http.Post(w.sp.Base+"/_sim/keys", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("bench chaos: revoking %s: HTTP %d: %s", chaosRevoked, resp.StatusCode, b)
	}
	w.res.Revoked = true
	w.logf("key %s revoked", chaosRevoked)
	return nil
}

// chaosDiskRoom is what the full-disk run finds free: a few hundred rows
// and their cache entries.
const chaosDiskRoom = 512 << 10

// fullDisk runs the command once on a filesystem shrunk to what is used
// plus chaosDiskRoom, waits for it to stop by itself, and gives the space
// back.
func (w *chaosWorld) fullDisk() error {
	d := &w.res.Disk
	used, err := dfUsed(w.jobDir)
	if err != nil {
		d.Why = "not run: " + err.Error()
		return nil
	}
	size := (used + chaosDiskRoom + 4095) / 4096 * 4096
	if err := exec.Command("mount", "-o", "remount,size="+strconv.FormatInt(size, 10), w.jobDir).Run(); err != nil {
		d.Why = "not run: shrinking the tmpfs: " + err.Error()
		return nil
	}
	d.Ran, d.SizeBytes = true, size
	d.Why = fmt.Sprintf("tmpfs shrunk to %d KiB (%d KiB used + %d KiB)", size>>10, used>>10, chaosDiskRoom>>10)
	w.watch()
	p, err := w.start("full-disk")
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		d.Stopped = true
	case <-time.After(w.c.Timeout):
		p.kill()
	}
	d.Wall = time.Since(p.started)
	d.InFlight = w.samp.maxSince(p.started)
	d.Code = p.code
	if d.Stopped {
		w.ended(p)
	}
	w.watch()
	d.Rows = w.lines
	d.Undurable = w.settle()
	if b, err := os.ReadFile(p.stderr); err == nil {
		d.NoSpace = bytes.Contains(b, []byte("no space left on device"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], "no space") || strings.Contains(lines[i], "rror") {
				d.Message = lines[i]
				break
			}
		}
	}
	if err := exec.Command("mount", "-o", "remount,size="+chaosTmpfsSize, w.jobDir).Run(); err != nil {
		return fmt.Errorf("bench chaos: giving the space back: %w", err)
	}
	d.Resumed = true
	w.logf("full disk: %s; the run stopped by itself: %v, status %d, after %.2f s, %d rows; %q",
		d.Why, d.Stopped, d.Code, d.Wall.Seconds(), d.Rows, d.Message)
	return nil
}

// finish re-runs the command until a run exits 0, then once more (a
// completed job's re-run must write nothing).
func (w *chaosWorld) finish(ctx context.Context) error {
	start := time.Now()
	ok := false
	for attempt := 0; attempt < 10 && !ok; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, err := w.start("final")
		if err != nil {
			return err
		}
		w.res.FinalRuns++
		select {
		case <-p.done:
			w.ended(p)
		case <-time.After(w.c.Timeout):
			p.kill()
			w.res.NeverFinished = true
			w.logf("a final run did not finish within %v", w.c.Timeout)
			return nil
		case <-ctx.Done():
			p.kill()
			return ctx.Err()
		}
		w.watch()
		w.res.Unkilled += w.settle()
		w.logf("final run %d: status %d after %.1f s (%d rows)", attempt+1, p.code, time.Since(p.started).Seconds(), w.lines)
		ok = p.code == 0
	}
	w.res.FinalWall = time.Since(start)
	if !ok {
		w.res.NeverFinished = true
		return nil
	}
	p, err := w.start("verify")
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		w.ended(p)
	case <-time.After(w.c.Timeout):
		p.kill()
	}
	w.res.VerifyCode = p.code
	w.watch()
	w.res.Unkilled += w.settle()
	var rep struct {
		Requests struct {
			Written int `json:"written"`
		} `json:"requests"`
	}
	if b, err := os.ReadFile(filepath.Join(w.jobDir, "report.json")); err == nil && json.Unmarshal(b, &rep) == nil {
		w.res.VerifyWritten = rep.Requests.Written
	}
	return nil
}

// measure checks the results, reads the simulator's counts and searches
// everything for the keys.
func (w *chaosWorld) measure() error {
	r := w.res
	var err error
	if r.Rows, err = checkChaosResults(w.in, w.results.path); err != nil {
		return err
	}
	st, err := w.sp.Stats()
	if err != nil {
		return err
	}
	r.BilledTwice, r.ExtraAnswers, r.Distinct = st.Bodies.AnsweredMoreThanOnce, st.Bodies.ExtraAnswers, st.Bodies.DistinctAnswered
	for _, o := range st.Orgs {
		for _, p := range o.Pools {
			r.Sim.Admitted += p.Admitted
			r.Sim.Overloaded += p.Overloaded
			r.Sim.ServerErrors += p.ServerErrors
			r.Sim.Resets += p.Resets
		}
		for label, k := range o.Keys {
			r.Sim.Calls += k.Calls
			if label == chaosRevoked {
				r.Sim.Denied += k.Denied
			}
		}
		b := o.Batches
		r.Sim.BatchesCreated += b.Created
		r.Sim.CreateLost += b.CreateLost
		r.Sim.BatchRows += b.Requests
		r.Sim.BatchSucceeded += b.Succeeded
		r.Sim.BatchExpired += b.Expired
		r.Sim.BatchCanceled += b.Canceled
	}
	for _, k := range r.Kills {
		r.Bound += int64(k.InFlight) + k.Undurable
		r.Undurable += k.Undurable
	}
	events := int64(len(r.Kills))
	if r.Disk.Ran {
		r.Bound += int64(r.Disk.InFlight) + r.Disk.Undurable
		r.Undurable += r.Disk.Undurable
		events++
	}
	r.Ceiling = events * int64(dispatch.DefaultCaps[api.FamilySonnet]*len(sim.Default().Orgs))
	r.Journal = w.js.counts()
	if r.BatchWaste, err = batchWaste(w.journal.path, r.Rows.answeredBy); err != nil {
		return err
	}
	r.KeysFound, r.FilesScanned, r.BytesScanned, err = scanForKeys(w.work, map[string]bool{w.simDir: true}, w.secrets)
	return err
}

// tailer reads the complete lines appended to a file since the last call.
type tailer struct {
	path string
	off  int64
}

// next returns the new complete lines; shrunk reports that the file is
// now shorter than what was read (rewritten).
func (t *tailer) next() (lines [][]byte, shrunk bool) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false
	}
	if fi.Size() < t.off {
		return nil, true
	}
	if fi.Size() == t.off {
		return nil, false
	}
	buf := make([]byte, fi.Size()-t.off)
	n, _ := f.ReadAt(buf, t.off)
	buf = buf[:n]
	last := bytes.LastIndexByte(buf, '\n')
	if last < 0 {
		return nil, false
	}
	t.off += int64(last + 1)
	for l := range bytes.Lines(buf[:last+1]) {
		lines = append(lines, l)
	}
	return lines, false
}

// journalState follows the batch journal's chunks.
type journalState struct {
	open    map[string]string // chunk → intent, created or cancel
	batches map[string]bool
	n       map[string]int // records by op
	adopted int
}

// add applies one journal line and returns its op.
func (j *journalState) add(line []byte) string {
	var r struct {
		Op      string `json:"op"`
		Chunk   string `json:"chunk"`
		Batch   string `json:"batch"`
		Adopted bool   `json:"adopted"`
	}
	if json.Unmarshal(line, &r) != nil {
		return ""
	}
	if j.n == nil {
		j.n = map[string]int{}
	}
	j.n[r.Op]++
	switch r.Op {
	case "intent":
		j.open[r.Chunk] = "intent"
	case "created":
		j.open[r.Chunk] = "created"
		j.batches[r.Batch] = true
		if r.Adopted {
			j.adopted++
		}
	case "cancel":
		j.open[r.Chunk] = "cancel"
	case "harvested", "abandoned", "dropped":
		delete(j.open, r.Chunk)
	}
	return r.Op
}

// state counts the open chunks in state s.
func (j *journalState) state(s string) int {
	n := 0
	for _, v := range j.open {
		if v == s {
			n++
		}
	}
	return n
}

func (j *journalState) counts() ChaosJournal {
	return ChaosJournal{Intents: j.n["intent"], Created: j.n["created"], Adopted: j.adopted, Harvested: j.n["harvested"],
		Abandoned: j.n["abandoned"], Dropped: j.n["dropped"], Cancels: j.n["cancel"], Batches: len(j.batches)}
}

// inflightSampler samples the simulator's Messages calls in flight.
type inflightSampler struct {
	mu      sync.Mutex
	samples []inflightSample
	quit    chan struct{}
	done    chan struct{}
}

type inflightSample struct {
	at time.Time
	n  int
}

func newInflightSampler(sp *SimProcess) *inflightSampler {
	s := &inflightSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
			st, err := sp.Stats()
			if err != nil {
				continue
			}
			n := 0
			for _, o := range st.Orgs {
				for _, p := range o.Pools {
					n += p.InFlight
				}
			}
			now := time.Now()
			s.mu.Lock()
			s.samples = append(s.samples, inflightSample{now, n})
			// Keep the last few minutes (the full-disk run's peak).
			if len(s.samples) > 20000 {
				s.samples = append([]inflightSample(nil), s.samples[10000:]...)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// maxSince is the most calls in flight sampled since t.
func (s *inflightSampler) maxSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for i := len(s.samples) - 1; i >= 0 && !s.samples[i].at.Before(t); i-- {
		m = max(m, s.samples[i].n)
	}
	return m
}

func (s *inflightSampler) stop() {
	close(s.quit)
	<-s.done
}

// checkChaosResults checks the results file at out against the requests
// file at in.
func checkChaosResults(in, out string) (ChaosRows, error) {
	rc := ChaosRows{ByRoute: map[string]int{}, answeredBy: map[string]string{}}
	tags := map[string]string{}
	f, err := os.Open(in)
	if err != nil {
		return rc, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var r struct {
				CustomID string          `json:"custom_id"`
				Params   json.RawMessage `json:"params"`
			}
			if jerr := json.Unmarshal(line, &r); jerr != nil {
				f.Close()
				return rc, fmt.Errorf("bench chaos: %s: %w", in, jerr)
			}
			tags[r.CustomID] = sim.AnswerTag(r.Params)
		}
		if err != nil {
			break
		}
	}
	f.Close()

	b, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rc, err
	}
	last := bytes.LastIndexByte(b, '\n')
	rc.Torn = len(b) - (last + 1)
	seen := map[string]int{}
	good := map[string]bool{}
	for line := range bytes.Lines(b[:last+1]) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rc.Rows++
		var r struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type    string `json:"type"`
				Message *struct {
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"message"`
			} `json:"result"`
			Sluice *struct {
				Route   string `json:"route"`
				BatchID string `json:"batch_id"`
			} `json:"sluice"`
		}
		if json.Unmarshal(line, &r) != nil {
			rc.Foreign++ // not a result row at all
			continue
		}
		seen[r.CustomID]++
		if seen[r.CustomID] > 1 {
			rc.Duplicated++
		}
		tag, ours := tags[r.CustomID]
		if !ours {
			rc.Foreign++
			continue
		}
		if r.Result.Type != api.ResultSucceeded {
			rc.NotSucceeded++
			continue
		}
		text := ""
		if r.Result.Message != nil && len(r.Result.Message.Content) > 0 {
			text = r.Result.Message.Content[0].Text
		}
		if !strings.HasPrefix(text, tag) {
			rc.Foreign++
			continue
		}
		good[r.CustomID] = true
		route, by := "?", "?"
		if r.Sluice != nil && r.Sluice.Route != "" {
			route, by = r.Sluice.Route, r.Sluice.Route
			if r.Sluice.BatchID != "" {
				by = r.Sluice.BatchID
			}
		}
		rc.ByRoute[route]++
		rc.answeredBy[r.CustomID] = by
	}
	for id := range tags {
		if !good[id] {
			rc.Lost++
		}
		if seen[id] == 0 {
			rc.Missing++
		}
	}
	return rc, nil
}

// batchWaste reads the journal at path and counts, for every chunk with a
// batch, the requests whose row did not come from that batch.
func batchWaste(path string, answeredBy map[string]string) (ChaosBatchWaste, error) {
	var bw ChaosBatchWaste
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return bw, nil
	}
	if err != nil {
		return bw, err
	}
	type chunk struct {
		ids     []string
		batch   string
		history []string
	}
	chunks := map[string]*chunk{}
	var order []string
	for line := range bytes.Lines(b[:bytes.LastIndexByte(b, '\n')+1]) {
		var r struct {
			Op, Chunk, Batch, Why, At string
			IDs                       []string
			Adopted                   bool
		}
		if json.Unmarshal(line, &r) != nil || r.Chunk == "" {
			continue
		}
		c := chunks[r.Chunk]
		if c == nil {
			c = &chunk{}
			chunks[r.Chunk] = c
			order = append(order, r.Chunk)
		}
		if r.Op == "intent" {
			c.ids = r.IDs
		}
		if r.Op == "created" {
			c.batch = r.Batch
		}
		h := r.Op + "@" + r.At
		if r.Adopted {
			h += " (adopted)"
		}
		if r.Why != "" {
			h += " (" + r.Why + ")"
		}
		c.history = append(c.history, h)
	}
	for _, id := range order {
		c := chunks[id]
		if c.batch == "" {
			continue
		}
		lost := 0
		for _, rid := range c.ids {
			switch by := answeredBy[rid]; by {
			case c.batch:
			case "cache":
				bw.Cache++
			case "sync", "?", "":
				bw.Sync++
				lost++
			default:
				bw.OtherBatch++
				lost++
			}
		}
		if lost > 0 {
			bw.Chunks = append(bw.Chunks, fmt.Sprintf("chunk %s, batch %s: %d of %d answers unused; %s",
				id, c.batch, lost, len(c.ids), strings.Join(c.history, ", ")))
		}
	}
	return bw, nil
}

// keyNeedles are the forms of each key searched for: the value, its
// first 20 characters, its hex and its base64 forms (standard and URL, at
// the three byte alignments: the characters that do not depend on the
// neighbouring bytes).
func keyNeedles(secrets map[string]string) map[string][]byte {
	n := map[string][]byte{}
	for label, v := range secrets {
		n[label+" (value)"] = []byte(v)
		n[label+" (first 20 characters)"] = []byte(v[:min(20, len(v))])
		n[label+" (hex)"] = []byte(hex.EncodeToString([]byte(v)))
		for shift := range 3 {
			b := append(make([]byte, shift), v...)
			full := len(b) / 3 * 4
			skip := []int{0, 2, 3}[shift]
			for form, enc := range map[string]*base64.Encoding{"base64": base64.StdEncoding, "base64url": base64.URLEncoding} {
				n[fmt.Sprintf("%s (%s, offset %d)", label, form, shift)] = []byte(enc.EncodeToString(b)[skip:full])
			}
		}
	}
	return n
}

// scanForKeys searches every file under root (but the directories in
// skip) for every needle of the secrets, and returns "form in path" for
// each hit.
func scanForKeys(root string, skip map[string]bool, secrets map[string]string) (found []string, files int, scanned int64, err error) {
	needles := keyNeedles(secrets)
	longest := 0
	for _, nd := range needles {
		longest = max(longest, len(nd))
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[path] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		hits := map[string]bool{}
		buf := make([]byte, 8<<20)
		carry := 0
		for {
			n, rerr := io.ReadFull(f, buf[carry:])
			m := carry + n
			scanned += int64(n)
			for name, nd := range needles {
				if !hits[name] && bytes.Contains(buf[:m], nd) {
					hits[name] = true
				}
			}
			if rerr != nil {
				break
			}
			// Keep the tail, so a needle across two reads is found.
			carry = min(longest-1, m)
			copy(buf, buf[m-carry:m])
		}
		rel, _ := filepath.Rel(root, path)
		for name := range hits {
			found = append(found, name+" in "+rel)
		}
		return nil
	})
	sort.Strings(found)
	return found, files, scanned, err
}

// mountTmpfs mounts a tmpfs of size on dir.
func mountTmpfs(dir, size string) error {
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// dfUsed is the bytes used on the filesystem of dir (POSIX df).
func dfUsed(dir string) (int64, error) {
	out, err := exec.Command("df", "-P", "-k", dir).Output()
	if err != nil {
		return 0, fmt.Errorf("df: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 3 {
		return 0, fmt.Errorf("df: cannot read %q", out)
	}
	kb, err := strconv.ParseInt(f[2], 10, 64)
	return kb << 10, err
}

// copyTree copies the regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// Print writes the table BENCHMARKS.md quotes, then the details.
func (r ChaosResult) Print(w io.Writer) {
	c := r.Chaos
	ok := func(b bool) string {
		if b {
			return "yes"
		}
		return "**no**"
	}
	keysFound := "none"
	if len(r.KeysFound) > 0 {
		keysFound = strings.Join(r.KeysFound, "; ")
	}
	fmt.Fprintf(w, "\n%d requests, %d of %d kills, seed %d, time scale %g, chunk %d, wall %s\n\n",
		c.N, len(r.Kills), c.Kills, c.Seed, c.TimeScale, c.Chunk, r.Wall.Round(100*time.Millisecond))
	fmt.Fprintln(w, "| metric | value | goal | ok |")
	fmt.Fprintln(w, "|---|---:|---|:-:|")
	fmt.Fprintf(w, "| requests lost (no succeeded row with its own answer) | %d | 0 | %s |\n", r.Rows.Lost, ok(r.Rows.Lost == 0))
	fmt.Fprintf(w, "| duplicated rows | %d | 0 | %s |\n", r.Rows.Duplicated, ok(r.Rows.Duplicated == 0))
	fmt.Fprintf(w, "| foreign rows | %d | 0 | %s |\n", r.Rows.Foreign, ok(r.Rows.Foreign == 0))
	fmt.Fprintf(w, "| requests billed more than once | %d | ≤ %d answered but not yet durable at the %d kills%s (of %d in flight) | %s |\n",
		r.BilledTwice, r.Undurable, len(r.Kills), map[bool]string{true: " and the full disk", false: ""}[r.Disk.Ran], r.Bound, ok(r.BilledOK()))
	fmt.Fprintf(w, "| keys found anywhere (%d files, %.0f MB) | %s | none | %s |\n", r.FilesScanned, float64(r.BytesScanned)/1e6, keysFound, ok(len(r.KeysFound) == 0))
	fmt.Fprintf(w, "| wall time | %s (final runs %s) | — | — |\n", r.Wall.Round(100*time.Millisecond), r.FinalWall.Round(100*time.Millisecond))
	fmt.Fprintln(w)

	during := map[string]int{}
	kinds := map[string]int{}
	for _, k := range r.Kills {
		kinds[k.Kind]++
		for _, d := range k.During {
			during[d]++
		}
	}
	fmt.Fprintf(w, "- kills aimed at: %s\n", countsLine(kinds))
	fmt.Fprintf(w, "- kills that landed during (a kill may land in several): %s\n", countsLine(during))
	exits := map[string]int{}
	for code, n := range r.Exits {
		exits[fmt.Sprintf("status %d", code)] = n
	}
	fmt.Fprintf(w, "- runs: %d (%d killed; the others exited with %s); %d final run(s); a re-run of the done job wrote %d rows (status %d); panics: %d\n",
		r.Runs, len(r.Kills), countsLine(exits), r.FinalRuns, r.VerifyWritten, r.VerifyCode, r.Panics)
	if r.NeverFinished {
		fmt.Fprintln(w, "- **a run never finished** (or no run exited 0)")
	}
	if r.Disk.Ran {
		fmt.Fprintf(w, "- full disk: %s; the run stopped by itself: %v (status %d, %.1f s, %d in flight, \"no space left on device\" on stderr: %v); resumed after the space returned: %v\n",
			r.Disk.Why, r.Disk.Stopped, r.Disk.Code, r.Disk.Wall.Seconds(), r.Disk.InFlight, r.Disk.NoSpace, r.Disk.Resumed)
		if r.Disk.Message != "" {
			fmt.Fprintf(w, "  last error line: %s\n", r.Disk.Message)
		}
	} else {
		fmt.Fprintf(w, "- full disk: %s\n", r.Disk.Why)
	}
	if r.Revoked {
		fmt.Fprintf(w, "- key %s revoked for good during the run of kill %d; the simulator refused it %d times\n", chaosRevoked, r.RevokedAtKill, r.Sim.Denied)
	}
	routes := map[string]int{}
	for k, v := range r.Rows.ByRoute {
		routes[k] = v
	}
	fmt.Fprintf(w, "- rows: %d (succeeded by route: %s); missing %d, not succeeded %d, torn bytes %d\n",
		r.Rows.Rows, countsLine(routes), r.Rows.Missing, r.Rows.NotSucceeded, r.Rows.Torn)
	fmt.Fprintf(w, "- simulator: %d authenticated calls, %d admitted, %d 529s, %d 500s, %d resets (billed, no answer), distinct bodies answered %d of %d\n",
		r.Sim.Calls, r.Sim.Admitted, r.Sim.Overloaded, r.Sim.ServerErrors, r.Sim.Resets, r.Distinct, c.N)
	fmt.Fprintf(w, "- batches: %d created on the simulator (%d creates answered lost), %d requests in them, %d rows succeeded, %d expired, %d canceled; journal: %d intents, %d created (%d adopted), %d distinct batches, %d harvested, %d abandoned, %d dropped, %d cancels\n",
		r.Sim.BatchesCreated, r.Sim.CreateLost, r.Sim.BatchRows, r.Sim.BatchSucceeded, r.Sim.BatchExpired, r.Sim.BatchCanceled,
		r.Journal.Intents, r.Journal.Created, r.Journal.Adopted, r.Journal.Batches, r.Journal.Harvested, r.Journal.Abandoned, r.Journal.Dropped, r.Journal.Cancels)
	fmt.Fprintf(w, "- billed more than once: %d bodies (%d extra answers); in flight at the kills and the full disk: %d = the calls the simulator held open (the most sampled in the 250 ms before; never answered, so never billed twice) %d + the answers it had sent whose rows were not yet durable %d (the bound; the engine's ceiling on calls in flight: %d)\n",
		r.BilledTwice, r.ExtraAnswers, r.Bound, r.Bound-r.Undurable, r.Undurable, r.Ceiling)
	fmt.Fprintf(w, "- sync answers left without a row by runs that stopped by themselves: %d (goal 0)\n", r.Unkilled)
	bw := r.BatchWaste
	fmt.Fprintf(w, "- batch answers no row holds (the simulator answered every request of every batch): %d whose row came from sync and %d from another batch (each paid twice; goal 0), %d from the cache (which may hold that batch's answer)\n",
		bw.Sync, bw.OtherBatch, bw.Cache)
	for _, c := range bw.Chunks {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if r.WorkDir != "" {
		fmt.Fprintf(w, "- work directory kept: %s\n", r.WorkDir)
	}
	if m := r.Misses(); len(m) > 0 {
		fmt.Fprintf(w, "- **goals missed**: %s\n", strings.Join(m, "; "))
	} else {
		fmt.Fprintln(w, "- every goal met")
	}
}

func countsLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
