package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/fleet"
	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/testkit/redisproc"
	"github.com/sluice-dev/sluice/internal/testkit/simtest"
	"github.com/sluice-dev/sluice/sim"
)

// FleetRun is several `sluice run --fleet` processes — separate OS
// processes — sharing one simulator child process and one private
// redis-server. Optionally one process is SIGKILLed mid-run (and resumed
// once the others are done), or Redis is stopped mid-run and restarted.
type FleetRun struct {
	Name   string
	Binary string
	Sim    sim.Config
	Jobs   int // processes, one job each
	// Workload is each job's shape; job j uses Seed + j, so no two jobs
	// send the same request.
	Workload workload.Judge
	// Caps per family, passed as --cap-* to every process; nil: defaults.
	Caps map[api.Family]int
	// KillAt > 0: SIGKILL job 0 once it has written this fraction of its
	// results.
	KillAt float64
	// OutageAt > 0: stop Redis once the fleet has written this fraction of
	// all results, for Outage.
	OutageAt float64
	Outage   time.Duration
	// NoFleet is the control arm: no Redis, each process with the caps
	// divided by Jobs (a static split, what fleet mode must match).
	NoFleet bool
	Log     io.Writer
}

// FleetResult is what a fleet run measured.
type FleetResult struct {
	Name       string
	Jobs, N    int // N per job
	Wall       time.Duration
	Throughput float64 // all results ÷ wall, req/s
	Steady     float64 // 10 %–90 % of all results, req/s
	Predicted  float64 // the binding limit of the whole fleet, req/s
	Binding    string
	Admitted   int64
	Limited    int64
	Extra      int64 // answers beyond the first for one body
	Cap        int
	Peak       map[string]int // by org name: the simulator's peak concurrency
	JobWalls   []time.Duration
	// Kill: when, how long until the killed member's permits stopped
	// counting, and the survivors' rate before the kill and once its lease
	// ran out.
	Killed                 bool
	KillAt, PermitsBack    time.Duration
	SurvivorsBefore, After float64
	// Outage: its start and length, the fleet's rate during it, and each
	// process's outage report (peak permits vs scaled cap) from its log.
	OutageAt, OutageLen time.Duration
	OutageRate          float64
	OutagePeaks         []string
	OutageLogged        int // processes that logged the fallback
}

// Spread is (slowest − fastest) ÷ slowest job wall-clock.
func (r FleetResult) Spread() float64 {
	if len(r.JobWalls) == 0 {
		return 0
	}
	lo, hi := r.JobWalls[0], r.JobWalls[0]
	for _, w := range r.JobWalls {
		lo, hi = min(lo, w), max(hi, w)
	}
	return float64(hi-lo) / float64(hi)
}

// fleetJob is one `sluice run` process and its files.
type fleetJob struct {
	in, out, log string
	cmd          *exec.Cmd
	done         chan struct{}
	lines        int
	off          int64
	end          time.Time
	resumed      bool
}

type sample struct {
	t     time.Duration
	total int
	jobs  []int
}

