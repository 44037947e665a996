package dispatch

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/keys"
)

// Discovery is what probing one key found.
type Discovery struct {
	Key     *keys.Key
	Outcome client.Outcome
}

// Discover probes every live key in parallel (free count_tokens calls),
// sets each key's organization from the answer, and marks keys that get
// 401/403 dead. A key whose probe is refused for another reason (a gateway
// without count_tokens, a 5xx) gets a provisional org of its own, "key:" +
// its label, so it still works; its real org shows in later answers. It
// returns an error only when no key is left alive.
func Discover(ctx context.Context, c *client.Client, ks []*keys.Key, model string) ([]Discovery, error) {
	out := make([]Discovery, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		if dead, _ := k.Dead(); dead {
			out[i] = Discovery{Key: k}
			continue
		}
		wg.Go(func() {
			var o client.Outcome
			for try := 0; try < 3; try++ {
				o = c.Probe(ctx, k, model)
				if o.Class != client.Transport && o.Class != client.ServerError && o.Class != client.Overloaded {
					break
				}
			}
			out[i] = Discovery{Key: k, Outcome: o}
		})
	}
	wg.Wait()
	for _, d := range out {
		// The client never follows a redirect (the key would go with it);
		// one means the base URL is not the API's, for every key alike:
		// stop before a request is sent rather than error each of them.
		if o := d.Outcome; o.Status >= 300 && o.Status < 400 {
			return out, fmt.Errorf("dispatch: the key probe was answered with a redirect: %w", o.Err)
		}
	}
	live := 0
	for _, d := range out {
		k, o := d.Key, d.Outcome
		if dead, _ := k.Dead(); dead {
			continue
		}
		switch {
		case o.Class == client.KeyDead:
			k.MarkDead(fmt.Sprintf("probe: HTTP %d", o.Status))
			continue
		case o.OrgID != "":
			k.SetOrg(o.OrgID)
		default:
			k.SetOrg("key:" + k.Label())
		}
		live++
	}
	if live == 0 {
		return out, fmt.Errorf("%w: every key failed its probe", ErrNoLiveKey)
	}
	return out, nil
}
