package client_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

// TestAnswersOfEveryFramingAreReadWhole: an answer's body is read whole
// whether it says its length or is chunked, one that ends short of its
// length is a failed attempt, not a truncated answer, and answers one
// after another share one keep-alive connection; a declared length is
// not allocated before the bytes arrive.
func TestAnswersOfEveryFramingAreReadWhole(t *testing.T) {
	answer := []byte(`{"type":"message","content":[{"type":"text","text":"` + string(bytes.Repeat([]byte("x"), 3000)) + `"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":5}}`)
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/sized":
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			w.Write(answer)
		case "/chunked":
			w.Write(answer[:100])
			w.(http.Flusher).Flush()
			w.Write(answer[100:])
		case "/empty":
			w.Header().Set("Content-Length", "0")
		case "/huge": // declares 200 MB, sends 16 bytes, hangs up
			w.Header().Set("Content-Length", "200000000")
			w.Write([]byte(`{"type":"message`)) // 16 bytes
			w.(http.Flusher).Flush()
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		case "/short": // says more than it sends, then hangs up
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)+10))
			w.Write(answer)
			w.(http.Flusher).Flush()
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: "sk-ant-test-readbody-0001"}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: srv.URL})
	for range 3 {
		for _, path := range []string{"/sized", "/chunked"} {
			o := c.Do(context.Background(), p.Keys()[0], "POST", path, []byte(`{}`))
			if o.Class != client.OK || !bytes.Equal(o.Body, answer) || o.Usage.OutputTokens != 5 {
				t.Fatalf("%s: class %v, %d of %d bytes, usage %+v, err %v", path, o.Class, len(o.Body), len(answer), o.Usage, o.Err)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("6 answers one after another opened %d connections, want 1", n)
	}
	if o := c.Do(context.Background(), p.Keys()[0], "POST", "/empty", []byte(`{}`)); o.Body == nil || len(o.Body) != 0 || o.Class == client.OK {
		t.Errorf("empty 200: class %v, body %q (nil %v): want an empty body that is not an answer", o.Class, o.Body, o.Body == nil)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if o := c.Do(context.Background(), p.Keys()[0], "POST", "/huge", []byte(`{}`)); o.Class != client.Transport {
		t.Errorf("declared 200 MB, sent 16 bytes: class %v, want a transport failure", o.Class)
	}
	runtime.ReadMemStats(&m1)
	if a := m1.TotalAlloc - m0.TotalAlloc; a > 16<<20 {
		t.Errorf("an answer declaring 200 MB and sending 16 bytes cost %d MB of allocation", a>>20)
	}
	if o := c.Do(context.Background(), p.Keys()[0], "POST", "/short", []byte(`{}`)); o.Class != client.Transport || o.Err == nil || o.Body != nil || o.Status != 200 {
		t.Errorf("short body: class %v, status %d, %d bytes, err %v: want a transport failure with no body", o.Class, o.Status, len(o.Body), o.Err)
	}
}
