package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-dev/sluice/internal/front/job"
)

// exitInterrupted is the exit status of a run that stopped early but can be
// resumed by re-running the same command.
const exitInterrupted = 2

// resultsLockWait is how long run and judge wait for another holder of
// their output's lock before refusing: a run SIGKILLed a moment ago can
// hold it while the kernel tears the process down.
const resultsLockWait = 10 * time.Second

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func runCmd() *cobra.Command {
	var (
		eng          engineFlags
		output       string
		report       string
		skipInvalid  bool
		allowChanged bool
		maxCost      float64
		grace        time.Duration
		noProgress   bool
		rf           routeFlags
		cf           cacheFlags
		cachePrefix  string
		sf           seeFlags
	)
	cmd := &cobra.Command{
		Use:   "run REQUESTS.jsonl -o RESULTS.jsonl",
		Short: "Run a file of Message Batches-format requests on every key at once",
		Long: `run sends every request of REQUESTS.jsonl (one {"custom_id", "params"} per line,
the Message Batches format) through every key in the pool at once, and writes
one result per request to RESULTS.jsonl in the Message Batches results format
(sluice's own metadata under "sluice"). Every line is validated before
anything is sent. A result counts as done only once it is on disk.

Resume by re-running the same command: done ids are skipped, a torn last line
is repaired, rows that ran out of retries are driven again.

Keys come from ANTHROPIC_API_KEY, ANTHROPIC_BATCH_KEY, ANTHROPIC_API_KEY_LOW_PRIO,
ANTHROPIC_API_KEYS (comma list), ./.env, or --keys-file; never from the command line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			restoreModels, err := useCatalog(eng.models)
			if err != nil {
				return err
			}
			defer restoreModels()
			if output == "" {
				return errors.New("run: -o RESULTS.jsonl is required")
			}
			prefixOff, prefixBatch, err := cachePrefixMode(cachePrefix)
			if err != nil {
				return fmt.Errorf("run: %w", err)
			}
			log := newLogger()
			// The view first: its URL is the first line printed.
			see, err := sf.start("run", output, output+".history", "sluice run: "+args[0]+" → "+output, os.Stderr, log)
			if err != nil {
				return err
			}
			defer see.stop()
			pool, c, err := eng.keysAndClient(log)
			if err != nil {
				return err
			}
			tty := term.IsTerminal(int(os.Stderr.Fd()))
			watchCtx, stopWatch := context.WithCancel(cmd.Context()) // the key watch ends with the job
			defer stopWatch()
			opts := job.Options{
				Input: args[0], Output: output, SkipInvalid: skipInvalid, AllowChanged: allowChanged,
				MaxCost: maxCost, Grace: grace, Dispatch: eng.dispatchConfig(c, pool, log),
				Terminal: tty, Logger: log, Redact: redactLoaded, LockWait: resultsLockWait,
				Rotations:      eng.watchKeys(watchCtx, pool, log),
				Command:        "sluice " + strings.Join(os.Args[1:], " "),
				CachePrefixOff: prefixOff, CachePrefixBatch: prefixBatch,
			}
			if !noProgress {
				opts.Progress = os.Stderr
			}
			if err := rf.fromEnv(cmd); err != nil {
				return err
			}
			rt := rf.router(pool.Keys(), c, nil, log)
			opts.RoutedBy(rt)
			opts.Observe = rf.observer(log)
			rc, err := cf.open(cmd, log)
			if err != nil {
				return err
			}
			defer rc.Close()
			opts.Cache = rc
			return runJob(cmd.Context(), opts, report, see, sf.reportPath(output))
		},
	}
	eng.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "results file (appended to, resumable)")
	fl.StringVar(&report, "report", "", "write a JSON report here")
	fl.BoolVar(&skipInvalid, "skip-invalid", false, "record invalid lines as errored results instead of stopping")
	fl.StringVar(&cachePrefix, "cache-prefix", "auto", "auto: a prompt prefix the requests share gets one prompt-cache breakpoint on the sync route, written once per organization (docs/caching.md); batch: on the batch route too, each org primed before its batches (best effort: check the reported batch hit rate); off: every request goes as written")
	fl.BoolVar(&allowChanged, "allow-changed", false, "re-run requests whose params changed since their result was written")
	fl.Float64Var(&maxCost, "max-cost", 0, "stop admitting requests once this many USD are spent (0: no limit)")
	fl.DurationVar(&grace, "grace", 30*time.Second, "on interrupt, how long requests in flight may finish")
	fl.BoolVar(&noProgress, "no-progress", false, "no progress display or log lines")
	rf.register(fl)
	cf.register(fl, "off")
	sf.register(fl, true)
	return cmd
}

// runJob runs opts with signal handling (withSignals), recorded by see,
// then prints the report, writes it to reportPath if set, and the HTML
// report to htmlPath ("": none).
func runJob(ctx context.Context, opts job.Options, reportPath string, see *seeing, htmlPath string) error {
	opts.Watch = see.w
	return withSignals(ctx, opts.Grace, func(ctx context.Context, abort <-chan struct{}) error {
		opts.Abort = abort
		rep, err := job.Run(ctx, opts)
		if rep != nil {
			rep.Summary(os.Stderr)
			if reportPath != "" {
				if werr := rep.WriteJSON(reportPath); werr != nil && err == nil {
					err = werr
				}
			}
		}
		if serr := see.finish(rep, nil, err, htmlPath, os.Stderr); serr != nil {
			opts.Logger.Warn("the run's history or report", "err", serr)
		}
		return err
	})
}

// cachePrefixOff reads --cache-prefix.
func cachePrefixMode(v string) (off, batch bool, err error) {
	switch v {
	case "auto":
		return false, false, nil
	case "batch":
		return false, true, nil
	case "off":
		return true, false, nil
	}
	return false, false, fmt.Errorf("--cache-prefix %q: want auto, batch or off", v)
}
