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
	}{
		{"ok", 200, `{}`, OK},
		{"rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, RateLimited},
		{"spend cap", 429, spend, KeyDead},
		{"overloaded", 529, `{}`, Overloaded},
		{"server error", 500, `{}`, ServerError},
		{"gateway", 502, `not json`, ServerError},
		{"timeout", 504, `{}`, ServerError},
		{"request timeout", 408, `{}`, ServerError},
		{"conflict", 409, `{}`, ServerError},
		{"unauthorized", 401, `{}`, KeyDead},
		{"forbidden", 403, `{}`, KeyDead},
		{"billing", 402, `{}`, KeyDead},
		{"self-set limit", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits."}}`, KeyDead},
		{"credit", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the API."}}`, KeyDead},
		{"bad request", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages: required"}}`, Invalid},
		{"not found", 404, `{}`, Invalid},
		{"too large", 413, `{}`, Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.status, http.Header{}, []byte(tt.body)); got != tt.want {
				t.Errorf("Classify(%d, %s) = %v want %v", tt.status, tt.body, got, tt.want)
			}
		})
	}
}
