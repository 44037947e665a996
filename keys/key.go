// Package keys loads the Anthropic API keys sluice drives and keeps their
// values secret.
//
// A key value leaves this package only through [Key.Apply], which writes it
// into the headers of an outgoing request; this file is where that is
// enforced. Every other view of a [Key] — fmt with any verb, encoding/json,
// encoding.TextMarshaler, log/slog — is its redacted form label(…last4), and
// [Pool.Redact] scrubs key values out of text from lower layers.
package keys

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/sluice-dev/sluice/api"
)

// AuthStyle is how [Key.Apply] puts a key on a request.
type AuthStyle int

const (
	// AuthXAPIKey sends the key in the x-api-key header, as the Anthropic API
	// expects. It is the zero value.
	AuthXAPIKey AuthStyle = iota
	// AuthBearer sends "Authorization: Bearer <key>", for gateways that take
	// a bearer token.
	AuthBearer
)

// String returns "x-api-key" or "bearer", the names ParseAuthStyle accepts.
func (s AuthStyle) String() string {
	switch s {
	case AuthXAPIKey:
		return "x-api-key"
	case AuthBearer:
		return "bearer"
	}
	return fmt.Sprintf("AuthStyle(%d)", int(s))
}

// ParseAuthStyle returns the style named "x-api-key" or "bearer"
// (case-insensitive).
func ParseAuthStyle(s string) (AuthStyle, error) {
	switch strings.ToLower(s) {
	case "x-api-key":
		return AuthXAPIKey, nil
	case "bearer":
		return AuthBearer, nil
	}
	return 0, fmt.Errorf("keys: unknown auth style %q (want x-api-key or bearer)", s)
}

// last4Min is the shortest value whose last four characters are shown in
// the redacted form; a shorter value would give away too large a share.
const last4Min = 16

// Key is one API key: a secret value, the label it is known by, where it
// was loaded from, and what sluice learns about it while running (its
// organization, whether it is dead).
//
// A Key is a handle: copies share one state. Keys are made by [Load]; the
// zero Key has no value, prints as "keys.Key(zero)", and its Apply, SetOrg
// and MarkDead panic.
//
// A Key is safe for concurrent use.
type Key struct{ k *key }

// key is the state behind a Key. secret, label, source, last4 and redacted
// never change after newKey.
//
// The value is held only inside the secret closure. fmt prints what it
// reaches by reflection when it cannot call methods — a Key in an unexported
// struct field, or any value under a verb it rejects, such as %s on a
// pointer, which it then dereferences and prints with %v — but a func value
// prints as an address: nothing reflection can reach holds the value.
type key struct {
	secret   func() string
	label    string
	source   string
	last4    string
	redacted string
	// workspace is the anthropic-workspace-id the key sends ("" : none),
	// from its keys-file line; not a secret.
	workspace string

	mu      sync.Mutex
	org     string // guarded by mu
	charged string // guarded by mu: the workspace its answers name
	dead    bool   // guarded by mu
	reason  string // guarded by mu
	health  health // guarded by mu
	policy  Health // guarded by mu
	retired bool   // guarded by mu
	removed bool   // guarded by mu: gone from its sources, kept until replaced
}

func newKey(label, source, secret string) *Key {
	k := &key{secret: func() string { return secret }, label: label, source: source, policy: DefaultHealth}
	if len(secret) >= last4Min {
		k.last4 = secret[len(secret)-4:]
	}
	k.redacted = label + "(…" + k.last4 + ")"
	return &Key{k: k}
}

// Label returns the key's name in this run, such as "high_prio". Labels are
// unique within a Pool and match [A-Za-z0-9_.-]+.
func (k Key) Label() string {
	if k.k == nil {
		return ""
	}
	return k.k.label
}

// Workspace returns the workspace id the key sends as
// anthropic-workspace-id, or "" when its line names none (a key scoped to
// one workspace needs none).
func (k Key) Workspace() string {
	if k.k == nil {
		return ""
	}
	return k.k.workspace
}

// NoteWorkspace records the workspace the API charged the key's call to,
// as its answer's anthropic-workspace-id header names it (the API returns
// it on every authenticated answer). An empty id is ignored, so a caller
// may pass the header unconditionally; a new id replaces the old one. The
// key never sends a noted workspace: it sends only its line's.
func (k Key) NoteWorkspace(id string) {
	k.mustBeReal("NoteWorkspace")
	if id == "" {
		return
	}
	k.k.mu.Lock()
	k.k.charged = id
	k.k.mu.Unlock()
}

