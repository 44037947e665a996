package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Limits of the Message Batches API.
const (
	MaxBatchRequests  = 100_000
	MaxBatchBytes     = 256 << 20 // 256 MB per create body
	MaxMessagesBytes  = 32 << 20  // 32 MB per Messages or count_tokens body
	MaxCustomIDLength = 64
	BatchLifetime     = 24 * time.Hour // a batch not ended by then expires
	ResultsRetention  = 29 * 24 * time.Hour
)

// ValidCustomID reports whether id matches ^[a-zA-Z0-9_-]{1,64}$.
func ValidCustomID(id string) bool {
	if len(id) == 0 || len(id) > MaxCustomIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// BatchRequest is one request of a batch, and one line of a sluice input
// file. Params stays raw so it is sent byte for byte.
type BatchRequest struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

// BatchCreate is the body of POST /v1/messages/batches.
type BatchCreate struct {
	Requests []BatchRequest `json:"requests"`
}

// ParseBatchCreate reads a create body and checks it as the API does at
// create: valid JSON, 1 to MaxBatchRequests requests, each with a unique
// custom_id of the right pattern and an object as params. The error is an
// InvalidRequest; params are not looked into (the API checks them row by
// row, in the results).
func ParseBatchCreate(body []byte) ([]BatchRequest, error) {
	var in struct {
		Requests []struct {
			CustomID *string         `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, invalid("Request body is not valid JSON: %v", err)
	}
	switch n := len(in.Requests); {
	case n == 0:
		return nil, invalid("requests: List should have at least 1 item after validation, not 0")
	case n > MaxBatchRequests:
		return nil, invalid("requests: List should have at most %d items after validation, not %d", MaxBatchRequests, n)
	}
	out := make([]BatchRequest, len(in.Requests))
	seen := make(map[string]int, len(in.Requests))
	for i, rq := range in.Requests {
		if rq.CustomID == nil {
			return nil, invalid("requests.%d.custom_id: Field required", i)
		}
		id := *rq.CustomID
		if !ValidCustomID(id) {
			return nil, invalid("requests.%d.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		if j, dup := seen[id]; dup {
			return nil, invalid("requests.%d.custom_id: custom_id %q is already used by requests.%d; custom_id must be unique within a batch", i, id, j)
		}
		seen[id] = i
		if len(rq.Params) == 0 || rq.Params[0] != '{' {
			return nil, invalid("requests.%d.params: Input should be an object", i)
		}
		out[i] = BatchRequest{CustomID: id, Params: rq.Params}
	}
	return out, nil
}

// InvalidRequest is an error whose text is the API's message for an
// invalid_request_error (HTTP 400), worded as the API words it.
type InvalidRequest string

func (e InvalidRequest) Error() string { return string(e) }

func invalid(format string, args ...any) error { return InvalidRequest(fmt.Sprintf(format, args...)) }

// Batch processing statuses.
const (
	BatchInProgress = "in_progress"
	BatchCanceling  = "canceling"
	BatchEnded      = "ended"
)

// RequestCounts tallies a batch's requests. Every request counts as
// Processing until the whole batch ends.
type RequestCounts struct {
	Processing int64 `json:"processing"`
	Succeeded  int64 `json:"succeeded"`
	Errored    int64 `json:"errored"`
	Canceled   int64 `json:"canceled"`
	Expired    int64 `json:"expired"`
}

// MessageBatch is the batch object returned by create, retrieve, list and
// cancel. Timestamps are RFC 3339; nil means JSON null.
type MessageBatch struct {
	ID                string        `json:"id"`
	Type              string        `json:"type"`
	ProcessingStatus  string        `json:"processing_status"`
	RequestCounts     RequestCounts `json:"request_counts"`
	EndedAt           *time.Time    `json:"ended_at"`
	CreatedAt         time.Time     `json:"created_at"`
	ExpiresAt         time.Time     `json:"expires_at"`
	ArchivedAt        *time.Time    `json:"archived_at"`
	CancelInitiatedAt *time.Time    `json:"cancel_initiated_at"`
	ResultsURL        *string       `json:"results_url"`
}

// DeletedBatch is the body of a successful delete.
type DeletedBatch struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// Result types of a batch result line.
const (
	ResultSucceeded = "succeeded"
	ResultErrored   = "errored"
	ResultCanceled  = "canceled"
	ResultExpired   = "expired"
)

// SucceededResult is the raw "result" object of a line whose request
// succeeded with message (a Message, valid JSON, written byte for byte).
func SucceededResult(message []byte) json.RawMessage {
	return wrapResult(`{"type":"succeeded","message":`, message)
}

// ErroredResult is the raw "result" object of a line whose request ended
// with the error body errBody (valid JSON).
func ErroredResult(errBody []byte) json.RawMessage {
	return wrapResult(`{"type":"errored","error":`, errBody)
}

// wrapResult is head, v and the closing brace in one buffer of that size
// (appending to the head grew it twice: an answer is written for every
// request).
func wrapResult(head string, v []byte) json.RawMessage {
	b := make([]byte, 0, len(head)+len(v)+1)
	return append(append(append(b, head...), v...), '}')
}

// BatchResult is the "result" object of a result line.
type BatchResult struct {
	Type    string     `json:"type"`
	Message *Message   `json:"message,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// BatchResultLine is one line of a batch results file, and of a sluice
// results file.
type BatchResultLine struct {
	CustomID string      `json:"custom_id"`
	Result   BatchResult `json:"result"`
}

// ResultRecord is one line of a sluice results file: a Message Batches
// result line (custom_id, result) plus sluice's own metadata under "sluice",
// a key that code written for Batch results ignores. Result is kept raw so a
// message is written byte for byte as the API sent it.
type ResultRecord struct {
	CustomID string          `json:"custom_id"`
	Result   json.RawMessage `json:"result"`
	Sluice   *RunMeta        `json:"sluice,omitempty"`
}

// Outcome classes a result line records, so a resumed run knows which rows
// are final and which to drive again.
const (
	// ClassOK: the API answered (result succeeded).
	ClassOK = "ok"
	// ClassFinal: an error that retrying cannot fix (400, 404, 413, an
	// invalid_request_error row).
	ClassFinal = "final"
	// ClassTransport: retries ran out on rate limits, overload, 5xx,
	// dropped connections or auth; a re-run drives the request again.
	ClassTransport = "transport"
	// ClassInvalidInput: the input line was invalid (recorded with
	// --skip-invalid); a re-run drives it once the line is fixed.
	ClassInvalidInput = "invalid_input"
)

// RunMeta is sluice's per-request metadata in a results line.
type RunMeta struct {
	// ParamsHash fingerprints the request params (hex), so a resumed run can
	// tell when the request under a completed id has changed.
	ParamsHash string `json:"params_hash"`
	Class      string `json:"class"`
	Route      string `json:"route,omitempty"` // sync or batch
	Org        string `json:"org,omitempty"`   // label of the org that answered
	Key        string `json:"key,omitempty"`   // label of the key, never its value
	Attempts   int    `json:"attempts,omitempty"`
	LatencyMs  int64  `json:"latency_ms,omitempty"`
	BatchID    string `json:"batch_id,omitempty"`
	// CachePrefix is the TTL ("5m" or "1h") of the prompt-cache breakpoint
	// sluice added to the request as sent (docs/caching.md); empty: the
	// request went as written.
	CachePrefix string `json:"cache_prefix,omitempty"`
}
