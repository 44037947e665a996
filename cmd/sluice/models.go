package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// EnvModels names model-table overlays (docs/models.md): a path, or
// several separated by the OS's path-list separator, applied before
// --models.
const EnvModels = "SLUICE_MODELS"

// modelsFlagUsage is the --models flag's help, shared by every command.
const modelsFlagUsage = "model table overlay: a JSON file of models (add one, correct a price) in the schema of docs/models.md, applied over the built-in table and $" + EnvModels

// useCatalog makes the built-in table with $SLUICE_MODELS's and then
// path's overlays the process's model table, and returns the restore of
// the previous one (a command ends with it, so tests that run commands in
// one process do not leak a table).
func useCatalog(path string) (restore func(), err error) {
	var paths []string
	if env := os.Getenv(EnvModels); env != "" {
		paths = append(paths, filepath.SplitList(env)...)
	}
	paths = append(paths, path)
	c, err := api.LoadCatalog(paths...)
	if err != nil {
		if path != "" || len(paths) > 1 {
			return func() {}, fmt.Errorf("%w (--models / $%s)", err, EnvModels)
		}
		return func() {}, err
	}
	return api.SetCatalog(c), nil
}

func modelsCmd() *cobra.Command {
	var (
		eng     engineFlags
		asJSON  bool
		offline bool
	)
	cmd := &cobra.Command{
		Use:   "models",
		Short: "Show the model table sluice uses, where each row came from, and what your keys may use",
		Long: `models prints the effective model table: the built-in one (embedded, each
row with the page it was read from and the date) with the overlays of
$SLUICE_MODELS and --models applied, and the rules of each API version.

With keys (the environment, .env or --keys-file) it also asks GET /v1/models
of each key — free — and lists the models each may use, flagging those the
API lists and the table lacks: their cost would be unknown until an overlay
prices them. --offline asks nothing.

To add a model without a release of sluice, write an overlay:

  {"schema": 1, "models": [{"id": "claude-new-1", "family": "sonnet",
    "pool": "sonnet-new", "prices": {"input": 3, "cache_write_5m": 3.75,
    "cache_write_1h": 6, "cache_read": 0.3, "output": 15},
    "source": "https://…", "read": "2027-01-01"}]}

and pass --models FILE (or set SLUICE_MODELS=FILE). docs/models.md gives
every field.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			restore, err := useCatalog(eng.models)
			if err != nil {
				return err
			}
			defer restore()
			c := api.Current()
			var listed []keyModels
			if !offline {
				listed, err = listKeyModels(cmd.Context(), &eng)
				if err != nil && !errors.Is(err, keys.ErrNoKeys) {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeModelsJSON(out, c, listed)
			}
			writeModelsTable(out, c, eng.version)
			writeKeyModels(out, c, listed)
			return nil
		},
	}
	eng.fleet.off = true
	eng.registerAPI(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&offline, "offline", false, "do not ask the API which models the keys may use")
	return cmd
}

// keyModels is what GET /v1/models told one key; it never holds a key
// value.
type keyModels struct {
	Label     string   `json:"label"`
	Org       string   `json:"org,omitempty"`
	Workspace string   `json:"workspace,omitempty"`
	Models    []string `json:"models,omitempty"`
	// Missing are the models the API lists that the table lacks.
	Missing []string `json:"missing,omitempty"`
	Err     string   `json:"error,omitempty"`
}

// listKeyModels asks GET /v1/models of every key, following the pages.
func listKeyModels(ctx context.Context, eng *engineFlags) ([]keyModels, error) {
	log := newLogger()
	pool, err := eng.loadKeys(log)
	if err != nil {
		return nil, err
	}
	cl, err := eng.client(16)
	if err != nil {
		return nil, err
	}
	var out []keyModels
	for _, k := range pool.Keys() {
		km := keyModels{Label: k.Label(), Workspace: k.Workspace()}
		ids, org, err := listModels(ctx, cl, k)
		km.Org = org
		if err != nil {
			km.Err = pool.Redact(err.Error())
		}
		km.Models = ids
		for _, id := range ids {
			if _, ok := api.LookupModel(id); !ok {
				km.Missing = append(km.Missing, id)
			}
		}
		out = append(out, km)
	}
	return out, nil
}

// listModels pages through GET /v1/models with key.
func listModels(ctx context.Context, cl *client.Client, key *keys.Key) (ids []string, org string, err error) {
	after := ""
	for range 100 { // a bound: 100 pages of 1,000
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after_id", after)
		}
		o := cl.Do(ctx, key, "GET", "/v1/models?"+q.Encode(), nil)
		if o.OrgID != "" {
			org = o.OrgID
		}
		if o.Class != client.OK {
			if o.Err == nil {
				o.Err = fmt.Errorf("HTTP %d", o.Status)
			}
			return ids, org, o.Err
		}
		var page api.Page[api.ModelObject]
		if err := json.Unmarshal(o.Body, &page); err != nil {
			return ids, org, fmt.Errorf("GET /v1/models: %w", err)
		}
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if !page.HasMore || page.LastID == nil {
			return ids, org, nil
		}
		after = *page.LastID
	}
	return ids, org, errors.New("GET /v1/models: more than 100 pages")
}

// modelRow is one model of `sluice models --json`.
type modelRow struct {
	ID            string            `json:"id"`
	Aliases       []string          `json:"aliases,omitempty"`
	Family        api.Family        `json:"family"`
	Pool          api.Pool          `json:"pool"`
	Prices        *api.Prices       `json:"prices"`
	LongContext   *api.LongContext  `json:"long_context,omitempty"`
	BatchDiscount float64           `json:"batch_discount"`
	MaxOutput     int               `json:"max_output,omitempty"`
	MinCacheable  int               `json:"min_cacheable,omitempty"`
	Sampling      map[string]string `json:"sampling"`
	Origin        string            `json:"origin"`
	Source        string            `json:"source"`
	Read          string            `json:"read"`
	Note          string            `json:"note,omitempty"`
}

func rowOf(c *api.Catalog, m api.ModelInfo) modelRow {
	r := modelRow{ID: m.ID, Aliases: m.Aliases, Family: m.Family, Pool: m.Pool, LongContext: m.LongContext, BatchDiscount: m.Discount(),
		MaxOutput: m.MaxOutput, MinCacheable: m.MinCacheable, Origin: m.Origin, Source: m.Source, Read: m.Read, Note: m.Note, Sampling: map[string]string{}}
	if m.Priced {
		p := m.Prices
		r.Prices = &p
	}
	for _, v := range c.Versions() {
		r.Sampling[v.Version] = string(c.Rules(v.Version, m.ID).Sampling)
	}
	return r
}

func writeModelsJSON(w io.Writer, c *api.Catalog, listed []keyModels) error {
	var out struct {
		Overlays []string           `json:"overlays,omitempty"`
		Versions []api.VersionRules `json:"versions"`
		Models   []modelRow         `json:"models"`
		Keys     []keyModels        `json:"keys,omitempty"`
	}
	out.Overlays, out.Versions, out.Keys = c.Overlays, c.Versions(), listed
	for _, m := range c.Models() {
		out.Models = append(out.Models, rowOf(c, m))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeModelsTable prints the effective table, version sends is the one
// sluice sends by default for this command line.
func writeModelsTable(w io.Writer, c *api.Catalog, version string) {
	fmt.Fprintf(w, "model table: built-in")
	for _, o := range c.Overlays {
		fmt.Fprintf(w, " + %s", o)
	}
	fmt.Fprintf(w, " (prices USD per million tokens: input / output, cache read as a multiple of input)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "model\tpool\tfamily\tin / out\tcache read\tlong context\tbatch\tsampling ("+version+")\tfrom")
	for _, m := range c.Models() {
		price, read := "no price", "—"
		if m.Priced {
			price = fmt.Sprintf("%s / %s", num(m.Prices.Input), num(m.Prices.Output))
			if m.Prices.Input > 0 {
				read = fmt.Sprintf("%s (%s×)", num(m.Prices.CacheRead), strconv.FormatFloat(m.Prices.CacheRead/m.Prices.Input, 'g', 3, 64))
			}
		}
		long := "—"
		if lc := m.LongContext; lc != nil {
			long = fmt.Sprintf("×%s over %s %s tokens", num(lc.Multiplier), strconv.FormatInt(lc.Threshold, 10), lc.Measure)
		}
		from := m.Origin
		if from == api.BuiltinOrigin {
			from = "built-in"
		}
		from += fmt.Sprintf(" (%s, read %s)", m.Source, m.Read)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t×%s\t%s\t%s\n", m.ID, m.Pool, m.Family, price, read, long, num(m.Discount()),
			c.Rules(version, m.ID).Sampling, from)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAPI versions:")
	for _, v := range c.Versions() {
		var refuses []string
		if v.Sampling != "" && v.Sampling != api.SamplingAny {
			refuses = append(refuses, "sampling parameters ("+string(v.Sampling)+")")
		}
		if v.AssistantDocuments != nil && !*v.AssistantDocuments {
			refuses = append(refuses, "document blocks in assistant messages")
		}
		if v.UserCitations != nil && !*v.UserCitations {
			refuses = append(refuses, "citations on user text blocks")
		}
		what := "nothing the table checks"
		if len(refuses) > 0 {
			what = strings.Join(refuses, ", ")
		}
		fmt.Fprintf(w, "  %s refuses %s (%s, read %s)\n", v.Version, what, v.Source, v.Read)
	}
	if _, ok := c.Version(version); !ok {
		fmt.Fprintf(w, "  %s (the version sent) is not in the table: only the models' own rules are checked\n", version)
	}
}

func writeKeyModels(w io.Writer, c *api.Catalog, listed []keyModels) {
	if len(listed) == 0 {
		return
	}
	fmt.Fprintln(w, "\nwhat each key may use (GET /v1/models):")
	var missing []string
	for _, k := range listed {
		who := k.Label
		if k.Org != "" {
			who += " (org " + k.Org
			if k.Workspace != "" {
				who += ", workspace " + k.Workspace
			}
			who += ")"
		}
		if k.Err != "" {
			fmt.Fprintf(w, "  %s: %s\n", who, k.Err)
			continue
		}
		fmt.Fprintf(w, "  %s: %d models: %s\n", who, len(k.Models), strings.Join(k.Models, ", "))
		for _, m := range k.Missing {
			if !slices.Contains(missing, m) {
				missing = append(missing, m)
			}
		}
	}
	for _, m := range missing {
		fmt.Fprintf(w, "  not in the table: %s — its cost would be unknown; add it with --models FILE (docs/models.md)\n", m)
	}
}

// num prints a price or multiple without trailing zeros.
func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
