package proxy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/front/proxy"
)

// TestStalledStreamReaderFreesItsSlot: a streaming caller that keeps its
// connection open but stops reading is treated as gone once one event
// cannot be written to it for StreamWriteTimeout, so the lane's only
// slot goes to the next call instead of waiting for that caller forever.
func TestStalledStreamReaderFreesItsSlot(t *testing.T) {
	// Events large enough that the stalled caller's socket buffers fill.
	text := strings.Repeat("x", 32<<10)
	began := make(chan struct{})
	var streams, plains atomic.Int32
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stream bool `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		if !body.Stream {
			plains.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`, sonnet)
			return
		}
		if streams.Add(1) == 1 {
			close(began)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n")
		// An answer that never ends: only the proxy giving up on its
		// caller ends it.
		for r.Context().Err() == nil {
			if _, err := fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", text); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio, dispatch: oneSlot,
		proxy: func(c *proxy.Config) {
			c.MaxWait = 10 * time.Second
			c.StreamWriteTimeout = 200 * time.Millisecond
		}})

	// The stalled caller: sends a streaming request, then never reads.
	host := strings.TrimPrefix(e.url, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	raw, _ := json.Marshal(message("stream to a caller who stopped reading", "stream", true))
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s: %s\r\nx-api-key: caller\r\nContent-Length: %d\r\n\r\n%s",
		host, api.HeaderVersion, api.VersionDefault, len(raw), raw)
	within(t, began, "the stalled caller's stream")

	// The only slot is the stalled stream's until the proxy gives up on
	// its caller; the next call must then be served, not refused at
	// MaxWait.
	resp, b := e.do("POST", "/v1/messages", message("the next call"))
	if resp.StatusCode != 200 {
		t.Fatalf("the next call: %d %s; want 200 once the stalled caller's slot is freed", resp.StatusCode, b)
	}
	if n := streams.Load(); n != 1 {
		t.Errorf("the stalled stream was sent %d times, want once", n)
	}
	if n := plains.Load(); n != 1 {
		t.Errorf("the next call was sent %d times, want once", n)
	}
}

// TestStreamWriteTimeoutIsPerEvent: the write timeout bounds each write
// to the caller, not the stream: a model that pauses between events for
// longer than it does not get its stream cut. In a synctest bubble on
// in-memory connections: the pauses are fake time.
func TestStreamWriteTimeoutIsPerEvent(t *testing.T) {
	synctest.Test(t, testStreamWriteTimeoutIsPerEvent)
}

func testStreamWriteTimeoutIsPerEvent(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7}}}\n\n")
		w.(http.Flusher).Flush()
		// Six write timeouts without an event (a pause that ends early if
		// the proxy hangs up, so a failing run leaves nothing behind).
		pause := func() bool {
			select {
			case <-time.After(300 * time.Millisecond):
				return true
			case <-r.Context().Done():
				return false
			}
		}
		if !pause() {
			return
		}
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"late\"}}\n\n")
		w.(http.Flusher).Flush()
		if !pause() {
			return
		}
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
	e := newEnv(t, options{upstream: up, keysEnv: onlyHighPrio, pipe: true,
		proxy: func(c *proxy.Config) { c.StreamWriteTimeout = 50 * time.Millisecond }})
	resp, b := e.do("POST", "/v1/messages", message("a slow model", "stream", true))
	events, rest := sseEvents(b)
	if resp.StatusCode != 200 || len(events) != 3 || rest != "" || !strings.Contains(events[2], "message_stop") {
		t.Errorf("status %d, %d events (rest %q): %s; want the whole stream", resp.StatusCode, len(events), rest, b)
	}
}
