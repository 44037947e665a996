package main

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/see/view"
	"github.com/sluice-dev/sluice/internal/see/watch"
)

// sluice status says a cost with unpriced requests is unknown, gives the
// priced part and the count, and no projection; a forced route has no
// prediction to print.
func TestStatusPrintsUnknownCost(t *testing.T) {
	var b strings.Builder
	s := watch.Status{Cmd: "run", PID: 7, Total: 100, Done: 40, Plan: &watch.Plan{Route: "sync"}}
	s.Cost.USD, s.Cost.Unpriced, s.Cost.Projected = 0.25, 12, 99
	printStatus(&b, view.State{}, s)
	out := b.String()
	if !strings.Contains(out, "cost unknown (priced part $0.2500; 12 requests of models without a price") {
		t.Errorf("status does not say the cost is unknown:\n%s", out)
	}
	if strings.Contains(out, "projected") || strings.Contains(out, "predicted") {
		t.Errorf("status projects an unknown cost or predicts a forced route:\n%s", out)
	}
}
