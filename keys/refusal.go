package keys

import (
	"time"

	"github.com/sluice-dev/sluice/api"
)

// RefusalScope is what the API refused when it refused a key. The client
// classifies an answer into a scope; ApplyRefusal is the one rule for what
// each scope does to the keys, whoever sent the call (the sync dispatcher,
// the batch path).
type RefusalScope uint8

// The refusal scopes. The zero scope is no refusal.
const (
	// RefusedKey: the key as a whole (401 authentication_error). Evidence,
	// not proof — the API's authentication can fail for everyone for a
	// few seconds — so the key's health rule decides (Key.Refused).
	RefusedKey RefusalScope = iota + 1
	// RefusedKeyPool: the key for one model pool (403 permission_error:
	// a key can be refused one model and allowed others); the health rule
	// for that pool. With Pool AllPools (an endpoint that is not per
	// model, such as the batch endpoints) it is the key's as a whole.
	RefusedKeyPool
	// RefusedWorkspace: the key's workspace reached the spend limit set
	// on it (HTTP 400 "You have reached your specified workspace API usage
	// limits"). Every key of that workspace is refused until the limit
	// resets or is raised, but sluice does not know which keys share it,
	// and an organization's workspaces are separate: the key is dead at
	// once and its organization's other keys stay (one in the same
	// workspace dies at its own first refusal, which is not billed).
	RefusedWorkspace
	// RefusedOrg: the organization cannot pay — 402 billing_error, the
	// tier's monthly spend cap (429 enforced_spend_limit_reached), an
	// exhausted credit balance, or the limit the organization set itself
	// (HTTP 400 "You have reached your specified API usage limits").
	// Billing, credit and these limits are the organization's, shared by
	// every key of it, and none lifts within a run: every key of the
	// organization is dead at once.
	RefusedOrg
)

// Refusal is one refusal of a key, as the client classified it.
type Refusal struct {
	Scope RefusalScope
	// Pool is the model pool of the refused call (RefusedKeyPool), or
	// AllPools for a call that is not per model.
	Pool api.Pool
	// Sent is when the refused call was sent, At when its refusal came:
	// a refusal is new evidence against a suspect key only from a call
	// sent after the suspicion began (Key.Refused).
	Sent, At time.Time
	// Reason is kept, redacted, as the dead key's reason.
	Reason string
}

// ApplyRefusal applies r to k. org holds the keys the caller uses for k's
// organization (k may be among them); for RefusedOrg every one of them
// with k's organization id dies with k, the others are left alone. It
// returns the verdict on k (for RefusedKeyPool with a pool, the verdict
// for that pool: Killed then means dead for the pool only, the key lives)
// and the keys it killed as a whole, each only the first time (a key
// already dead is not returned), for the caller to log and stop using.
// A zero Scope applies nothing.
func ApplyRefusal(k *Key, org []*Key, r Refusal) (Verdict, []*Key) {
	switch r.Scope {
	case RefusedKey, RefusedKeyPool:
		pool := r.Pool
		if r.Scope == RefusedKey {
			pool = AllPools
		}
		v := k.Refused(r.At, r.Sent, pool, r.Reason)
		if v == Killed && pool == AllPools {
			return v, []*Key{k}
		}
		return v, nil
	case RefusedWorkspace:
		if !k.MarkDead(r.Reason) {
			return AlreadyDead, nil
		}
		return Killed, []*Key{k}
	case RefusedOrg:
		v := AlreadyDead
		var killed []*Key
		if k.MarkDead(r.Reason) {
			v, killed = Killed, append(killed, k)
		}
		for _, x := range org {
			if x != k && k.Org() != "" && x.Org() == k.Org() && x.MarkDead(r.Reason) {
				killed = append(killed, x)
			}
		}
		return v, killed
	}
	return 0, nil
}
