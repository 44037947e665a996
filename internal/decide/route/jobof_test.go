package route

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/format/jsonl"
)

// A run's plan prices the lines over the long-context threshold in their
// own band, as `sluice plan --input` does: JobOf carries them.
func TestJobOfCarriesTheLongPart(t *testing.T) {
	s := jsonl.Summary{Valid: 100, EstInputTokens: 100*1000 + 10*250_000, LongLines: 10, LongEstInputTokens: 10 * 250_000,
		Models: map[string]int{"claude-sonnet-4-5": 100}}
	j := JobOf(s, 100)
	if j.Long.Share != 0.1 || j.Long.MeanInput != 250_000 {
		t.Errorf("JobOf's long part %+v, want a share of 0.1 at 250,000 tokens", j.Long)
	}
}
