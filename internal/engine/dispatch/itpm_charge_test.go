package dispatch

import (
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
)

// TestLaneChargesWhatTheAPICharges: a lane learns its input scale from
// what the API charged to ITPM — uncached input and cache writes, and
// cache reads only for a model whose reads count (Haiku 3.5).
func TestLaneChargesWhatTheAPICharges(t *testing.T) {
	u := api.Usage{InputTokens: 300, CacheCreationInputTokens: 20, CacheReadInputTokens: 3000}
	for _, tc := range []struct {
		model string
		want  float64
	}{
		{"claude-sonnet-4-5", 320},
		{"claude-3-5-haiku-20241022", 3320},
	} {
		a := &attempt{it: &item{req: &Request{Model: tc.model}}}
		o := client.Outcome{Class: client.OK, Status: 200, Usage: u}
		if got := laneResult(a, &o).InputTokens; got != tc.want {
			t.Errorf("%s: charged %v, want %v", tc.model, got, tc.want)
		}
	}
}
