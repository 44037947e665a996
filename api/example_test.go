package api_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// ParseRateLimitHeaders reads the anthropic-ratelimit-* headers of one
// answer: each dimension's limit, what is left, and when the bucket is full
// again; ParseRetryAfter reads the retry-after a 429 carries.
func ExampleParseRateLimitHeaders() {
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "1000")
	h.Set("anthropic-ratelimit-requests-remaining", "998")
	h.Set("anthropic-ratelimit-requests-reset", "2026-12-07T12:00:01Z")
	h.Set("retry-after", "3")
	rl := api.ParseRateLimitHeaders(h)
	fmt.Println(rl.Requests.Present, rl.Requests.Limit, rl.Requests.Remaining, rl.Tokens.Present)
	d, ok := api.ParseRetryAfter(h, time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	fmt.Println(d, ok)
	// Output:
	// true 1000 998 false
	// 3s true
}

// Each model belongs to a pool (the models that share rate limits) and a
// family (the etiquette caps).
func ExamplePoolOf() {
	fmt.Println(api.PoolOf("claude-sonnet-4-5"), api.FamilyOf("claude-haiku-4-5"))
	// Output: sonnet-4 haiku
}
