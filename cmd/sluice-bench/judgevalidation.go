package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/bench"
)

func benchJudgeValidationCmd() *cobra.Command {
	var (
		n      int
		seed   uint64
		arms   string
		noKill bool
		docs   string
		target time.Duration
		logTo  string
		check  string
		render string
	)
	cmd := &cobra.Command{
		Use:     "judge-validation",
		Aliases: []string{"judge-658"}, // its name before the rename
		Short:   "The judge validation (the old dispatcher's #658 workload): 141,600 judge calls the old ways (A, B, C) and with sluice, side by side",
		Long: `judge-validation generates the #658-shaped judge workload (141,600 Sonnet 4.5 calls,
120-400 input and 64-256 output tokens; --n scales it) and runs it, one arm
after another, each in a fresh three-org simulator:

  A        sequential 500-request batches on one key (the old safe fallback)
  B        8,000-request batches, 8 at once, one key (the #658 failure)
  C        sync on one key, concurrency 50, SDK-style retries
  latency  sluice judge --route auto --prefer latency
  cost     sluice judge --route auto --prefer cost

then the latency arm once more as a child process, SIGKILLed at a random point
and resumed. It writes docs/validation-judge.md, .json and .svg (--docs).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if render != "" {
				// Re-render the documents from a saved result (the report's
				// wording changed, the figures did not).
				raw, err := os.ReadFile(render)
				if err != nil {
					return err
				}
				var res bench.JudgeValidationResult
				if err := json.Unmarshal(raw, &res); err != nil {
					return err
				}
				// The command is the one these flags spell, as for a run.
				res.Command = command(n, arms, noKill, check)
				return writeValidation(&res, docs, res.Command)
			}
			b := &bench.JudgeValidation{Binary: bin, N: n, Seed: seed, Kill: !noKill, Target: target, Progress: os.Stderr, ScaleCheck: check}
			if arms != "" {
				b.Arms = strings.Split(arms, ",")
			}
			if logTo != "" {
				f, err := os.Create(logTo)
				if err != nil {
					return err
				}
				defer f.Close()
				b.Log = f
			}
			res, err := b.Run(cmd.Context())
			if err != nil {
				return err
			}
			res.Machine = fmt.Sprintf("%d cores (%s/%s)", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
			res.Command = command(n, arms, noKill, check)
			return writeValidation(res, docs, res.Command)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&n, "n", 141600, "judge calls")
	fl.Uint64Var(&seed, "seed", 658, "seed of the workload and of the kill point")
	fl.StringVar(&arms, "arms", "", "comma list of arms to run (default: A,B,C,latency,cost)")
	fl.BoolVar(&noKill, "no-kill", false, "skip the kill-and-resume run")
	fl.StringVar(&docs, "docs", "docs", "write validation-judge.{md,json,svg} into this directory (empty: print the markdown only)")
	fl.DurationVar(&target, "target", 75*time.Second, "real time each arm should take (its time scale is chosen for it)")
	fl.StringVar(&logTo, "log", "", "write the runs' logs to this file")
	fl.StringVar(&check, "scale-check", "", "run this arm again at half its time scale, to show the figures do not depend on it")
	fl.StringVar(&render, "render", "", "only re-render the documents from this saved validation-judge.json")
	fl.MarkHidden("render")
	return cmd
}

// benchJudgeValidationArmCmd is the kill arm's child: one sluice arm against a
// running simulator, so the parent can SIGKILL it.
func benchJudgeValidationArmCmd() *cobra.Command {
	var base, items, out, prefer string
	var k float64
	cmd := &cobra.Command{
		Use:    bench.ArmChildCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := bench.SluiceArm{Base: base, Sim: bench.ValidationWorld(k), Items: items, Output: out, Prefer: prefer, Log: os.Stderr}.Run(cmd.Context())
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&base, "base", "", "simulator base URL")
	fl.StringVar(&items, "items", "", "items file")
	fl.StringVar(&out, "out", "", "verdicts file")
	fl.StringVar(&prefer, "prefer", "latency", "latency or cost")
	fl.Float64Var(&k, "time-scale", 1, "the simulator's time scale")
	return cmd
}

func command(n int, arms string, noKill bool, check string) string {
	c := "go run ./cmd/sluice-bench judge-validation"
	if n != 141600 {
		c += fmt.Sprintf(" --n %d", n)
	}
	if arms != "" {
		c += " --arms " + arms
	}
	if noKill {
		c += " --no-kill"
	}
	if check != "" {
		c += " --scale-check " + check
	}
	return c
}

// writeValidation writes validation-judge.{md,json,svg} into docs (or the
// markdown to stdout when docs is empty).
func writeValidation(res *bench.JudgeValidationResult, docs, command string) error {
	res.Thin(500) // the plot needs no more; the files stay small
	var md, svg bytes.Buffer
	res.WriteMarkdown(&md, command, "validation-judge.svg")
	res.WriteSVG(&svg)
	js, _ := json.MarshalIndent(res, "", "  ")
	if docs == "" {
		os.Stdout.Write(md.Bytes())
		return nil
	}
	for name, b := range map[string][]byte{"validation-judge.md": md.Bytes(), "validation-judge.svg": svg.Bytes(), "validation-judge.json": append(js, '\n')} {
		if err := os.WriteFile(filepath.Join(docs, name), b, 0o644); err != nil {
			return err
		}
	}
	os.Stdout.Write(md.Bytes())
	fmt.Fprintf(os.Stderr, "wrote %s/validation-judge.{md,json,svg}\n", docs)
	return nil
}
