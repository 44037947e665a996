package main

// End-to-end test of what a person sees of a run (issue 41): a job on the
// simulator with the live view on, the page loaded in headless Chromium
// while the run goes on, then the HTML report opened from disk. Chromium
// comes from Debian's packages; the test skips without it unless
// SLUICE_REQUIRE_CHROMIUM is set (as CI does).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/internal/front/workload"
	"github.com/sluice-dev/sluice/internal/see/history"
	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/internal/see/watch"
	"github.com/sluice-dev/sluice/sim"
)

// chromiumPath finds Chromium, or skips the test (fails it when
// SLUICE_REQUIRE_CHROMIUM is set).
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p := lookChromium(); p != "" {
		return p
	}
	if os.Getenv("SLUICE_REQUIRE_CHROMIUM") != "" {
		t.Fatal("SLUICE_REQUIRE_CHROMIUM is set but no Chromium is installed (apt-get install -y chromium)")
	}
	t.Skip("no Chromium (apt-get install -y chromium); set SLUICE_REQUIRE_CHROMIUM to make this a failure")
	return ""
}

func lookChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium tab that records every console error
// and warning, uncaught exception and failed load.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// chrome starts one headless Chromium for the test; newBrowser opens tabs
// in it (a tab is much cheaper than a browser).
func chrome(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1500))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // the browser starts here
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelB(); cancelA() })
	return bctx
}

// newBrowser opens a tab of the browser at parent, width × height.
func newBrowser(t *testing.T, parent context.Context, width, height int64) *browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	b.do(t, chromedp.EmulateViewport(width, height))
	return b
}

// do runs actions, failing the test on an error.
func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// text is the text of the element sel selects.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) checkNoErrors(t *testing.T, where string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("%s: %s", where, e)
	}
	b.errors = nil
}

// chartCounts is, per chart on the page, how many values it holds — 0 for
// a chart whose canvas shows no line, whatever data it was handed.
func (b *browser) chartCounts(t *testing.T) map[string]int {
	t.Helper()
	return eval[map[string]int](t, b, `(() => { const n = window.sluiceView.charts(), d = window.sluiceView.drawn(); for (const id in n) if (!d[id]) n[id] = 0; return n; })()`)
}

// seenCounts is chartCounts as a reader scrolling down the page sees it:
// a chart off screen is drawn only when it comes into view, so each chart
// still empty is scrolled to and given up to a second to draw.
func (b *browser) seenCounts(t *testing.T) map[string]int {
	t.Helper()
	counts := b.chartCounts(t)
	for id, c := range counts {
		if c > 0 {
			continue
		}
		eval[bool](t, b, `(document.getElementById(`+strconv.Quote(id)+`).scrollIntoView(), true)`)
		for deadline := time.Now().Add(time.Second); counts[id] == 0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			counts[id] = b.chartCounts(t)[id]
		}
	}
	eval[bool](t, b, `(window.scrollTo(0, 0), true)`)
	return counts
}

// card reads the text of a summary card's value.
func (b *browser) card(t *testing.T, key string) string {
	t.Helper()
	return b.text(t, `.card .value[data-k="`+key+`"]`)
}

