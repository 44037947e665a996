package api

import (
	"testing"
	"time"
)

// TestClassOfError: every documented error type has its status and one
// class; only the request's own faults are final; a type the docs do not
// list is a server error, reported unknown.
func TestClassOfError(t *testing.T) {
	for _, tc := range []struct {
		typ    ErrorType
		status int
		class  ErrorClass
	}{
		{ErrInvalidRequest, 400, ErrorInvalid},
		{ErrAuthentication, 401, ErrorRefused},
		{ErrBilling, 402, ErrorRefused},
		{ErrPermission, 403, ErrorRefused},
		{ErrNotFound, 404, ErrorInvalid},
		{ErrConflict, 409, ErrorServer},
		{ErrRequestTooLarge, 413, ErrorInvalid},
		{ErrRateLimit, 429, ErrorRateLimited},
		{ErrAPI, 500, ErrorServer},
		{ErrTimeout, 504, ErrorServer},
		{ErrOverloaded, 529, ErrorOverloaded},
	} {
		c, known := ClassOfError(tc.typ)
		if !known || c != tc.class {
			t.Errorf("ClassOfError(%s) = %v, %v; want %v", tc.typ, c, known, tc.class)
		}
		if got := StatusForErrorType(tc.typ); got != tc.status {
			t.Errorf("StatusForErrorType(%s) = %d, want %d", tc.typ, got, tc.status)
		}
		if c.Final() != (tc.class == ErrorInvalid) {
			t.Errorf("%s: Final() = %v", tc.typ, c.Final())
		}
	}
	if c, known := ClassOfError("quota_error"); known || c != ErrorServer || c.Final() {
		t.Errorf("an unlisted type: %v, known %v", c, known)
	}
	if got := StatusForErrorType("quota_error"); got != 500 {
		t.Errorf("StatusForErrorType(unlisted) = %d", got)
	}
}

func TestCapRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d, limit, want time.Duration
		capped         bool
	}{
		{time.Second, time.Minute, time.Second, false},
		{time.Minute, time.Minute, time.Minute, false},
		{time.Hour, time.Minute, time.Minute, true},
		{24 * time.Hour, 0, DefaultMaxRetryAfter, true},
		{5 * time.Minute, -1, 5 * time.Minute, false},
	} {
		if got, capped := CapRetryAfter(tc.d, tc.limit); got != tc.want || capped != tc.capped {
			t.Errorf("CapRetryAfter(%v, %v) = %v, %v; want %v, %v", tc.d, tc.limit, got, capped, tc.want, tc.capped)
		}
	}
}
