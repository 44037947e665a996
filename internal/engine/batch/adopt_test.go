package batch

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"io"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
)

// TestResumedIntentNeverTakesAnotherModelsBatch: job A's create is journaled but the
// process dies before it (Ctrl-C mid-create, batch never made). Job B, same
// custom_ids on another model, then makes its batch on the org. A resumes:
// the intent is matched to B's batch. A's requests are submitted only after
// the harvest (a long input). Every result A gets must be from A's model.
func TestResumedIntentNeverTakesAnotherModelsBatch(t *testing.T) {
	for _, delay := range []time.Duration{0, 3 * time.Hour} {
		t.Run(delay.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, nil, "batch")
				a := jobRequests(10, "claude-haiku-4-5", "job-a")
				b := jobRequests(10, "claude-sonnet-4-5", "job-b")
				cfgA := w.config()
				cfgA.Journal = filepath.Join(t.TempDir(), "a.journal")
				var hits atomic.Int32
				crash := func(p string) bool { return p == "before-create" && hits.Add(1) == 1 }
				_, _, err := w.run(t, cfgA, a, nil, crash)
				if !errors.Is(err, errCrash) {
					t.Fatalf("first run of A: %v", err)
				}
				cfgB := w.config()
				cfgB.Journal = filepath.Join(t.TempDir(), "b.journal")
				if _, _, err := w.run(t, cfgB, b, nil, nil); err != nil {
					t.Fatal(err)
				}
				// A resumes; its requests come late.
				col := newCollector(t)
				cfg := cfgA
				cfg.OnResult, cfg.OnReroute = col.onResult, col.onReroute
				r, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				col.r = r
				errc := make(chan error, 1)
				go func() { errc <- r.Run(t.Context()) }()
				time.Sleep(delay)
				for _, q := range a {
					if err := r.Submit(t.Context(), q); err != nil {
						t.Fatal(err)
					}
				}
				r.CloseInput()
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				r.Close()
				for id, res := range col.results {
					var m api.Message
					json.Unmarshal(res.Body, &m)
					if m.Model != "claude-haiku-4-5" {
						t.Errorf("%s: A (haiku) got an answer from %q (batch %s): another job's", id, m.Model, res.BatchID)
					}
				}
				t.Logf("results %d reroutes %d stats %+v", len(col.results), len(col.reroutes), r.Stats())
			})
		})
	}
}

// cutOnce cuts the first results download after n bytes, mid-line, as a
// dropped connection would.
type cutOnce struct {
	next http.RoundTripper
	n    int
	done atomic.Bool
}

type cutBody struct {
	r io.Reader
	c io.Closer
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}
func (b *cutBody) Close() error { return b.c.Close() }

func (c *cutOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && strings.HasSuffix(req.URL.Path, "/results") && c.done.CompareAndSwap(false, true) {
		resp.Body = &cutBody{r: io.LimitReader(resp.Body, int64(c.n)), c: resp.Body}
	}
	return resp, err
}

// TestAdoptedCutMidVerifyIsOurs: a lost create adopted from the list; the
// first results download is cut mid-line while it is verified. The batch
// is ours: it must be harvested, not declared another's.
func TestAdoptedCutMidVerifyIsOurs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		var n atomic.Int32
		w.tap.failCreate = func() string {
			if n.Add(1) == 1 {
				return "drop-after"
			}
			return ""
		}
		w.client = client.New(client.Config{BaseURL: "http://sim", Transport: &cutOnce{next: w.tap, n: 100}})
		reqs := requests(10)
		col, r, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stats %+v", r.Stats())
		checkAllOK(t, reqs, col)
	})
}

func TestSameModel(t *testing.T) {
	for _, tt := range []struct {
		asked, answered string
		want            bool
	}{
		{"claude-haiku-4-5", "claude-haiku-4-5", true},
		{"claude-haiku-4-5", "claude-haiku-4-5-20251001", true},  // an alias answers with its dated id
		{"claude-sonnet-4-5", "claude-sonnet-4-20250514", false}, // same pool, another model
		{"claude-haiku-4-5", "claude-sonnet-4-5", false},
		{"claude-sonnet-9-preview", "claude-sonnet-9-preview-20270101", true}, // unknown, same family
		{"claude-sonnet-9-preview", "claude-haiku-9-preview", false},
		{"gateway-model-a", "gateway-model-a-2027", true}, // no family: by prefix
		{"gateway-model-a", "gateway-model-b", false},
	} {
		if got := sameModel(tt.asked, tt.answered); got != tt.want {
			t.Errorf("sameModel(%q, %q) = %v, want %v", tt.asked, tt.answered, got, tt.want)
		}
	}
}
