package api

// ErrorClass is what an error type says about the request that got it: the
// one reading of error.type that the dispatcher (a stream's error event),
// the batch path (an errored row) and judge (a verdict) share. An HTTP
// answer is classified by its status (package client); this is for an
// error that arrives without one.
type ErrorClass uint8

// The error classes.
const (
	// ErrorServer: the API failed or gave up on the request
	// (api_error, timeout_error, conflict_error, and any type the docs do
	// not list: the docs say the types "will grow over time"). Trying
	// again may succeed.
	ErrorServer ErrorClass = iota
	// ErrorRateLimited: rate_limit_error, a limit of the organization.
	// Try again later.
	ErrorRateLimited
	// ErrorOverloaded: overloaded_error, the API is busy for everyone.
	// Try again.
	ErrorOverloaded
	// ErrorRefused: authentication_error, permission_error,
	// billing_error: the key or its organization was refused, not the
	// request. Another key may serve it.
	ErrorRefused
	// ErrorInvalid: invalid_request_error, not_found_error,
	// request_too_large: the request itself is wrong and fails the same
	// way on any key. Final.
	ErrorInvalid
)

// Final reports whether a request that got an error of class c must not
// be tried again: it would fail the same way.
func (c ErrorClass) Final() bool { return c == ErrorInvalid }

// errorTypes is the table: each documented error type, the status the API
// pairs with it, and its class (anthropic-api.md §4.1).
var errorTypes = map[ErrorType]struct {
	status int
	class  ErrorClass
}{
	ErrInvalidRequest:  {400, ErrorInvalid},
	ErrAuthentication:  {401, ErrorRefused},
	ErrBilling:         {402, ErrorRefused},
	ErrPermission:      {403, ErrorRefused},
	ErrNotFound:        {404, ErrorInvalid},
	ErrConflict:        {409, ErrorServer},
	ErrRequestTooLarge: {413, ErrorInvalid},
	ErrRateLimit:       {429, ErrorRateLimited},
	ErrAPI:             {500, ErrorServer},
	ErrTimeout:         {504, ErrorServer},
	ErrOverloaded:      {StatusOverloaded, ErrorOverloaded},
}

// ClassOfError returns the class of error type t; known is false for a
// type the docs do not list (its class is then ErrorServer, and a caller
// with more to go on may decide otherwise).
func ClassOfError(t ErrorType) (c ErrorClass, known bool) {
	e, ok := errorTypes[t]
	if !ok {
		return ErrorServer, false
	}
	return e.class, true
}

// StatusForErrorType returns the HTTP status the API pairs with t (500
// for a type the docs do not list).
func StatusForErrorType(t ErrorType) int {
	if e, ok := errorTypes[t]; ok {
		return e.status
	}
	return 500
}
