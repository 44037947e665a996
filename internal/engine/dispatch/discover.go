package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// Discovery is what probing one key found.
type Discovery struct {
	Key     *keys.Key
	Outcome client.Outcome
}

// Discover probes every live key in parallel (free count_tokens calls),
// sets each key's organization from the answer, and marks a key refused
// twice (a re-probe Health().ProbeAfter after the first refusal) dead: a
// 401 for the run, a 403 for the probed model's pool only (the key stays
// for other models). A key whose probe is refused for another reason (a
// gateway without count_tokens, a 5xx) gets a provisional org of its own,
// "key:" + its label, so it still works; its real org shows in later
// answers. A key whose workspace the API refuses (a mistyped
// workspace=) is dead, and Discover returns ErrWorkspaceRefused naming it;
// otherwise it returns an error only when no key is left alive.
func Discover(ctx context.Context, c *client.Client, ks []*keys.Key, model string) ([]Discovery, error) {
	out := make([]Discovery, len(ks))
	var wg sync.WaitGroup
	for i, k := range ks {
		if dead, _ := k.Dead(); dead {
			out[i] = Discovery{Key: k}
			continue
		}
		wg.Go(func() {
			o := probe(ctx, c, k, model)
			if o.Class == client.KeyDead && o.Scope() != client.ScopeOrg {
				// One refusal is not proof (auth can fail for everyone
				// for a moment): the key is dead only if a re-probe a
				// little later is refused too.
				if sleepCtx(ctx, k.Health().ProbeAfter) == nil {
					o = probe(ctx, c, k, model)
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
	var badWS []error
	for _, d := range out {
		k, o := d.Key, d.Outcome
		if dead, _ := k.Dead(); dead {
			continue
		}
		k.NoteWorkspace(o.WorkspaceID)
		if why, bad := workspaceRefused(k, o); bad {
			k.MarkDead(why)
			_, why = k.Dead() // as recorded: the key's own value redacted
			badWS = append(badWS, fmt.Errorf("key %s: workspace %s: %s", k, k.Workspace(), why))
			continue
		}
		switch {
		case o.Class == client.KeyDead && o.Scope() == client.ScopeKeyModel:
			// Refused this model, not necessarily every model: the key
			// stays for the others, and is not counted live for this one.
			k.MarkDeadFor(api.PoolOf(model), fmt.Sprintf("probe: HTTP %d for %s", o.Status, model))
			k.SetOrg(o.OrgID)
			if k.Org() == "" {
				k.SetOrg("key:" + k.Label())
			}
			continue
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
	if len(badWS) > 0 {
		return out, fmt.Errorf("%w (check workspace= on the key's keys-file line): %w", ErrWorkspaceRefused, errors.Join(badWS...))
	}
	if live == 0 {
		return out, fmt.Errorf("%w: every key failed its probe", ErrNoLiveKey)
	}
	return out, nil
}

// ErrWorkspaceRefused means the API refused the workspace a key sends
// (anthropic-workspace-id): a mistyped id, or one the key may not use.
// Discover returns it, wrapped with each such key's label and workspace,
// so a job stops before anything is paid for rather than run without the
// key.
var ErrWorkspaceRefused = errors.New("dispatch: the API refused a key's workspace")

// workspaceRefused reports whether the probe's answer refuses the
// workspace key k sends, and why. The API's wording is not published:
// "if sent, it must match" is all the docs say (API overview, request
// headers). So any 401, 403 or 404 to a key that sends a workspace, whose
// error message names a workspace, counts (docs/models.md); a workspace's
// own spend limit (a 400) is not a refusal of the id.
func workspaceRefused(k *keys.Key, o client.Outcome) (string, bool) {
	if k.Workspace() == "" || o.Status != 401 && o.Status != 403 && o.Status != 404 {
		return "", false
	}
	var eb api.ErrorBody
	if json.Unmarshal(o.Body, &eb) != nil || !strings.Contains(strings.ToLower(eb.Err.Message), "workspace") {
		return "", false
	}
	return fmt.Sprintf("probe: HTTP %d: %s", o.Status, eb.Err.Message), true
}

// probe is one key probe, tried again (up to three times) when the API
// did not answer it.
func probe(ctx context.Context, c *client.Client, k *keys.Key, model string) client.Outcome {
	var o client.Outcome
	for try := 0; try < 3; try++ {
		o = c.Probe(ctx, k, model)
		if o.Class != client.Transport && o.Class != client.ServerError && o.Class != client.Overloaded {
			break
		}
	}
	return o
}

// sleepCtx waits d or until ctx ends, and returns ctx's error then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// KeyJoiner is what takes keys mid-run: the Dispatcher, the batch Runner.
type KeyJoiner interface {
	AddKeys(ctx context.Context, ks []*keys.Key) error
}

// Rotator applies re-read key sources to a running job: run, judge and
// the proxy each make one (the one owner of a rotation). It knows every
// key the job has had, so a removed key retires only once its
// organization has another usable key (keys.Key.Replaced).
type Rotator struct {
	c     *client.Client
	model string
	log   *slog.Logger

	mu  sync.Mutex
	all []*keys.Key // the job's first keys and every key added since
}

// NewRotator returns the Rotator of a job that started with keys start
// (discovered), probing added keys with model.
func NewRotator(c *client.Client, start []*keys.Key, model string, log *slog.Logger) *Rotator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Rotator{c: c, model: model, log: log, all: append([]*keys.Key(nil), start...)}
}

// Apply applies one rotation: it probes the added keys (Discover, so a
// bad new key is dead before it is sent anything) and adds the live ones
// to every joiner, then marks the removed keys and retires each one that
// is replaced (each takes no new attempt; its attempts in flight, and its
// batches in flight, finish). A removed key whose organization has no
// other usable key — its replacement was refused, or none was given —
// stays in use, with an error in the log naming it; it retires at a
// later rotation that brings its organization a working key. So a
// rotation never leaves an organization keyless, and a dispatcher with
// queued work never ends with ErrNoLiveKey because of one. It returns the
// added keys' discoveries, for the report.
func (r *Rotator) Apply(ctx context.Context, rot keys.Rotation, joiners ...KeyJoiner) ([]Discovery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var disc []Discovery
	if len(rot.Added) > 0 {
		var err error
		disc, err = Discover(ctx, r.c, rot.Added, r.model)
		// A new key whose workspace is refused is dead and left out
		// (logged below); the run goes on with the others.
		if err != nil && !errors.Is(err, ErrNoLiveKey) && !errors.Is(err, ErrWorkspaceRefused) {
			return disc, err
		}
		var live []*keys.Key
		for _, d := range disc {
			if dead, why := d.Key.Dead(); dead {
				r.log.Warn("a new key is not usable", "key", d.Key, "reason", why)
				continue
			}
			live = append(live, d.Key)
		}
		for _, j := range joiners {
			if err := j.AddKeys(ctx, live); err != nil {
				return disc, err
			}
		}
		r.all = append(r.all, rot.Added...)
	}
	for _, k := range rot.Removed {
		k.MarkRemoved()
		if !slices.Contains(r.all, k) {
			r.all = append(r.all, k)
		}
	}
	for _, k := range r.all {
		if !k.Removed() || k.Retired() {
			continue
		}
		if !k.Replaced(r.all) {
			r.log.Error("a key removed from its sources stays in use: its organization has no other working key; add one and it leaves", "key", k, "org", k.Org())
			continue
		}
		if k.Retire() {
			r.log.Info("key left the run (removed from its sources); its requests in flight finish", "key", k)
		}
	}
	return disc, nil
}
