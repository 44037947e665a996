package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/keys"
)

// SendProbe sends the limits probe — one Messages call of max_tokens 1,
// a one-word prompt — on model with key, and returns its outcome (the
// limit headers are in Outcome.Limits). Probe and `sluice keys --limits`
// send this one request.
func SendProbe(ctx context.Context, c *client.Client, key *keys.Key, model string) client.Outcome {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": "ping"}}})
	return c.Do(ctx, key, "POST", "/v1/messages", body)
}

// ProbeResult is what one limits probe learned and what it cost.
type ProbeResult struct {
	Sample  Sample
	Usage   api.Usage
	CostUSD float64
	// Reached: the API answered (any status); Why: what went wrong, when
	// no limits were read.
	Reached bool
	Why     string
}

// ProbeCostUSD is what one probe of model costs at most: a one-word
// prompt (under 20 input tokens with the message framing) and one output
// token, at the model's sync price — what `sluice plan` says before it
// sends one.
func ProbeCostUSD(model string) float64 { return cost.Estimate(model, 20, 1, false) }

// Probe sends one Messages call of max_tokens 1 on model with key (of
// organization org) and reads the limit headers of the answer. A probe
// that is not answered with limits (a 429 or 529 carries them too; a dead
// key, a gateway that strips them, no answer do not) is an error naming
// why; it is never retried.
func Probe(ctx context.Context, c *client.Client, key *keys.Key, org OrgRef, model string, now func() time.Time) (ProbeResult, error) {
	o := SendProbe(ctx, c, key, model)
	res := ProbeResult{Usage: o.Usage, Reached: o.Status != 0}
	if o.Class == client.OK {
		res.CostUSD = cost.Estimate(model, o.Usage.InputTokens, o.Usage.OutputTokens, false)
	}
	rl := o.Limits
	if !rl.Requests.Present && !rl.InputTokens.Present && !rl.OutputTokens.Present {
		why := o.Class.String()
		if o.Status != 0 {
			why = fmt.Sprintf("%s (HTTP %d)", why, o.Status)
		}
		res.Why = why
		return res, fmt.Errorf("observe: the probe of %s on %s got no rate-limit headers: %s", model, org.Label, why)
	}
	l := &Limits{Source: SourceProbe, At: now()}
	if rl.Requests.Present {
		l.RPM = float64(rl.Requests.Limit)
	}
	if rl.InputTokens.Present {
		l.ITPM = float64(rl.InputTokens.Limit)
	}
	if rl.OutputTokens.Present {
		l.OTPM = float64(rl.OutputTokens.Limit)
	}
	// How full the buckets are now, in seconds of refill: the emptiest
	// dimension's remaining (after this probe's own cost).
	l.RemainingSeconds = -1
	for _, d := range []api.LimitState{rl.Requests, rl.InputTokens, rl.OutputTokens} {
		if d.Present && d.Limit > 0 {
			s := float64(max(d.Remaining, 0)) / (float64(d.Limit) / 60)
			if l.RemainingSeconds < 0 || s < l.RemainingSeconds {
				l.RemainingSeconds = s
			}
		}
	}
	l.RemainingSeconds = max(l.RemainingSeconds, 0)
	res.Sample = Sample{OrgID: org.ID, Label: org.Label, Pool: api.PoolOf(model), Limits: l, At: l.At}
	return res, nil
}
