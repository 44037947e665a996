package client

import (
	"net/http"
	"testing"
)

func TestClassify(t *testing.T) {
	spend := `{"type":"error","error":{"type":"rate_limit_error","message":"cap","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"r"}`
	tests := []struct {
		name   string
		status int
		body   string
		want   Class
		scope  Scope
	}{
		{"ok", 200, `{}`, OK, ScopeNone},
		{"rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, RateLimited, ScopeLane},
		{"spend cap", 429, spend, KeyDead, ScopeOrg},
		{"overloaded", 529, `{}`, Overloaded, ScopeAPI},
		{"server error", 500, `{}`, ServerError, ScopeAPI},
		{"gateway", 502, `not json`, ServerError, ScopeAPI},
		{"timeout", 504, `{}`, ServerError, ScopeAPI},
		{"request timeout", 408, `{}`, ServerError, ScopeAPI},
		{"conflict", 409, `{}`, ServerError, ScopeAPI},
		{"unauthorized", 401, `{}`, KeyDead, ScopeKey},
		{"forbidden", 403, `{}`, KeyDead, ScopeKeyModel},
		{"billing", 402, `{}`, KeyDead, ScopeOrg},
		{"self-set limit", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits."}}`, KeyDead, ScopeOrg},
		{"credit", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the API."}}`, KeyDead, ScopeOrg},
		{"bad request", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: required"}}`, Invalid, ScopeRequest},
		{"not found", 404, `{}`, Invalid, ScopeRequest},
		{"too large", 413, `{}`, Invalid, ScopeRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.status, http.Header{}, []byte(tt.body))
			if got != tt.want {
				t.Errorf("Classify(%d, %s) = %v want %v", tt.status, tt.body, got, tt.want)
			}
			if sc := ScopeOf(got, tt.status); sc != tt.scope {
				t.Errorf("ScopeOf(%v, %d) = %v want %v", got, tt.status, sc, tt.scope)
			}
		})
	}
}
