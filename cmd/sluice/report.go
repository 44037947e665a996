package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/internal/see/watch"
)

// historyOf finds the history of the run that wrote results: RESULTS.history
// for run, VERDICTS.results.jsonl.history for judge, or the path itself.
func historyOf(results string) (string, error) {
	for _, p := range []string{results + ".history", judgeHistory(results), results} {
		if strings.HasSuffix(p, ".history") {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("report: no history beside %s (looked for %s and %s): the run was made by a sluice without one, or in another directory", results, results+".history", judgeHistory(results))
}

func reportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RESULTS.jsonl [-o REPORT.html]",
		Short: "Build the self-contained HTML report of a run from its recorded history",
		Long: `report reads the history a run, a judge or a proxy recorded beside its results
(RESULTS.jsonl.history; for a judge, VERDICTS.jsonl.results.jsonl.history; or
a .history file named directly) and writes the same HTML report the run writes
when it ends: progress against the plan, cost, each lane's use of its limits,
429s, 529s and 5xx, batch chunks, events, keys, and the text report's tables.
It works for a run that was killed or is still running (what was recorded so
far). The file opens from disk, with no server and no network.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hist, err := historyOf(args[0])
			if err != nil {
				return err
			}
			if out == "" {
				base := strings.TrimSuffix(hist, ".history")
				base = strings.TrimSuffix(base, ".results.jsonl")
				out = reportPathFor(base)
			}
			tl, err := view.WriteReportFromHistory(hist, out, "sluice report: "+filepath.Base(args[0]))
			if err != nil {
				return err
			}
			state := "ended"
			if tl.Report == nil {
				state = "no end recorded: killed, or still running"
			} else if tl.Report.Status != "" {
				state = tl.Report.Status
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d points, %d events, %d segments (%s)\n", out, tl.Len(), len(tl.Events), len(tl.Segments), state)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write (default: beside the results, NAME.report.html)")
	return cmd
}

// exitNotRunning is sluice status's exit code when nothing is running.
const exitNotRunning = 3

func statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [RESULTS.jsonl]",
		Short: "Show a running run, judge or proxy: progress, lanes, cost, ETA",
		Long: `status asks the running sluice process that writes RESULTS.jsonl (found through
RESULTS.jsonl.ui.json, which a process serving its live view keeps beside its
results) for its status: done and total, ETA against the plan, cost, each
lane's state and binding limit, keys. Without an argument it asks every
sluice process of this user that serves a view. It says so, with exit status
3, when none is running. --json prints /api/status as it is.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var states []view.State
			if len(args) == 1 {
				st, err := view.ReadState(view.StatePath(args[0]))
				if errors.Is(err, os.ErrNotExist) {
					return &exitError{code: exitNotRunning, err: fmt.Errorf("status: no sluice is running for %s (no %s: a run serves its view unless --ui off)", args[0], view.StatePath(args[0]))}
				}
				if err != nil {
					return err
				}
				states = append(states, st)
			} else {
				states = view.Running()
			}
			w := cmd.OutOrStdout()
			found := 0
			for _, st := range states {
				if !view.Alive(st.PID) {
					if len(args) == 0 {
						os.Remove(filepath.Join(view.RunningDir(), fmt.Sprintf("%d.json", st.PID))) // a killed process's
					}
					continue
				}
				s, err := view.FetchStatus(st)
				if errors.Is(err, view.ErrNotRunning) {
					continue
				}
				if err != nil {
					if len(args) == 1 {
						return err
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "sluice status: pid %d (%s): %v\n", st.PID, st.Base, err)
					continue
				}
				found++
				if asJSON {
					b, _ := json.MarshalIndent(s, "", "  ")
					fmt.Fprintf(w, "%s\n", b)
					continue
				}
				printStatus(w, st, s)
			}
			if found == 0 {
				what := "no sluice process serving a view is running"
				if len(args) == 1 {
					what = "no sluice is running for " + args[0] + " (its process is gone)"
				}
				return &exitError{code: exitNotRunning, err: errors.New("status: " + what)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON (GET /api/status)")
	return cmd
}

// printStatus writes s as text.
func printStatus(w io.Writer, st view.State, s watch.Status) {
	fmt.Fprintf(w, "sluice %s (pid %d) %s", s.Cmd, s.PID, s.Phase)
	if st.Results != "" {
		fmt.Fprintf(w, " → %s", st.Results)
	}
	fmt.Fprintf(w, "\n  view: %s\n", st.URL)
	if s.Total > 0 {
		fmt.Fprintf(w, "  done %d / %d (%.1f %%), %.0f results/min, elapsed %s", s.Done, s.Total, 100*float64(s.Done)/float64(s.Total), s.RatePerMin, fmtSeconds(s.ElapsedSec))
		if s.ETASec >= 0 {
			fmt.Fprintf(w, ", eta %s", fmtSeconds(s.ETASec))
		}
		fmt.Fprintln(w)
	}
	if p := s.Plan; p != nil {
		fmt.Fprintf(w, "  route %s", p.Route)
		if p.Predicted > 0 {
			fmt.Fprintf(w, ", predicted %s", fmtSeconds(p.Predicted))
		}
		if p.Replans > 0 {
			fmt.Fprintf(w, ", %d re-plans", p.Replans)
		}
		fmt.Fprintln(w)
	}
	if s.Cost.Unpriced > 0 {
		fmt.Fprintf(w, "  cost unknown (priced part $%.4f; %d requests of models without a price, see --models", s.Cost.USD, s.Cost.Unpriced)
	} else {
		fmt.Fprintf(w, "  cost $%.4f (projected $%.4f", s.Cost.USD, s.Cost.Projected)
	}
	if s.Cost.MaxCost > 0 {
		fmt.Fprintf(w, ", --max-cost $%.2f", s.Cost.MaxCost)
	}
	fmt.Fprintf(w, "); retries: %d × 429, %d × 529, %d failed\n", s.Retries.RateLimited, s.Retries.Overloaded, s.Retries.Failed)
	if len(s.Lanes) > 0 {
		fmt.Fprintf(w, "  %-12s %-12s %14s %9s %8s %6s %6s  %s\n", "org", "pool", "in flight/lim", "ok/min", "ok", "429", "5xx", "binding")
	}
	for _, l := range s.Lanes {
		flag := ""
		if l.Dead {
			flag = " (dead)"
		}
		fmt.Fprintf(w, "  %-12s %-12s %9d/%-4d %9.0f %8d %6d %6d  %s%s\n", l.Org, l.Pool, l.InFlight, l.Limit, l.OKPerMin, l.OK, l.RateLimited, l.Failed, l.Binding, flag)
	}
	if b := s.Batch; b.Submitted > 0 {
		fmt.Fprintf(w, "  batch: %d submitted, %d answered, %d in flight, %d pending\n", b.Submitted, b.Results, b.InFlight, b.Pending)
	}
	for _, k := range s.Keys {
		if k.State != "live" {
			fmt.Fprintf(w, "  key %s (org %s): %s\n", k.Key, k.Org, k.State)
		}
	}
}

func fmtSeconds(s float64) string {
	if s < 0 {
		return "?"
	}
	n := int(s + 0.5)
	if n >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", n/3600, n/60%60, n%60)
	}
	return fmt.Sprintf("%d:%02d", n/60, n%60)
}
