package guideplot_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/decide/plan"
	"github.com/sluice-dev/sluice/internal/see/guideplot"
	"github.com/sluice-dev/sluice/sim"
)

// TestGuidelinesUpToDate fails when docs/guidelines.md or its plot differ
// from what the generator writes now. Run `go run ./cmd/sluice guidelines`
// to regenerate them. (Moved from plan: the plot is drawn here.)
func TestGuidelinesUpToDate(t *testing.T) {
	md, svg := guidelines(t)
	md2, svg2 := guidelines(t)
	if !bytes.Equal(md, md2) || !bytes.Equal(svg, svg2) {
		t.Fatal("plan.Guidelines or its plot is not deterministic")
	}
	for _, f := range []struct {
		path string
		want []byte
	}{{"../../../docs/guidelines.md", md}, {"../../../docs/" + plan.GuidelinesPlot, svg}} {
		have, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, f.want) {
			t.Errorf("%s is stale: run `go run ./cmd/sluice guidelines` and commit it (first difference at line %d)", f.path, firstDiffLine(have, f.want))
		}
	}
}

// TestPlotDrawsBothRoutes: the SVG holds both panels' titles, the legends
// and the decade labels the guidelines read.
func TestPlotDrawsBothRoutes(t *testing.T) {
	_, svg := guidelines(t)
	for _, want := range []string{"predicted wall-clock", "predicted cost (USD)", "sync", "batch (50 %)", "1M", "10 h", "<svg"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("the plot lacks %q", want)
		}
	}
}

func guidelines(t *testing.T) (md, svg []byte) {
	t.Helper()
	md, p, err := plan.Guidelines(sim.PresetModel)
	if err != nil {
		t.Fatal(err)
	}
	svg, err = guideplot.SVG(p)
	if err != nil {
		t.Fatal(err)
	}
	return md, svg
}

func firstDiffLine(a, b []byte) int {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(la), len(lb)) {
		if !bytes.Equal(la[i], lb[i]) {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}
