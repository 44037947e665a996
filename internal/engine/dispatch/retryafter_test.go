package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/testkit/logbuf"
)

// TestHugeRetryAfterIsCappedAndLogged: a 429 asking for a day (and one
// whose value overflows a Duration) does not stop the lane for a day nor
// get ignored: it is honoured up to MaxRetryAfter, and the cap is logged
// once for the lane.
func TestHugeRetryAfterIsCappedAndLogged(t *testing.T) {
	for _, hint := range []string{"86400", "1e300"} {
		t.Run(hint, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set(api.HeaderOrganizationID, "org-fake")
					if calls.Add(1) <= 2 {
						w.Header().Set(api.HeaderRetryAfter, hint)
						w.WriteHeader(429)
						fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
						return
					}
					fmt.Fprint(w, `{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
				})
				logs := &logbuf.Buffer{}
				d, _, _ := pipeDispatcher(t, h, dispatch.Config{MaxRetryAfter: 2 * time.Minute, Logger: logs.Logger(slog.LevelInfo)},
					map[string]string{"high_prio": "org-fake"})
				start := time.Now()
				ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // fake time: fails fast if the cap does not hold
				defer cancel()
				var res [2]dispatch.Result
				done := make(chan int, 2)
				for i := range res {
					go func() {
						res[i] = d.Do(ctx, &dispatch.Request{ID: fmt.Sprint("r", i), Params: []byte(`{}`), Model: "claude-sonnet-4-5", MaxTokens: 10})
						done <- i
					}()
				}
				<-done
				<-done
				took := time.Since(start)
				for _, r := range res {
					if r.Class != api.ClassOK {
						t.Fatalf("result %+v", r)
					}
				}
				// Two 429s (the lane's header probe goes first, so they come
				// one after the other): each costs the 2 min cap, not a day.
				if took < 2*time.Minute || took > 5*time.Minute {
					t.Errorf("answered after %v, want two 2 min caps (and their jitter), not a day", took)
				}
				if n := strings.Count(logs.String(), "longer than the cap"); n != 1 {
					t.Errorf("%d log lines about the cap, want one for the lane:\n%s", n, logs.String())
				}
			})
		})
	}
}
