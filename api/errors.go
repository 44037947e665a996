package api

import (
	"encoding/json"
	"fmt"
)

// ErrorType is the "error.type" string of an API error body.
type ErrorType string

// The error types the API documents (errors page, 2026-08).
const (
	ErrInvalidRequest  ErrorType = "invalid_request_error" // 400, and other 4xx not listed
	ErrAuthentication  ErrorType = "authentication_error"  // 401
	ErrBilling         ErrorType = "billing_error"         // 402
	ErrPermission      ErrorType = "permission_error"      // 403
	ErrNotFound        ErrorType = "not_found_error"       // 404
	ErrConflict        ErrorType = "conflict_error"        // 409
	ErrRequestTooLarge ErrorType = "request_too_large"     // 413
	ErrRateLimit       ErrorType = "rate_limit_error"      // 429
	ErrAPI             ErrorType = "api_error"             // 500
	ErrTimeout         ErrorType = "timeout_error"         // 504
	ErrOverloaded      ErrorType = "overloaded_error"      // 529
)

// StatusOverloaded is the non-standard HTTP status the API uses for
// overloaded_error.
const StatusOverloaded = 529

// SpendLimitErrorCode is error.details.error_code on the 429 returned once an
// organization reached its tier's monthly spend cap. That 429 carries no
// retry-after: retrying fails until the next month.
const SpendLimitErrorCode = "enforced_spend_limit_reached"

// ErrorDetail is the "error" object of an error body.
type ErrorDetail struct {
	Type    ErrorType     `json:"type"`
	Message string        `json:"message"`
	Details *ErrorDetails `json:"details,omitempty"`
}

// ErrorDetails carries the machine-readable extras some errors have.
type ErrorDetails struct {
	ErrorCode string `json:"error_code,omitempty"`
}

// ErrorBody is the JSON body of every API error:
// {"type":"error","error":{"type":…,"message":…},"request_id":…}.
// In a batch result line the same shape appears without request_id.
type ErrorBody struct {
	Type      string      `json:"type"`
	Err       ErrorDetail `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

// NewErrorBody returns an error body of type t.
func NewErrorBody(t ErrorType, requestID, format string, args ...any) ErrorBody {
	return ErrorBody{Type: "error", Err: ErrorDetail{Type: t, Message: fmt.Sprintf(format, args...)}, RequestID: requestID}
}

// Marshal returns the body as JSON. It cannot fail: every field is a string.
func (b ErrorBody) Marshal() []byte {
	out, _ := json.Marshal(b)
	return out
}

// Error makes an ErrorBody usable as a Go error; the text names the type and
// the request id, never a key.
func (b ErrorBody) Error() string {
	if b.RequestID != "" {
		return fmt.Sprintf("%s: %s (request_id %s)", b.Err.Type, b.Err.Message, b.RequestID)
	}
	return fmt.Sprintf("%s: %s", b.Err.Type, b.Err.Message)
}
