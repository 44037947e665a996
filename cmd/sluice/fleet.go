package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/engine/fleet"
)

// envFleet and envFleetJob name the variables that set --fleet and
// --fleet-job.
const (
	envFleet    = "SLUICE_FLEET"
	envFleetJob = "SLUICE_FLEET_JOB"
)

// fleetFlags is --fleet on the commands that send work through the
// engine (run, judge, proxy; not keys): the lane budgets live in Redis,
// shared by every process naming the same fleet.
type fleetFlags struct {
	// off: the command takes no --fleet (set before engineFlags.register).
	off    bool
	url    string
	job    string
	joined *fleet.Fleet // set by the command's PreRunE when url is set
}

// register adds --fleet and --fleet-job to cmd and joins the fleet before
// cmd runs (so a fleet that cannot be reached stops the command before
// anything is sent). It chains any PreRunE already set; one set after it
// must chain this one.
func (ff *fleetFlags) register(cmd *cobra.Command, eng *engineFlags) {
	if ff.off {
		return
	}
	cmd.Flags().StringVar(&ff.url, "fleet", os.Getenv(envFleet),
		"share the lanes' concurrency caps and rate limits with every sluice process naming this Redis: redis://HOST:PORT/DB (env "+envFleet+")")
	cmd.Flags().StringVar(&ff.job, "fleet-job", os.Getenv(envFleetJob),
		"the job this process works for: processes naming one job share one fair share of each lane (default: the process is a job of its own; env "+envFleetJob+")")
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(cmd, args); err != nil {
				return err
			}
		}
		if ff.url == "" {
			return nil
		}
		label := cmd.Name()
		if len(args) > 0 {
			label += " " + filepath.Base(args[0])
		}
		f, err := fleet.Join(cmd.Context(), fleet.Config{URL: ff.url, Caps: eng.capsByFamily(), Job: ff.job, Label: label, Logger: newLogger()})
		if err != nil {
			return err
		}
		ff.joined = f
		cobra.OnFinalize(func() { f.Close() })
		return nil
	}
}

// wire makes cfg's lanes spend through the fleet, when one was joined.
func (ff *fleetFlags) wire(cfg *dispatch.Config) {
	if ff.joined != nil {
		cfg.NewBudget = ff.joined.NewBudget
	}
}

func fleetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Inspect a fleet: sluice processes sharing their organizations' limits through Redis",
		Long: `A fleet is every sluice process started with the same --fleet redis://HOST:PORT/DB
(or SLUICE_FLEET). Their lanes' concurrency caps and RPM / ITPM / OTPM buckets
are held in Redis, so together they are as polite as one process. See
docs/fleet.md.`,
	}
	var (
		url    string
		asJSON bool
	)
	status := &cobra.Command{
		Use:   "status",
		Short: "Members, permits in use against each lane's cap, and bucket levels",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				return errors.New("fleet status: --fleet redis://HOST:PORT/DB (or " + envFleet + ") is required")
			}
			rep, err := fleet.ReadStatus(cmd.Context(), url)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			rep.Print(cmd.OutOrStdout())
			return nil
		},
	}
	status.Flags().StringVar(&url, "fleet", os.Getenv(envFleet), "the fleet's Redis: redis://HOST:PORT/DB (env "+envFleet+")")
	status.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	cmd.AddCommand(status)
	return cmd
}
