package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/observe"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// keyRow is one line of `sluice keys`; it never holds a key value.
type keyRow struct {
	Label  string `json:"label"`
	Last4  string `json:"last4"`
	Source string `json:"source"`
	Org    string `json:"org,omitempty"`
	// Workspace is the workspace the key's calls are charged to (its
	// answers' anthropic-workspace-id, else its line's workspace=).
	Workspace string                          `json:"workspace,omitempty"`
	Health    string                          `json:"health"`
	Limits    map[string]api.RateLimitHeaders `json:"limits,omitempty"`
}

func keysCmd() *cobra.Command {
	var (
		eng    engineFlags
		limits []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Show each key (label, last 4 characters), its organization, limits and health",
		Long: `keys probes every key with a free count_tokens call: the answer names the key's
organization and shows whether the key works. With --limits MODEL[,MODEL] it
also sends one max_tokens=1 message per key and model (a fraction of a cent)
to read the rate limits from the response headers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			restoreModels, err := useCatalog(eng.models)
			if err != nil {
				return err
			}
			defer restoreModels()
			log := newLogger()
			pool, err := eng.loadKeys(log)
			if err != nil {
				return err
			}
			c, err := eng.client(64)
			if err != nil {
				return err
			}
			model := "claude-sonnet-4-5"
			if len(limits) > 0 {
				model = limits[0]
			}
			disc, _ := dispatch.Discover(cmd.Context(), c, pool.Keys(), model)
			var rows []keyRow
			for _, d := range disc {
				k := d.Key
				row := keyRow{Label: k.Label(), Last4: k.Last4(), Source: k.Source(), Org: k.Org(), Workspace: k.ChargedWorkspace(), Health: "ok"}
				if dead, why := k.Dead(); dead {
					row.Health = "dead: " + why
				} else if d.Outcome.Class != client.OK {
					row.Health = fmt.Sprintf("probe: %s (HTTP %d)", d.Outcome.Class, d.Outcome.Status)
				}
				if dead, _ := k.Dead(); !dead {
					for _, m := range limits {
						o := observe.SendProbe(cmd.Context(), c, k, m)
						if row.Limits == nil {
							row.Limits = map[string]api.RateLimitHeaders{}
						}
						row.Limits[m] = o.Limits
					}
				}
				rows = append(rows, row)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			fmt.Fprintf(out, "%-12s %-6s %-28s %-38s %-24s %s\n", "label", "last4", "source", "organization", "workspace", "health")
			for _, r := range rows {
				ws := r.Workspace
				if ws == "" {
					ws = "-"
				}
				fmt.Fprintf(out, "%-12s %-6s %-28s %-38s %-24s %s\n", r.Label, r.Last4, r.Source, r.Org, ws, r.Health)
				for m, l := range r.Limits {
					fmt.Fprintf(out, "    %-28s RPM %s  ITPM %s  OTPM %s\n", m, limitText(l.Requests), limitText(l.InputTokens), limitText(l.OutputTokens))
				}
			}
			for _, w := range pool.SameOrgWarnings() {
				fmt.Fprintln(out, "warning:", w)
			}
			return nil
		},
	}
	eng.fleet.off = true // keys only probes: it joins no fleet, whatever SLUICE_FLEET says
	eng.register(cmd)
	cmd.Flags().StringSliceVar(&limits, "limits", nil, "models to read rate limits for (sends one 1-token message per key and model)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func limitText(s api.LimitState) string {
	if !s.Present {
		return "-"
	}
	return fmt.Sprintf("%d (%d left)", s.Limit, s.Remaining)
}
