// Package call holds the two types every sender of Messages requests
// exchanges with its caller: a Request to send, and the Result that is the
// final word on it. The dispatcher (the sync lanes) and the batch runner
// (Message Batches) both take Requests and give Results, and route and job
// pass them between the two; keeping the types here, at the bottom, lets
// batch stay independent of dispatch. dispatch.Request and dispatch.Result
// are aliases of these.
package call

import (
	"time"

	"github.com/sluice-dev/sluice/api"
)

// Request is one Messages request to send.
type Request struct {
	ID         string // custom_id
	Params     []byte // the request body, sent byte for byte
	Model      string
	MaxTokens  int64
	EstInput   int64  // local estimate of input tokens
	ParamsHash string // carried into the Result for the results file
	// Sent, when set, goes on the wire instead of Params: Params with the
	// prompt-cache breakpoint sluice added at the end of the prefix the
	// job's requests share (cacheprefix). Params stays the request as
	// written, which the response cache and the results file key on.
	Sent []byte
	// CachePrefix fingerprints that shared prefix (0: none), CacheTTL is
	// its breakpoint's TTL: the dispatcher warms each prefix once per
	// organization before sending the rest of it there (docs/caching.md).
	CachePrefix uint64
	CacheTTL    time.Duration
}

// Body is what is sent: Sent if set, else Params.
func (r *Request) Body() []byte {
	if r.Sent != nil {
		return r.Sent
	}
	return r.Params
}

// Result is the final word on one Request.
type Result struct {
	Request *Request
	// Class is api.ClassOK, api.ClassFinal or api.ClassTransport; empty
	// when Aborted.
	Class string
	// Aborted: the sender stopped (shutdown, no live key) before the
	// request finished. Nothing should be recorded for it.
	Aborted    bool
	Status     int
	Body       []byte // the Message, or the error body
	Org, Key   string // labels
	Attempts   int
	Latency    time.Duration // first send to final answer
	Queued     time.Duration // from the sender taking it to its first send (sync only)
	Usage      api.Usage
	StopReason string
	Err        error
}
