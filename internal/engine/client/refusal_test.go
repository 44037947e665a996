package client

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/keys"
)

// TestRefusal: a KeyDead answer becomes the keys.Refusal of its scope —
// the organization's own usage limit and the workspace's told apart by the
// message — and any other outcome refuses nothing.
func TestRefusal(t *testing.T) {
	spend := `{"type":"error","error":{"type":"rate_limit_error","message":"cap","details":{"error_code":"enforced_spend_limit_reached"}}}`
	orgLimit := `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-06-01 at 00:00 UTC."}}`
	wsLimit := `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified workspace API usage limits. You will regain access on 2026-06-01 at 00:00 UTC."}}`
	sent, at := time.Unix(100, 0), time.Unix(101, 0)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		scope  Scope
		want   keys.RefusalScope
		pool   api.Pool
	}{
		{"401", 401, `{}`, ScopeKey, keys.RefusedKey, keys.AllPools},
		{"403", 403, `{}`, ScopeKeyModel, keys.RefusedKeyPool, api.PoolSonnet4},
		{"402", 402, `{}`, ScopeOrg, keys.RefusedOrg, api.PoolSonnet4},
		{"spend cap", 429, spend, ScopeOrg, keys.RefusedOrg, api.PoolSonnet4},
		{"organization's limit", 400, orgLimit, ScopeOrg, keys.RefusedOrg, api.PoolSonnet4},
		{"workspace's limit", 400, wsLimit, ScopeWorkspace, keys.RefusedWorkspace, api.PoolSonnet4},
		{"rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, ScopeLane, 0, api.PoolSonnet4},
		{"bad request", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: required"}}`, ScopeRequest, 0, api.PoolSonnet4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Outcome{Class: Classify(tc.status, http.Header{}, []byte(tc.body)), Status: tc.status, Body: []byte(tc.body)}
			if got := o.Scope(); got != tc.scope {
				t.Fatalf("Scope() = %v, want %v", got, tc.scope)
			}
			r := o.Refusal(api.PoolSonnet4, sent, at)
			if r.Scope != tc.want || r.Pool != tc.pool || !r.Sent.Equal(sent) || !r.At.Equal(at) || r.Reason == "" {
				t.Fatalf("Refusal = %+v, want scope %v pool %q", r, tc.want, tc.pool)
			}
		})
	}
}
