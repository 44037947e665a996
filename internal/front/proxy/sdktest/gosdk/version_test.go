package gosdk_test

import (
	"bytes"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	batchpath "github.com/sluice-dev/sluice/internal/engine/batch"
	"github.com/sluice-dev/sluice/internal/format/jsonl"
	"github.com/sluice-dev/sluice/internal/front/proxy"
	"github.com/sluice-dev/sluice/internal/testkit/proxytest"
)

// versionsSeen sums the calls the simulator saw by anthropic-version.
func versionsSeen(e *proxytest.Env) map[string]int64 {
	out := map[string]int64{}
	for _, o := range e.Sim.Stats().Orgs {
		for v, n := range o.Counters.Versions {
			out[v] += n
		}
	}
	return out
}

// TestV2DefaultsPassTheVersionThrough: the official Go SDK v2 at its
// defaults (anthropic-version 2026-10-21, Authorization: Bearer) through
// the proxy, whose own client sends 2023-06-01: a message, a stream,
// count_tokens and a batch — its rows on the sync lanes, and on the batch
// path — all reach the API with the caller's version.
func TestV2DefaultsPassTheVersionThrough(t *testing.T) {
	for _, via := range []string{route.Sync, route.Batch} {
		t.Run(via, func(t *testing.T) {
			e := proxytest.Start(t, proxytest.Options{Proxy: func(c *proxy.Config) {
				c.StateDir = t.TempDir()
				if via == route.Batch {
					c.Plan = func(jsonl.Summary, int) (route.Routing, error) {
						return route.Routing{Route: route.Batch, BatchShare: 1, Why: "test",
							Batch: batchpath.Config{ChunkSize: 10, WindowPerOrg: 100, PollMin: 5 * time.Millisecond, PollMax: 20 * time.Millisecond}}, nil
					}
				}
			}})
			before := versionsSeen(e)
			c := v2Line{}.Connect(e.URL, e.Token) // as Bearer, the v2 default
			ctx := ctxOf(t)
			if _, err := c.Message(ctx, model, 32, "a message at the SDK's defaults"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Stream(ctx, 64, "a stream at the SDK's defaults"); err != nil {
				t.Fatal(err)
			}
			if n, err := c.CountTokens(ctx, "count these tokens"); err != nil || n <= 0 {
				t.Fatalf("count_tokens: %d, %v", n, err)
			}
			ids := []string{"v-a", "v-b", "v-c"}
			b, err := c.BatchCreate(ctx, ids, []string{"one", "two", "three"})
			if err != nil {
				t.Fatal(err)
			}
			for b.Status != api.BatchEnded {
				if ctx.Err() != nil {
					t.Fatalf("batch did not end: %+v", b)
				}
				time.Sleep(5 * time.Millisecond)
				if b, err = c.BatchGet(ctx, b.ID); err != nil {
					t.Fatal(err)
				}
			}
			rows, err := c.BatchResults(ctx, b.ID)
			if err != nil || len(rows) != 3 || b.Succeeded != 3 {
				t.Fatalf("batch %+v rows %+v %v", b, rows, err)
			}
			after := versionsSeen(e)
			delta := maps.Clone(after)
			for v, n := range before {
				delta[v] -= n
			}
			// A message, a stream, count_tokens, and the three rows (sync)
			// or at least a create, a poll and the results (batch).
			if delta[api.Version20261021] < 6 || delta[api.Version20230601] != 0 {
				t.Errorf("upstream calls by version: %v (before the SDK's calls: %v)", delta, before)
			}
			if via == route.Batch {
				created := int64(0)
				for _, o := range e.Sim.Stats().Orgs {
					created += o.Batches.Created
				}
				if created == 0 {
					t.Error("no Message Batch was created: the batch path was not exercised")
				}
			}
		})
	}
}

// TestCallerVersionDecides: the API applies the caller's version, not the
// proxy's: a temperature the 2026-10-21 version refuses is the API's 400
// for a caller sending it, and answered for a caller sending 2023-06-01.
func TestCallerVersionDecides(t *testing.T) {
	e := proxytest.Start(t, proxytest.Options{})
	body := []byte(`{"model":"` + model + `","max_tokens":16,"temperature":1,"messages":[{"role":"user","content":"hi"}]}`)
	for version, want := range map[string]int{api.Version20261021: 400, api.Version20230601: 200} {
		req, _ := http.NewRequestWithContext(ctxOf(t), "POST", e.URL+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("anthropic-version", version)
		req.Header.Set("authorization", "Bearer "+e.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 400 && !strings.Contains(b.String(), "temperature")) {
			t.Errorf("%s: HTTP %d %s, want %d", version, resp.StatusCode, b.String(), want)
		}
	}
}
