package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/observe"
)

// TestGuidelinesFromObservations: the page for your own organizations
// tabulates the orgs the observations hold, plans with their observed
// limits (two 600-RPM orgs send a million requests mostly to batch), says
// where each figure came from — observed for Sonnet, the etiquette caps'
// assumption for pools never observed — and refuses an empty file.
func TestGuidelinesFromObservations(t *testing.T) {
	obs := filepath.Join(t.TempDir(), "observations.json")
	now := time.Now()
	var samples []observe.Sample
	for _, o := range []struct{ id, label string }{{"org-1", "lab_a"}, {"org-2", "lab_b"}} {
		samples = append(samples, observe.Sample{OrgID: o.id, Label: o.label, Pool: api.PoolSonnet4, At: now,
			Limits:         &observe.Limits{RPM: 600, ITPM: 1_000_000, OTPM: 200_000, Source: observe.SourceHeaders, At: now},
			LatencySeconds: 4, MeanOutput: 150, N: 500, MaxTokens: 256, Attempts: 510})
	}
	if _, err := observe.Record(obs, now, samples...); err != nil {
		t.Fatal(err)
	}
	page, err := execute(t, guidelinesCmd(), "--from-observations", "--observations", obs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Guidelines for your organizations", "lab_a sonnet-4: limits RPM 600", "lab_b sonnet-4: limits RPM 600",
		"recent mean 4.00 s at 150 output tokens", "limits unknown — bounded by the etiquette cap", "## Haiku"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	sonnet := page[strings.Index(page, "## Sonnet"):strings.Index(page, "## Haiku")]
	latency := sonnet[strings.Index(sonnet, "### Latency-critical"):strings.Index(sonnet, "### Cost-critical")]
	var million string
	for _, line := range strings.Split(latency, "\n") {
		if strings.HasPrefix(line, "| 1,000,000 |") {
			million = line
		}
	}
	if million == "" || strings.Contains(million, "| sync |") {
		t.Errorf("a million Sonnet requests on two 600-RPM orgs: %q, want batch or a split", million)
	}

	empty := filepath.Join(t.TempDir(), "none.json")
	if _, err := execute(t, guidelinesCmd(), "--from-observations", "--observations", empty); err == nil || !strings.Contains(err.Error(), "holds no observations") {
		t.Errorf("an empty observations file: %v", err)
	}
}