// Run executes the fleet run and measures it.
func (fr FleetRun) Run(ctx context.Context) (FleetResult, error) {
	res := FleetResult{Name: fr.Name, Jobs: fr.Jobs, N: fr.Workload.N, Peak: map[string]int{}}
	logw := fr.Log
	if logw == nil {
		logw = io.Discard
	}
	dir, err := os.MkdirTemp("", "sluice-bench-fleet-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if fr.Workload.MaxTokens == 0 {
		fr.Workload.MaxTokens = 256
	}
	if fr.Workload.Model == "" {
		fr.Workload.Model = "claude-sonnet-4-5-20250929"
	}
	sp, err := StartSim(ctx, fr.Binary, fr.Sim, dir)
	if err != nil {
		return res, err
	}
	defer sp.Stop()
	rdir := filepath.Join(dir, "redis")
	os.Mkdir(rdir, 0o755)
	rs, err := redisproc.Start(ctx, rdir, 0)
	if err != nil {
		return res, err
	}
	defer func() { rs.Stop() }()

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "ANTHROPIC_BASE_URL=" + sp.Base}
	for k, v := range simtest.KeyEnv(fr.Sim) {
		env = append(env, k+"="+v)
	}
	args := []string{"--route", "sync", "--no-dotenv", "--no-progress"}
	caps := fr.capsOrDefault()
	for fam, c := range caps {
		if fam == api.FamilyFable { // no flag: it follows --cap-unknown
			continue
		}
		if fr.NoFleet {
			c /= fr.Jobs
		}
		args = append(args, "--cap-"+string(fam), strconv.Itoa(c))
	}
	if !fr.NoFleet {
		args = append(args, "--fleet", rs.URL())
	}
	res.Cap = caps[api.FamilySonnet]
	jobs := make([]*fleetJob, fr.Jobs)
	for j := range jobs {
		w := fr.Workload
		w.Seed += uint64(j)
		jb := &fleetJob{in: filepath.Join(dir, fmt.Sprintf("in%d.jsonl", j)), out: filepath.Join(dir, fmt.Sprintf("out%d.jsonl", j)),
			log: filepath.Join(dir, fmt.Sprintf("job%d.log", j))}
		if err := w.WriteFile(jb.in); err != nil {
			return res, err
		}
		jobs[j] = jb
	}
	start := time.Now()
	launch := func(jb *fleetJob) error {
		lf, err := os.OpenFile(jb.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		jb.cmd = exec.CommandContext(ctx, fr.Binary, append([]string{"run", jb.in, "-o", jb.out}, args...)...)
		jb.cmd.Env, jb.cmd.Dir, jb.cmd.Stderr, jb.cmd.Stdout = env, dir, lf, lf
		if err := jb.cmd.Start(); err != nil {
			lf.Close()
			return err
		}
		jb.done = make(chan struct{})
		go func() { jb.cmd.Wait(); lf.Close(); close(jb.done) }()
		return nil
	}
	for _, jb := range jobs {
		if err := launch(jb); err != nil {
			return res, err
		}
	}
	defer func() {
		for _, jb := range jobs {
			if jb.cmd != nil && jb.cmd.ProcessState == nil {
				jb.cmd.Process.Kill()
				<-jb.done
			}
		}
	}()

	total := fr.Jobs * fr.Workload.N
	var series []sample
	var killedID string
	var killPID int
	var outageEnd time.Time
	outage := false
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		now := time.Now()
		s := sample{t: now.Sub(start), jobs: make([]int, len(jobs))}
		running := 0
		for j, jb := range jobs {
			countLines(jb)
			s.jobs[j] = jb.lines
			s.total += jb.lines
			select {
			case <-jb.done:
				if jb.end.IsZero() {
					jb.end = now
				}
			default:
				running++
			}
		}
		series = append(series, s)

		// The kill, and the killed member's permits coming back.
		if fr.KillAt > 0 && !res.Killed && jobs[0].lines >= int(fr.KillAt*float64(fr.Workload.N)) {
			if rep, err := fleet.ReadStatus(ctx, rs.URL()); err == nil {
				killPID = jobs[0].cmd.Process.Pid
				for _, m := range rep.Members {
					if m.PID == killPID {
						killedID = m.ID
					}
				}
			}
			jobs[0].cmd.Process.Signal(syscall.SIGKILL)
			<-jobs[0].done
			res.Killed, res.KillAt = true, time.Since(start)
			fmt.Fprintf(logw, "killed job 0 (member %s) at %s with %d results\n", killedID, res.KillAt.Round(time.Millisecond), jobs[0].lines)
		}
		if res.Killed && res.PermitsBack == 0 && killedID != "" {
			if rep, err := fleet.ReadStatus(ctx, rs.URL()); err == nil {
				held := 0
				for _, l := range rep.Lanes {
					held += l.Held[killedID]
				}
				if held == 0 {
					res.PermitsBack = time.Since(start) - res.KillAt
					fmt.Fprintf(logw, "the killed member's permits stopped counting %s after the kill\n", res.PermitsBack.Round(time.Millisecond))
				}
			}
		}
		// The Redis outage.
		if fr.OutageAt > 0 && res.OutageAt == 0 && s.total >= int(fr.OutageAt*float64(total)) {
			rs.Stop()
			outage, res.OutageAt = true, time.Since(start)
			outageEnd = time.Now().Add(fr.Outage)
			fmt.Fprintf(logw, "stopped Redis at %s\n", res.OutageAt.Round(time.Millisecond))
		}
		if outage && time.Now().After(outageEnd) {
			rs, err = redisproc.Start(ctx, rdir, rs.Port)
			if err != nil {
				return res, fmt.Errorf("bench: restarting Redis: %w", err)
			}
			outage = false
			res.OutageLen = time.Since(start) - res.OutageAt
			fmt.Fprintf(logw, "restarted Redis at %s\n", (time.Since(start)).Round(time.Millisecond))
		}

		if running == 0 {
			// Resume the killed job once the others are done.
			if res.Killed && !jobs[0].resumed {
				jobs[0].resumed = true
				if err := launch(jobs[0]); err != nil {
					return res, err
				}
				continue
			}
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	res.Wall = time.Since(start)
	for j, jb := range jobs {
		if code := jb.cmd.ProcessState.ExitCode(); code != 0 {
			tail, _ := os.ReadFile(jb.log)
			return res, fmt.Errorf("bench: job %d exited %d:\n%s", j, code, lastLines(tail, 20))
		}
		if err := checkResults(jb.in, jb.out); err != nil {
			return res, fmt.Errorf("bench: job %d: %w", j, err)
		}
		if !(res.Killed && j == 0) {
			res.JobWalls = append(res.JobWalls, jb.end.Sub(start))
		}
		b, _ := os.ReadFile(jb.log)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "Redis unreachable") {
				res.OutageLogged++
			}
			if m := outagePeakRE.FindStringSubmatch(line); m != nil {
				res.OutagePeaks = append(res.OutagePeaks, fmt.Sprintf("job %d %s: %s of %s", j, m[1], m[2], m[3]))
			}
		}
	}
	res.Throughput = float64(total) / res.Wall.Seconds()
	res.Steady = rateBetween(series, func(s sample) int { return s.total }, total/10, total*9/10)
	if res.Killed {
		others := func(s sample) int { return s.total - s.jobs[0] }
		res.SurvivorsBefore = rateIn(series, others, res.KillAt-5*time.Second, res.KillAt)
		// From just after the lease ran out until the first survivor ends
		// (at most 5 s).
		from, to := res.KillAt+res.PermitsBack+500*time.Millisecond, res.KillAt+res.PermitsBack+5500*time.Millisecond
		for _, jb := range jobs[1:] {
			to = min(to, jb.end.Sub(start))
		}
		res.After = rateIn(series, others, from, to)
	}
	if res.OutageAt > 0 {
		res.OutageRate = rateIn(series, func(s sample) int { return s.total }, res.OutageAt, res.OutageAt+res.OutageLen)
	}

	st, err := sp.Stats()
	if err != nil {
		return res, err
	}
	var in, out int64
	for name, o := range st.Orgs {
		for _, p := range o.Pools {
			res.Admitted += p.Admitted
			res.Limited += p.RateLimited
			in += p.InputTokens + p.CacheWriteTokens
			out += p.OutputTokens
			res.Peak[name] = max(res.Peak[name], p.PeakConcurrency)
		}
	}
	res.Extra = st.Bodies.ExtraAnswers
	if res.Admitted > 0 {
		res.Predicted, res.Binding = BindingLimit(fr.Sim, caps, api.PoolOf(fr.Workload.Model), fr.Workload.MaxTokens,
			float64(in)/float64(res.Admitted), float64(out)/float64(res.Admitted))
	}
	return res, nil
}

