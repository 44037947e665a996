package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/see/history"
	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/internal/see/watch"
)

// seeFlags are --ui and --report-html (docs/see.md).
type seeFlags struct {
	ui         string
	reportHTML string
}

func (f *seeFlags) register(fl *pflag.FlagSet, report bool) {
	fl.StringVar(&f.ui, "ui", "127.0.0.1:0", "serve the live view (the page, /api/status, /metrics) on HOST:PORT while it runs; its URL, with a token, is the first line printed; off: none. Beyond loopback set "+view.EnvToken)
	if report {
		fl.StringVar(&f.reportHTML, "report-html", "", "write the self-contained HTML report here when the run ends (default: beside the results, NAME.report.html; off: none)")
	}
}

// reportPathFor is the default report beside output: results.jsonl →
// results.report.html.
func reportPathFor(output string) string {
	return strings.TrimSuffix(output, filepath.Ext(output)) + ".report.html"
}

// seeing is one process's history, and its view when --ui is on.
type seeing struct {
	w       *watch.Watch
	srv     *http.Server
	ln      net.Listener
	url     string
	cmd     string
	results string // the file the history sits beside ("" for the proxy)
	title   string
	unpub   func()
	done    chan struct{}
}

// startSeeing opens the view's listener first, so that its URL is the
// first line on out, then the watch over historyPath ("": in memory).
func (f *seeFlags) start(cmdName, results, historyPath, title string, out io.Writer, log *slog.Logger) (*seeing, error) {
	s := &seeing{cmd: cmdName, results: results, title: title, unpub: func() {}, done: make(chan struct{})}
	if f.ui != "off" && f.ui != "" {
		var err error
		if s.ln, err = view.Listen(f.ui); err != nil {
			return nil, err
		}
	}
	s.w = watch.New(watch.Config{Path: historyPath, Cmd: cmdName, Logger: log})
	if s.ln == nil {
		close(s.done)
		return s, nil
	}
	token := view.NewToken()
	v := view.NewServer(s.w, token, title)
	s.url = v.URL(s.ln)
	fmt.Fprintf(out, "sluice %s: live view at %s\n", cmdName, s.url)
	s.srv = &http.Server{Handler: v, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { defer close(s.done); s.srv.Serve(s.ln) }()
	abs := results
	if abs != "" {
		if a, err := filepath.Abs(results); err == nil {
			abs = a
		}
	}
	st := view.State{PID: os.Getpid(), Cmd: cmdName, Results: abs, URL: s.url, Base: "http://" + s.ln.Addr().String(), Token: token, Started: time.Now().UTC()}
	if rm, err := view.Publish(st); err != nil {
		log.Warn("sluice status will not find this process", "err", err)
	} else {
		s.unpub = rm
	}
	return s, nil
}

// finish records how the run ended (rep and judgeData may be nil) and
// writes the report to reportPath ("" or "off": none); the page is served
// until stop.
func (s *seeing) finish(rep *job.Report, judgeData any, runErr error, reportPath string, out io.Writer) error {
	status := "done"
	switch {
	case errors.Is(runErr, job.ErrInterrupted):
		status = "interrupted"
	case runErr != nil:
		status = "failed"
	}
	err := s.w.Finish(rep, judgeData, status)
	if reportPath != "" && reportPath != "off" && s.w.Reported() {
		tl, terr := s.timeline()
		if terr == nil {
			terr = view.WriteReport(reportPath, s.title, tl)
		}
		if terr != nil {
			err = errors.Join(err, fmt.Errorf("--report-html: %w", terr))
		} else {
			fmt.Fprintf(out, "  report: %s\n", reportPath)
		}
	}
	return err
}

// timeline is the whole recorded run: the history file when there is one
// (earlier segments included), else what the watch kept.
func (s *seeing) timeline() (*history.Timeline, error) {
	b, err := s.w.Timeline(0)
	if err != nil {
		return nil, err
	}
	tl := history.NewTimeline()
	if err := jsonUnmarshal(b, tl); err != nil {
		return nil, err
	}
	return tl, nil
}

// stop stops serving and removes the state files.
func (s *seeing) stop() {
	s.unpub()
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.srv.Shutdown(ctx)
		cancel()
	}
	<-s.done
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// reportPath is --report-html, defaulting beside output.
func (f *seeFlags) reportPath(output string) string {
	switch f.reportHTML {
	case "off":
		return ""
	case "":
		return reportPathFor(output)
	}
	return f.reportHTML
}
