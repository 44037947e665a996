// Package view is what a person sees of a run: the live page that `run`,
// `judge` and `proxy` serve (--ui), its JSON (/api/status, /api/history),
// /metrics, and the self-contained HTML report (--report-html, `sluice
// report`). The page and the report are one HTML file with uPlot, the
// page's script and style inlined, so nothing is fetched from the network;
// the report also inlines its data (docs/see.md).
package view

import (
	"bytes"
	"embed"
	"encoding/json"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/see/history"
	"github.com/sluice-dev/sluice/internal/store/atomicfile"
)

//go:embed assets
var assets embed.FS

func asset(name string) string {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return string(b)
}

// UplotVersion is the charting library embedded in the page.
const UplotVersion = "1.6.32"

// page is the HTML template with its assets inlined; {{TITLE}} and
// {{DATA}} are filled per page.
var page = strings.NewReplacer(
	"{{UPLOT_CSS}}", asset("uplot.min.css"),
	"{{SEE_CSS}}", asset("see.css"),
	"{{UPLOT_JS}}", asset("uplot.iife.min.js"),
	"{{SEE_JS}}", asset("see.js"),
).Replace(asset("page.html"))

// render writes the page with title and data (JSON, or "null" for the
// live page, which fetches its data).
func render(w io.Writer, title string, data []byte) error {
	t := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(title)
	// json.Marshal escapes <, > and &: the data cannot close its script.
	before, after, _ := strings.Cut(page, "{{DATA}}")
	before = strings.Replace(before, "{{TITLE}}", t, 1)
	for _, s := range [][]byte{[]byte(before), data, []byte(after)} {
		if _, err := w.Write(s); err != nil {
			return err
		}
	}
	return nil
}

// ReportData is what a report inlines.
type ReportData struct {
	Title    string            `json:"title"`
	Timeline *history.Timeline `json:"timeline"`
}

// Report renders the self-contained report of tl.
func Report(w io.Writer, title string, tl *history.Timeline) error {
	data, err := json.Marshal(ReportData{Title: title, Timeline: tl})
	if err != nil {
		return err
	}
	return render(w, title, data)
}

// WriteReport writes the report of tl to path, replacing it whole.
func WriteReport(path, title string, tl *history.Timeline) error {
	var b bytes.Buffer
	if err := Report(&b, title, tl); err != nil {
		return err
	}
	return atomicfile.Write(path, 0o644, func(w io.Writer) error { _, err := w.Write(b.Bytes()); return err })
}

// WriteReportFromHistory reads the history at historyPath and writes its
// report to path: `sluice report`, for any run, a killed one included.
func WriteReportFromHistory(historyPath, path, title string) (*history.Timeline, error) {
	tl, err := history.Read(historyPath)
	if err != nil {
		return nil, err
	}
	return tl, WriteReport(path, title, tl)
}
