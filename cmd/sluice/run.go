package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-dev/sluice/job"
)

// exitInterrupted is the exit status of a run that stopped early but can be
// resumed by re-running the same command.
const exitInterrupted = 2

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
			if output == "" {
				return errors.New("run: -o RESULTS.jsonl is required")
			}
			log := newLogger()
			pool, err := eng.loadKeys(log)
			if err != nil {
				return err
			}
			c, err := eng.client(eng.totalConns(len(pool.Keys())))
			if err != nil {
				return err
			}
			tty := term.IsTerminal(int(os.Stderr.Fd()))
			opts := job.Options{
				Input: args[0], Output: output, SkipInvalid: skipInvalid, AllowChanged: allowChanged,
				MaxCost: maxCost, Grace: grace, Dispatch: eng.dispatchConfig(c, pool, log),
				Terminal: tty, Logger: log, Redact: pool.Redact,
				Command: "sluice " + strings.Join(os.Args[1:], " "),
			}
			if !noProgress {
				opts.Progress = os.Stderr
			}
			if v, ok := os.LookupEnv("SLUICE_BATCH_STUCK_AFTER"); ok && !cmd.Flags().Changed("stuck-after") {
				if rf.stuckAfter, err = time.ParseDuration(v); err != nil {
					return fmt.Errorf("run: SLUICE_BATCH_STUCK_AFTER: %w", err)
				}
			}
			opts.Plan = rf.router(pool.Keys(), nil, log)
			return runJob(cmd.Context(), opts, report)
		},
	}
	eng.register(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "results file (appended to, resumable)")
	fl.StringVar(&report, "report", "", "write a JSON report here")
	fl.BoolVar(&skipInvalid, "skip-invalid", false, "record invalid lines as errored results instead of stopping")
	fl.BoolVar(&allowChanged, "allow-changed", false, "re-run requests whose params changed since their result was written")
	fl.Float64Var(&maxCost, "max-cost", 0, "stop admitting requests once this many USD are spent (0: no limit)")
	fl.DurationVar(&grace, "grace", 30*time.Second, "on interrupt, how long requests in flight may finish")
	fl.BoolVar(&noProgress, "no-progress", false, "no progress display or log lines")
	fl.StringVar(&rf.route, "route", "auto", "auto (the planner decides), sync (Messages calls) or batch (Message Batches, half price)")
	fl.StringVar(&rf.prefer, "prefer", "latency", "what auto optimises: latency, cost or balanced")
	fl.DurationVar(&rf.deadline, "deadline", 0, "the job must finish within this (rules out routes predicted to take longer; bounds batch polling)")
	fl.StringVar(&rf.limitsFile, "limits-file", "", "the organizations' limits for the planner (see sluice plan --help); default: read them from one 1-token probe per organization")
	fl.IntVar(&rf.chunk, "chunk", 0, "requests per batch (default: the planner's)")
	fl.IntVar(&rf.window, "window", 0, "batches in flight per organization (default: the planner's)")
	fl.DurationVar(&rf.stuckAfter, "stuck-after", 0, "cancel a batch not ended this long after create and re-drive it on sync (default: the planner's; env SLUICE_BATCH_STUCK_AFTER)")
	return cmd
}

// runJob runs opts with signal handling: the first SIGINT/SIGTERM stops
// admitting and lets requests in flight finish, the second aborts them.
func runJob(ctx context.Context, opts job.Options, reportPath string) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	abort := make(chan struct{})
	opts.Abort = abort
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
		fmt.Fprintf(os.Stderr, "\nsluice: stopping — letting requests in flight finish (up to %s); interrupt again to abort them\n", opts.Grace)
		cancel()
		select {
		case <-sigs:
			fmt.Fprintln(os.Stderr, "sluice: aborting requests in flight")
			close(abort)
		case <-finished:
		}
	}()
	rep, err := job.Run(ctx, opts)
	if rep != nil {
		rep.Summary(os.Stderr)
		if reportPath != "" {
			if werr := rep.WriteJSON(reportPath); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if errors.Is(err, job.ErrInterrupted) {
		return &exitError{code: exitInterrupted, err: err}
	}
	return err
}
