package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluice-dev/sluice/internal/front/job"
	"github.com/sluice-dev/sluice/internal/front/judgejob"
	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/judge"
)

func judgeCmd() *cobra.Command {
	var (
		eng         engineFlags
		rf          routeFlags
		cf          cacheFlags
		output      string
		rubricPath  string
		template    string
		fields      string
		sentinels   []string
		model       string
		maxTokens   int
		temperature float64
		redrive     string
		keepRaw     bool
		summaryPath string
		csvPath     string
		reportPath  string
		maxCost     float64
		grace       time.Duration
		noProgress  bool
		sf          seeFlags
	)
	cmd := &cobra.Command{
		Use:   "judge ITEMS.jsonl -o VERDICTS.jsonl [--rubric RUBRIC]",
		Short: "Score items with an LLM judge against a rubric, on every key at once",
		Long: `judge asks a judge model (default ` + judge.DefaultModel + `) to score every item of
ITEMS.jsonl against a rubric, and writes one classified verdict per item to
VERDICTS.jsonl and a per-group summary to the terminal.

Items are JSON objects, one per line: {"id": "…", "question": "…",
"completion": "…", "groups": ["…"]}; every key but id and groups is a field
the user-message template can use as {name}.

The rubric (--rubric FILE) is the system prompt: a Markdown or text file, or
a JSON rubric ({"system", "template", "fields", "sentinels"}; docs/judge.md).
Without one, the built-in rubric scores "aligned" and "coherent" 0-100.

Each verdict's class says what happened: ok, parse_error, truncated, refused,
invalid_request or transport. Requests go through the same engine and planner
as sluice run (fan-out over every key, sync or batch); answers are kept in the
response cache (--cache-mode), so a re-run costs nothing. Re-running the same
command resumes and drives transport rows again; --redrive parse_error,truncated
asks those classes again (with a larger --max-tokens, say).

Keys come from the environment, ./.env or --keys-file; never from the command line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			restoreModels, err := useCatalog(eng.models)
			if err != nil {
				return err
			}
			defer restoreModels()
			if output == "" {
				return errors.New("judge: -o VERDICTS.jsonl is required")
			}
			cfg := judgejob.Config{Output: output, Model: model, MaxTokens: maxTokens, KeepRaw: keepRaw}
			if cfg.Rubric, err = loadRubric(rubricPath, template, fields, sentinels); err != nil {
				return err
			}
			if cmd.Flags().Changed("temperature") {
				cfg.Temperature = &temperature
			}
			if redrive != "" {
				if cfg.Redrive, err = judge.ParseClasses(redrive); err != nil {
					return err
				}
			}
			if err := rf.fromEnv(cmd); err != nil {
				return err
			}
			log := newLogger()
			// The view first: its URL is the first line printed.
			see, err := sf.start("judge", output, judgeHistory(output), "sluice judge: "+args[0]+" → "+output, os.Stderr, log)
			if err != nil {
				return err
			}
			defer see.stop()
			pool, c, err := eng.keysAndClient(log)
			if err != nil {
				return err
			}
			rc, err := cf.open(cmd, log)
			if err != nil {
				return err
			}
			defer rc.Close()
			cfg.Cache = rc
			watchCtx, stopWatch := context.WithCancel(cmd.Context()) // the key watch ends with the job
			defer stopWatch()
			rt := rf.router(pool.Keys(), c, nil, log)
			cfg.Engine = job.Options{
				MaxCost: maxCost, Grace: grace, Dispatch: eng.dispatchConfig(c, pool, log),
				Terminal: term.IsTerminal(int(os.Stderr.Fd())), Logger: log, Redact: redactLoaded, LockWait: resultsLockWait,
				Rotations: eng.watchKeys(watchCtx, pool, log),
				Command:   "sluice " + strings.Join(os.Args[1:], " "),
				Observe:   rf.observer(log),
			}
			cfg.Engine.RoutedBy(rt)
			cfg.Engine.Watch = see.w
			if !noProgress {
				cfg.Engine.Progress = os.Stderr
			}
			return withSignals(cmd.Context(), grace, func(ctx context.Context, abort <-chan struct{}) error {
				cfg.Engine.Abort = abort
				res, err := judgejob.RunFile(ctx, args[0], cfg)
				var rep *job.Report
				var jd any
				if res != nil {
					rep = res.Report
					jd = view.Judge(res.Summary, output)
				}
				if serr := see.finish(rep, jd, err, sf.reportPath(output), os.Stderr); serr != nil {
					log.Warn("the run's history or report", "err", serr)
				}
				if res == nil {
					return err
				}
				if res.Report != nil {
					res.Report.Summary(os.Stderr)
					if reportPath != "" {
						err = errors.Join(err, res.Report.WriteJSON(reportPath))
					}
				}
				fmt.Printf("\nverdicts: %d written to %s", res.Judged, output)
				if res.Pending > 0 {
					fmt.Printf(", %d items pending (re-run the same command to resume)", res.Pending)
				}
				fmt.Printf("\nrubric %s, model %s\n\n", res.Rubric[:12], cfg.Model)
				if werr := res.Summary.WriteText(os.Stdout); werr != nil {
					err = errors.Join(err, werr)
				}
				if summaryPath != "" {
					b, _ := json.MarshalIndent(res.Summary, "", "  ")
					err = errors.Join(err, os.WriteFile(summaryPath, append(b, '\n'), 0o644))
				}
				if csvPath != "" {
					err = errors.Join(err, writeCSV(csvPath, res.Summary))
				}
				return err
			})
		},
	}
	eng.register(cmd)
	rf.register(cmd.Flags())
	cf.register(cmd.Flags(), "on")
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "verdicts file (its work files live beside it; re-run to resume)")
	fl.StringVar(&rubricPath, "rubric", "", "rubric file: the system prompt (Markdown/text) or a JSON rubric (default: the built-in aligned/coherent rubric)")
	fl.StringVar(&template, "template", "", "file holding the user-message template, with {field} placeholders (default: question and answer)")
	fl.StringVar(&fields, "fields", "", "declared reply fields, e.g. score:int:0:10,reasoning?:string (with a text rubric; default: any JSON object)")
	fl.StringSliceVar(&sentinels, "sentinel", nil, "a whole reply that counts as a verdict without JSON, e.g. REFUSAL (repeatable)")
	fl.StringVar(&model, "model", judge.DefaultModel, "judge model")
	fl.IntVar(&maxTokens, "max-tokens", judge.DefaultMaxTokens, "max_tokens of each judge request")
	fl.Float64Var(&temperature, "temperature", 0, "sampling temperature (default: the API's)")
	fl.StringVar(&redrive, "redrive", "", "ask again the items whose verdict is of these classes: parse_error, truncated, refused, invalid_request (transport rows always are)")
	fl.BoolVar(&keepRaw, "keep-raw", false, "keep the reply text in every verdict (always kept for parse_error and truncated)")
	fl.StringVar(&summaryPath, "summary", "", "write the summary as JSON here")
	fl.StringVar(&csvPath, "csv", "", "write the summary as CSV here")
	fl.StringVar(&reportPath, "report", "", "write the engine's JSON report here")
	fl.Float64Var(&maxCost, "max-cost", 0, "stop admitting requests once this many USD are spent (0: no limit)")
	fl.DurationVar(&grace, "grace", 30*time.Second, "on interrupt, how long requests in flight may finish")
	fl.BoolVar(&noProgress, "no-progress", false, "no progress display or log lines")
	sf.register(fl, true)
	return cmd
}

// judgeHistory is the history of the judge writing output: beside its
// engine results file (judgejob's OUT.results.jsonl).
func judgeHistory(output string) string { return output + ".results.jsonl.history" }

// loadRubric reads the rubric the flags name (the built-in one without
// --rubric) and applies --template, --fields and --sentinel.
func loadRubric(path, templatePath, fields string, sentinels []string) (*judge.Rubric, error) {
	r := judge.DefaultRubric()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("judge: --rubric: %w", err)
		}
		if r, err = judge.ParseRubric(b); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if templatePath != "" {
		b, err := os.ReadFile(templatePath)
		if err != nil {
			return nil, fmt.Errorf("judge: --template: %w", err)
		}
		r.Template = string(b)
	}
	if fields != "" {
		fs, err := judge.ParseFields(fields)
		if err != nil {
			return nil, err
		}
		r.Fields = fs
	}
	r.Sentinels = append(r.Sentinels, sentinels...)
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

func writeCSV(path string, s judge.Summary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := s.WriteCSV(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
