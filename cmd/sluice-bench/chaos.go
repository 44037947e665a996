package main

import (
	"errors"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
)

// benchChaosCmd is `sluice-bench chaos`: one job, part sync and part
// batch, on a faulty simulator, SIGKILLed again and again and resumed by
// re-running the same command, with a key revoked and a disk that fills.
func benchChaosCmd() *cobra.Command {
	var (
		c     bench.Chaos
		quick bool
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "A job SIGKILLed at many moments (batch creates, polls, downloads), a key revoked, a full disk: nothing lost, duplicated, foreign or leaked",
		Long: `chaos starts a 'sluice sim' child process (the three-org preset with 3 % 529s,
1 % 500s, 0.5 % connection resets after billing and 5 % of batch creates whose
answer is lost, a second key on high_prio, a quicker batch queue) and runs one
job of --n judge-shaped requests with

  sluice run REQUESTS -o results.jsonl --route auto --limits-file LIMITS --chunk N --report report.json --cache-mode on

(the limits file is the simulator's world, so the planner splits the job
between sync and Message Batches). Keys are random and reach the runs only
through the environment. Each run is killed with SIGKILL --kills times, at
seeded random moments, some aimed at a batch create (right after its intent
is journaled), a poll (batches created, none ending), a results download
(batch rows being written) or the start; then the same command is re-run
until it exits 0, and once more (it must write nothing). During one run
high_prio's second key is revoked for good. One run (as root: the job's
directory is a tmpfs) meets a full disk — the tmpfs shrunk to what is used
plus 1 MiB — must stop by itself, and the next resumes once the space is
back.

It prints requests lost, duplicated rows, foreign rows (a row whose answer
is another request's: sim.AnswerTag), requests billed more than once (the
simulator's count; bound: of what was in flight at each kill and at the
full disk, the answers the simulator had sent whose rows were not yet
durable — a call still open is never answered — and no batch answer
thrown away for another's) and every key found in any file of the work
directory (results, journal, report, cache, every run's stdout and
stderr), and exits 1 if a goal is missed. --quick is --n 5000 --kills 10.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := sluiceBinary(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if quick {
				if !cmd.Flags().Changed("n") {
					c.N = 5000
				}
				if !cmd.Flags().Changed("kills") {
					c.Kills = 10
				}
			}
			c.Binary = bin
			c.Log = cmd.ErrOrStderr()
			if quiet {
				c.Log = io.Discard
			}
			r, err := c.Run(cmd.Context())
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			if !r.Met() {
				return &exitError{code: 1, err: errors.New("bench chaos: a goal was missed (see the table)")}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&c.N, "n", 100000, "requests")
	fl.IntVar(&c.Kills, "kills", 50, "SIGKILLs")
	fl.Uint64Var(&c.Seed, "seed", 1, "seed of the workload, the simulator and the kill schedule")
	fl.Float64Var(&c.TimeScale, "scale", 20, "simulator time scale")
	fl.IntVar(&c.Chunk, "chunk", 250, "requests per batch (sluice run --chunk)")
	fl.BoolVar(&c.Keep, "keep", false, "keep the work directory (the job's tmpfs is copied out)")
	fl.BoolVar(&c.NoCache, "no-cache", false, "run without the response cache")
	fl.BoolVar(&c.NoFullDisk, "no-full-disk", false, "skip the full-disk run")
	fl.DurationVar(&c.Timeout, "timeout", 15*time.Minute, "a run that is not killed and outlives this never finishes")
	fl.BoolVar(&quick, "quick", false, "a quick try: --n 5000 --kills 10 unless given")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no event lines on stderr")
	return cmd
}
