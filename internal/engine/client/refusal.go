package client

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/keys"
)

// Refusal is a KeyDead outcome as keys.ApplyRefusal takes it: its scope in
// keys' terms, the pool of the refused call (keys.AllPools for one that is
// not per model), when it was sent and answered, and a reason naming the
// status. Any other outcome gives a zero Scope, which applies nothing.
func (o *Outcome) Refusal(pool api.Pool, sent, at time.Time) keys.Refusal {
	r := keys.Refusal{Pool: pool, Sent: sent, At: at, Reason: fmt.Sprintf("HTTP %d", o.Status)}
	if o.Err != nil {
		r.Reason = o.Err.Error()
	}
	if o.Class != KeyDead {
		return r
	}
	switch o.Scope() {
	case ScopeKey:
		r.Scope, r.Pool = keys.RefusedKey, keys.AllPools
	case ScopeKeyModel:
		r.Scope = keys.RefusedKeyPool
	case ScopeWorkspace:
		r.Scope = keys.RefusedWorkspace
	case ScopeOrg:
		r.Scope = keys.RefusedOrg
	}
	return r
}