// screenshot saves the page as PNG into $SLUICE_SCREENSHOTS (the docs'
// pictures are made this way), if set: the whole page, or what the
// window shows.
func (b *browser) screenshot(t *testing.T, name string, whole bool) {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if whole {
		shot = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func digits(s string) int64 {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	n, _ := strconv.ParseInt(b.String(), 10, 64)
	return n
}

func TestViewInABrowser(t *testing.T) {
	chromiumPath(t)
	// Slow enough (a few answers a second a lane) that the page is seen
	// to update; far longer than the test, which interrupts it.
	e := newE2EWith(t, func(c *sim.Config) { c.TimeScale = 4 })
	const n = 20000
	if err := (workload.Judge{N: n, Seed: 91, NoRubric: true, MaxTokens: 16}).WriteFile(e.path("in.jsonl")); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "in.jsonl", "-o", "out.jsonl", "--route", "sync", "--cap-sonnet", "6", "--report", "report.json", "--ui", "127.0.0.1:0")

	// The run leaves its view's address beside its results.
	var st view.State
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if st, err = view.ReadState(view.StatePath(e.path("out.jsonl"))); err == nil {
			break
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no %s while the run went (exited %v)\n%s", view.StatePath(e.path("out.jsonl")), p.exited(), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.waitForLines(p, e.path("out.jsonl"), 60)

	// Without the token the page is refused.
	if resp, err := http.Get(st.Base + "/"); err != nil || resp.StatusCode != 401 {
		t.Errorf("the page without its token: %v %v, want 401", resp.Status, err)
	} else {
		resp.Body.Close()
	}

	cr := chrome(t)
	b := newBrowser(t, cr, 1280, 1500)
	b.do(t, chromedp.Navigate(st.URL), chromedp.WaitVisible(chromedp.CSS(`#chart-progress .uplot`)),
		chromedp.WaitVisible(chromedp.CSS(`[id^="chart-lane-use-"] .uplot`)))
	// At phone width the page still lays out in one column and draws.
	phone := newBrowser(t, cr, 390, 844)
	phone.do(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile), chromedp.Navigate(st.URL),
		chromedp.WaitVisible(chromedp.CSS(`[id^="chart-lane-conc-"] .uplot`)))
	// A mobile browser widens its layout to the widest element: the page
	// must fit the phone's 390 px.
	if eval[bool](t, phone, `document.documentElement.scrollWidth > 391 || window.innerWidth > 391`) {
		t.Error("at phone width the page is wider than the screen")
	}
	phone.screenshot(t, "see-phone.png", false)
	phone.checkNoErrors(t, "live page at phone width")

	first := doneOf(b.card(t, "done"))
	points1 := eval[int](t, b, `+document.body.dataset.points`)

	// The page updates while the run goes on.
	// Every chart fills, each once scrolled into view.
	var points2 int
	var second int64
	var counts map[string]int
	filled := func() bool {
		for _, c := range counts {
			if c == 0 {
				return false
			}
		}
		return len(counts) > 0
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		points2 = eval[int](t, b, `+document.body.dataset.points`)
		second = doneOf(b.card(t, "done"))
		counts = b.seenCounts(t)
		if points2 > points1 && second > first && filled() {
			break
		}
	}
	if points2 <= points1 || second <= first {
		t.Errorf("the page did not update: %d points and %d done, then %d and %d", points1, first, points2, second)
	}
	b.screenshot(t, "see-live.png", false)
	for _, id := range []string{"chart-progress", "chart-cost", "chart-errors", "chart-lane-use-0", "chart-lane-conc-0"} {
		if counts[id] == 0 {
			t.Errorf("chart %s holds no data (%v)", id, counts)
		}
	}
	for id, c := range counts {
		if c == 0 {
			t.Errorf("chart %s holds no data (%v)", id, counts)
		}
	}
	// What the page shows is what the process recorded at that instant.
	last := eval[struct {
		T    int64   `json:"t"`
		Done float64 `json:"done"`
		Cost float64 `json:"cost"`
	}](t, b, `window.sluiceView.last()`)
	req, _ := http.NewRequest("GET", st.Base+"/api/history", nil)
	req.Header.Set("Authorization", "Bearer "+st.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tl history.Timeline
	err = json.NewDecoder(resp.Body).Decode(&tl)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, ts := range tl.T {
		if ts == last.T {
			found = true
			if tl.Done[i] != last.Done || math.Abs(tl.Cost[0][i]-last.Cost) > 1e-9 {
				t.Errorf("the page shows %v done, $%v at %d; the process recorded %v, $%v", last.Done, last.Cost, ts, tl.Done[i], tl.Cost[0][i])
			}
		}
	}
	if !found {
		t.Errorf("the page's last point (t %d) is not in the process's history", last.T)
	}
	// /api/status and sluice status agree with the page's world.
	var s watch.Status
	req, _ = http.NewRequest("GET", st.Base+"/api/status?token="+st.Token, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
	}
	if s.Total != n || len(s.Lanes) == 0 || s.Phase != watch.PhaseRunning {
		t.Errorf("/api/status: total %d, %d lanes, phase %q", s.Total, len(s.Lanes), s.Phase)
	}
	out, err := exec.Command(e.bin, "status", e.path("out.jsonl")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("/ %d", n)) {
		t.Errorf("sluice status: %v\n%s", err, out)
	}
	b.checkNoErrors(t, "live page")

	// The run is longer than the test needs: Ctrl-C ends it (resumable),
	// and its report says so.
	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(); code != exitInterrupted {
		t.Fatalf("run after SIGINT: exit status %d, want %d\n%s", code, exitInterrupted, p.stderr.String())
	}
	if _, err := os.Stat(view.StatePath(e.path("out.jsonl"))); !os.IsNotExist(err) {
		t.Errorf("the state file outlived the run (%v)", err)
	}
	out, err = exec.Command(e.bin, "status", e.path("out.jsonl")).CombinedOutput()
	if code := exitCode(err); code != exitNotRunning || !strings.Contains(string(out), "no sluice is running") {
		t.Errorf("sluice status after the run: exit %d\n%s", code, out)
	}

	// The report, from disk: no server, no network; its numbers are the
	// run report's.
	rep := e.readReport(e.path("report.json"))
	html := e.path("out.report.html")
	if _, err := os.Stat(html); err != nil {
		t.Fatalf("no HTML report beside the results: %v\n%s", err, p.stderr.String())
	}
	rb := newBrowser(t, cr, 1280, 1000)
	rb.do(t, chromedp.Navigate("file://"+html), chromedp.WaitVisible(chromedp.CSS(`#report-summary`)))
	if card := rb.card(t, "done"); doneOf(card) != int64(rep.Requests.AlreadyDone+rep.Requests.Written) || !strings.HasSuffix(card, fmt.Sprintf("%d", rep.Requests.Total%1000)) {
		t.Errorf("report page: done card %q, the run report's %d of %d", card, rep.Requests.AlreadyDone+rep.Requests.Written, rep.Requests.Total)
	}
	if got, want := rb.card(t, "cost"), fmt.Sprintf("$%.4f", rep.Cost.Total.USD); got != want {
		t.Errorf("report page: cost %s, the run report's %s", got, want)
	}
	if got, want := rb.card(t, "errors"), fmt.Sprintf("%d · %d · %d", rep.Retries.RateLimited, rep.Retries.Overloaded, rep.Retries.Failed); got != want {
		t.Errorf("report page: 429 · 529 · 5xx %s, the run report's %s", got, want)
	}
	for _, l := range rep.Lanes {
		if l.Attempts == 0 {
			continue
		}
		ok := rb.text(t, `b[data-lane="`+l.Org+"/"+l.Pool+`"][data-k="ok"]`)
		if digits(ok) != l.OK {
			t.Errorf("report page: lane %s/%s ok %s, the run report's %d", l.Org, l.Pool, ok, l.OK)
		}
	}
	counts = rb.chartCounts(t)
	for id, c := range counts {
		if c == 0 {
			t.Errorf("report chart %s holds no data", id)
		}
	}
	if len(counts) < 5 {
		t.Errorf("the report draws %d charts: %v", len(counts), counts)
	}
	rb.screenshot(t, "see-report.png", true)
	rphone := newBrowser(t, cr, 390, 844)
	rphone.do(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile), chromedp.Navigate("file://"+html),
		chromedp.WaitVisible(chromedp.CSS(`#report-summary`)))
	if eval[bool](t, rphone, `document.documentElement.scrollWidth > 391 || window.innerWidth > 391`) {
		t.Error("at phone width the report is wider than the screen")
	}
	rphone.checkNoErrors(t, "report at phone width")
	rb.checkNoErrors(t, "report")

	// sluice report builds it again from the history alone.
	os.Remove(html)
	if out, err := exec.Command(e.bin, "report", e.path("out.jsonl")).CombinedOutput(); err != nil {
		t.Fatalf("sluice report: %v\n%s", err, out)
	}
	b2, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b2), "uPlot") || strings.Contains(string(b2), "http://") && strings.Contains(string(b2), "<script src") {
		t.Errorf("sluice report wrote no self-contained report: %v", err)
	}
}