var outagePeakRE = regexp.MustCompile(`fleet: during the outage.*org=(\S+) pool=\S+ peak_permits=(\d+) scaled_cap=(\d+)`)

func (fr FleetRun) capsOrDefault() map[api.Family]int {
	return EngineRun{Caps: fr.Caps}.capsOrDefault()
}

// countLines adds the newline-terminated lines appended to jb.out since
// the last call.
func countLines(jb *fleetJob) {
	f, err := os.Open(jb.out)
	if err != nil {
		return
	}
	defer f.Close()
	f.Seek(jb.off, io.SeekStart)
	b, _ := io.ReadAll(f)
	// Count only up to the last newline: a torn tail is counted later.
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		jb.lines += bytes.Count(b[:i+1], []byte("\n"))
		jb.off += int64(i + 1)
	}
}

// rateBetween is the rate, per second, at which count went from lo to hi.
func rateBetween(series []sample, count func(sample) int, lo, hi int) float64 {
	var t0, t1 time.Duration
	var n0, n1 int
	found := 0
	for _, s := range series {
		if found == 0 && count(s) >= lo {
			t0, n0, found = s.t, count(s), 1
		}
		if found == 1 && count(s) >= hi {
			t1, n1, found = s.t, count(s), 2
		}
	}
	if found < 2 || t1 <= t0 {
		return 0
	}
	return float64(n1-n0) / (t1 - t0).Seconds()
}