// ChargedWorkspace returns the workspace the key's calls are charged to:
// the one its answers last named (NoteWorkspace), else the one it sends
// (Workspace), else "" (not known yet). A workspace-scoped key sends
// none, and only its answers show its workspace.
func (k Key) ChargedWorkspace() string {
	if k.k == nil {
		return ""
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.charged != "" {
		return k.k.charged
	}
	return k.k.workspace
}

// Last4 returns the last four characters of the value, or "" when the value
// is shorter than 16 characters.
func (k Key) Last4() string {
	if k.k == nil {
		return ""
	}
	return k.k.last4
}

// Source says where the key was loaded from, such as
// "env ANTHROPIC_API_KEY", ".env ANTHROPIC_API_KEYS item 2" or
// "keys file keys.txt line 3". It never contains the value.
func (k Key) Source() string {
	if k.k == nil {
		return ""
	}
	return k.k.source
}

// String returns the redacted form, label(…last4), such as
// "high_prio(…a1b2)", or "high_prio(…)" for a value shorter than 16
// characters.
func (k Key) String() string {
	if k.k == nil {
		return "keys.Key(zero)"
	}
	return k.k.redacted
}

// GoString returns the redacted form, so %#v does not show the value.
func (k Key) GoString() string { return k.String() }

// Format implements fmt.Formatter: every verb formats the redacted form as a
// string would be (%q quotes it, %x hex-encodes it, widths pad it).
func (k Key) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, k.GoString())
		return
	}
	_, _ = fmt.Fprintf(f, fmt.FormatString(f, verb), k.String())
}

// MarshalJSON encodes the redacted form as a JSON string.
func (k Key) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// MarshalText returns the redacted form; encoders that use
// encoding.TextMarshaler (JSON map keys, slog's text handler) print it.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// LogValue makes log/slog record the redacted form.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Apply puts the key on a request's headers: x-api-key for AuthXAPIKey,
// "Authorization: Bearer" for AuthBearer, and, for a key that names its
// workspace, anthropic-workspace-id (personal and service-account keys
// span workspaces; the header picks one). It sets only those headers —
// a workspace header from elsewhere is replaced by the key's. It is the
// only way the value leaves this package. It panics on the zero Key or an
// unknown style.
func (k Key) Apply(h http.Header, style AuthStyle) {
	k.mustBeReal("Apply")
	switch style {
	case AuthXAPIKey:
		h.Set(api.HeaderAPIKey, k.k.secret())
	case AuthBearer:
		h.Set("Authorization", "Bearer "+k.k.secret())
	default:
		panic(fmt.Sprintf("keys: Apply with unknown %v", style))
	}
	if w := k.k.workspace; w != "" {
		h[api.HeaderWorkspaceID] = []string{w}
	}
}

// SetOrg records the organization id the key belongs to, as learned from a
// response's anthropic-organization-id header. An empty id is ignored, so a
// caller may pass the header unconditionally; a new id replaces the old one.
func (k Key) SetOrg(id string) {
	k.mustBeReal("SetOrg")
	if id == "" {
		return
	}
	k.k.mu.Lock()
	k.k.org = id
	k.k.mu.Unlock()
}

// Org returns the organization id recorded by SetOrg, or "" if none is known
// yet.
func (k Key) Org() string {
	if k.k == nil {
		return ""
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.org
}

// MarkDead marks the key unusable for the rest of the run (its org out of
// credit or at its spend cap, a failed re-probe at start) with a reason for
// the report; a 401/403 in flight goes through [Key.Refused] instead. It returns true
// only for the call that killed the key, so the caller logs the death once;
// later calls change nothing, not even the reason. Any occurrence of the
// key's own value in reason is redacted.
func (k Key) MarkDead(reason string) (first bool) {
	k.mustBeReal("MarkDead")
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	if k.k.dead {
		return false
	}
	k.k.dead = true
	k.k.reason = strings.ReplaceAll(reason, k.k.secret(), k.k.redacted)
	return true
}

// Dead reports whether MarkDead was called, and the reason it was given.
func (k Key) Dead() (dead bool, reason string) {
	if k.k == nil {
		return false, ""
	}
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	return k.k.dead, k.k.reason
}

func (k Key) mustBeReal(method string) {
	if k.k == nil {
		panic("keys: " + method + " on the zero Key")
	}
}