// doneOf reads "1,234 / 1,500" as 1234.
func doneOf(card string) int64 {
	before, _, _ := strings.Cut(card, "/")
	return digits(before)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// BenchmarkViewDayOfHistory is the page with 24 hours of a six-lane
// history (a second apart, downsampled as a run's file is) and an event a
// minute: the history's and the report's size, the time Chromium takes to
// draw every chart the first time, and to draw them again (what each live
// update costs the page).
//
//	go test ./cmd/sluice -run '^$' -bench ViewDayOfHistory -benchtime 3x
func BenchmarkViewDayOfHistory(b *testing.B) {
	exe := chromiumPath(b)
	dir := b.TempDir()
	path := filepath.Join(dir, "day.jsonl.history")
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	w, err := history.Open(path, history.Run{Cmd: "run", Total: 1_000_000}, history.Options{Now: clock, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	lanes := history.Lanes{T: history.Millis(now)}
	for i := range 6 {
		lanes.Lanes = append(lanes.Lanes, history.LaneID{Org: fmt.Sprintf("org%d", i), Pool: "sonnet-4"})
	}
	w.Append(lanes)
	w.Append(history.Event{T: history.Millis(now), Kind: "route", Route: "split", Share: 0.4, Pred: 80000, Low: 70000, High: 95000})
	for i := 1; i <= 24*3600; i++ {
		now = now.Add(time.Second)
		p := history.Point{T: history.Millis(now), Done: int64(i * 11), Cost: [3]float64{float64(i) * 0.01, float64(i) * 0.008, float64(i) * 0.002}}
		for range 6 {
			row := make([]float64, history.NumCols)
			row[history.ColSent], row[history.ColOK], row[history.Col429] = float64(i*2), float64(i*2), float64(i/50)
			row[history.ColIn], row[history.ColOut] = float64(i*3000), float64(i*300)
			row[history.ColInFlight], row[history.ColLimit], row[history.ColCap] = float64(40+i%20), 60, 100
			row[history.ColWait0+3] = float64(i * 300)
			for d := range history.NumDims {
				row[history.ColBucket0+d*history.BucketCols] = 400000
				row[history.ColBucket0+d*history.BucketCols+1] = 400000
				row[history.ColBucket0+d*history.BucketCols+2] = float64(100000 + i%5000)
				row[history.ColBucket0+d*history.BucketCols+3] = float64(i * 20)
			}
			p.L = append(p.L, row)
		}
		w.Append(p)
		if i%60 == 0 {
			w.Append(history.Event{T: history.Millis(now), Kind: "batch", State: "created", ID: fmt.Sprintf("c%d", i), Lane: "org0", N: 500})
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	html := filepath.Join(dir, "day.report.html")
	tl, err := view.WriteReportFromHistory(path, html, "a day")
	if err != nil {
		b.Fatal(err)
	}
	hs, _ := os.Stat(path)
	rs, _ := os.Stat(html)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	var draws, updates []float64
	for b.Loop() {
		ctx, cancel := chromedp.NewContext(actx)
		if err := chromedp.Do(ctx, chromedp.Navigate("file://"+html), chromedp.WaitVisible(chromedp.CSS(`#report-summary, #chart-lane-use-5 .uplot`))); err != nil {
			b.Fatal(err)
		}
		ms, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`window.sluiceView.drawMs()`))
		if err != nil {
			b.Fatal(err)
		}
		draws = append(draws, ms...)
		// What each live update costs: the same data drawn again.
		for range 3 {
			ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.sluiceView.redraw()`))
			if err != nil {
				b.Fatal(err)
			}
			updates = append(updates, ms)
		}
		cancel()
	}
	sum := 0.0
	for _, d := range draws {
		sum += d
	}
	b.ReportMetric(sum/float64(len(draws)), "ms/first-draw")
	sum = 0
	for _, d := range updates {
		sum += d
	}
	b.ReportMetric(sum/float64(len(updates)), "ms/update")
	b.ReportMetric(float64(tl.Len()), "points")
	b.ReportMetric(float64(hs.Size())/1e6, "MB-history")
	b.ReportMetric(float64(rs.Size())/1e6, "MB-report")
}

// TestJudgeReportInABrowser: a judge's report, opened from disk, shows its
// verdict classes and each group's score distribution, drawn.
func TestJudgeReportInABrowser(t *testing.T) {
	chromiumPath(t)
	e := newE2EWith(t, func(c *sim.Config) { c.Verdicts.Enabled = true })
	var items strings.Builder
	for i := range 60 {
		fmt.Fprintf(&items, `{"id":"q%d","question":"What is %d?","completion":"%d.","group":%q}`+"\n", i, i, i, []string{"x", "y"}[i%2])
	}
	if err := os.WriteFile(e.path("items.jsonl"), []byte(items.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	e.runOK("judge", "items.jsonl", "-o", "v.jsonl", "--max-tokens", "1024")
	html := e.path("v.report.html")
	b := newBrowser(t, chrome(t), 1280, 1000)
	b.do(t, chromedp.Navigate("file://"+html), chromedp.WaitVisible(chromedp.CSS(`#judge .uplot`)))
	if got := b.text(t, `#what`); got != "items.jsonl → v.jsonl" {
		t.Errorf("the judge report's header names %q, want the user's files items.jsonl → v.jsonl", got)
	}
	if got := b.text(t, `#judge table tr:nth-child(2) td:nth-child(2)`); got != "60" {
		t.Errorf("the (all) row counts %q verdicts, want 60", got)
	}
	counts := b.chartCounts(t)
	judged := 0
	for id, c := range counts {
		if strings.HasPrefix(id, "chart-judge-") {
			judged++
			if c == 0 {
				t.Errorf("%s holds no data", id)
			}
		}
	}
	if judged == 0 {
		t.Errorf("no score distribution drawn (charts %v)", counts)
	}
	b.screenshot(t, "see-judge.png", true)
	b.checkNoErrors(t, "judge report")
}

// A run that used a model without a price has an unknown cost, and its
// report says so: never a dollar figure for the whole, only the priced
// part beside the count.
func TestReportShowsUnknownCost(t *testing.T) {
	chromiumPath(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "u.jsonl.history")
	now := time.Unix(1_800_000_000, 0)
	w, err := history.Open(path, history.Run{Cmd: "run", Total: 100}, history.Options{Now: func() time.Time { return now }, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(history.Lanes{T: history.Millis(now), Lanes: []history.LaneID{{Org: "org0", Pool: "sonnet-9"}}})
	for i := 1; i <= 30; i++ {
		now = now.Add(time.Second)
		row := make([]float64, history.NumCols)
		row[history.ColSent], row[history.ColOK] = float64(i*2), float64(i*2)
		p := history.Point{T: history.Millis(now), Done: int64(i * 2), Cost: [3]float64{0.5, 0.5, 0}, Unpriced: int64(i * 2), L: [][]float64{row}}
		w.Append(p)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(dir, "u.report.html")
	if _, err := view.WriteReportFromHistory(path, html, "unpriced"); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, chrome(t), 1280, 1000)
	b.do(t, chromedp.Navigate("file://"+html), chromedp.WaitVisible(chromedp.CSS(`#chart-cost .uplot`)))
	if got := b.card(t, "cost"); got != "unknown" {
		t.Errorf("the cost card shows %q, want unknown", got)
	}
	if note := b.text(t, `#cost-note`); !strings.Contains(note, "Cost unknown: 60 requests") || !strings.Contains(note, "$0.5000") {
		t.Errorf("the cost note says %q", note)
	}
	b.checkNoErrors(t, "report of an unpriced run")
}