// rateIn is count's rate, per second, between the samples nearest a and b.
func rateIn(series []sample, count func(sample) int, a, b time.Duration) float64 {
	i := sort.Search(len(series), func(i int) bool { return series[i].t >= a })
	k := sort.Search(len(series), func(i int) bool { return series[i].t >= b })
	if k >= len(series) {
		k = len(series) - 1
	}
	if i >= len(series) || series[k].t <= series[i].t {
		return 0
	}
	return float64(count(series[k])-count(series[i])) / (series[k].t - series[i].t).Seconds()
}

// checkResults verifies exactly one succeeded result per request of in.
func checkResults(in, out string) error {
	want := map[string]bool{}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r api.BatchRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			f.Close()
			return err
		}
		want[r.CustomID] = true
	}
	f.Close()
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return errors.New("results end in a torn line")
	}
	got := map[string]bool{}
	for line := range bytes.Lines(b) {
		var r struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type string `json:"type"`
			} `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if got[r.CustomID] {
			return fmt.Errorf("%s written twice", r.CustomID)
		}
		if !want[r.CustomID] {
			return fmt.Errorf("result for %s, not in the input", r.CustomID)
		}
		if r.Result.Type != api.ResultSucceeded {
			return fmt.Errorf("%s: result %s", r.CustomID, r.Result.Type)
		}
		got[r.CustomID] = true
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d results for %d requests", len(got), len(want))
	}
	return nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Print writes the result as the lines BENCHMARKS.md quotes.
func (r FleetResult) Print(w io.Writer) {
	fmt.Fprintf(w, "%s: %d processes × %d requests in %s: %.0f req/s overall, %.0f req/s steady (10%%–90%%)\n",
		r.Name, r.Jobs, r.N, r.Wall.Round(time.Millisecond), r.Throughput, r.Steady)
	if r.Predicted > 0 {
		fmt.Fprintf(w, "  binding limit of the fleet: %.0f req/s (%s); steady ÷ binding = %.3f\n", r.Predicted, r.Binding, r.Steady/r.Predicted)
	}
	orgs := make([]string, 0, len(r.Peak))
	for o := range r.Peak {
		orgs = append(orgs, o)
	}
	sort.Strings(orgs)
	var peaks []string
	for _, o := range orgs {
		peaks = append(peaks, fmt.Sprintf("%s %d", o, r.Peak[o]))
	}
	pct := 0.0
	if r.Admitted+r.Limited > 0 {
		pct = 100 * float64(r.Limited) / float64(r.Admitted+r.Limited)
	}
	fmt.Fprintf(w, "  simulator peak concurrency per org (cap %d): %s; %d × 429 (%.2f%%); %d extra answers\n",
		r.Cap, strings.Join(peaks, ", "), r.Limited, pct, r.Extra)
	var walls []string
	for _, d := range r.JobWalls {
		walls = append(walls, d.Round(10*time.Millisecond).String())
	}
	fmt.Fprintf(w, "  job wall-clocks %s: spread %.1f%%; every result exactly once\n", strings.Join(walls, ", "), 100*r.Spread())
	if r.Killed {
		fmt.Fprintf(w, "  SIGKILL of one process at %s: its permits stopped counting %s later; survivors %.0f req/s before, %.0f req/s after (%.2f×); it resumed and finished\n",
			r.KillAt.Round(time.Millisecond), r.PermitsBack.Round(time.Millisecond), r.SurvivorsBefore, r.After, r.After/max(r.SurvivorsBefore, 1))
	}
	if r.OutageAt > 0 {
		fmt.Fprintf(w, "  Redis stopped at %s for %s: %d of %d processes logged the fallback; fleet %.0f req/s during it\n",
			r.OutageAt.Round(time.Millisecond), r.OutageLen.Round(time.Millisecond), r.OutageLogged, r.Jobs, r.OutageRate)
		for _, p := range r.OutagePeaks {
			fmt.Fprintf(w, "    outage peak permits, %s (scaled cap)\n", p)
		}
	}
}
