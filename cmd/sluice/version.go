package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// version is sluice's release number. It is the one owner of the number:
// the Python client (clients/python/sluice/_version.py) carries a copy that
// TestPythonClientVersion holds equal to it, and that client checks the
// binary it runs with `sluice version`.
const version = "0.1.0"

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print sluice's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "sluice", version)
			return err
		},
	}
}
