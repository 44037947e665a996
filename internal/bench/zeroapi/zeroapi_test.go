package zeroapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/bench/zeroapi"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/keys"
)

func serve(t *testing.T, cfg zeroapi.Config) (*zeroapi.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := zeroapi.New(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

// TestAnswersAreMessagesTheClientReads: sluice's client reads the
// answers as the API's: a Message with usage and stop_reason, the org id
// of the key, a request id; count_tokens answers the key probe; a key it
// does not know is refused as the API refuses one; a body sent twice
// counts as an extra answer.
func TestAnswersAreMessagesTheClientReads(t *testing.T) {
	s, base := serve(t, zeroapi.Config{Orgs: 2, OutputMin: 5, OutputMax: 5})
	pool, err := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{
		keys.EnvAPIKey: zeroapi.Key(0), keys.EnvBatch: zeroapi.Key(1), keys.EnvLowPrio: "sk-ant-fake-zero-unknown-0009"})})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: base})
	defer c.CloseIdle()
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Hello there"}]}`)
	for i, k := range pool.Keys()[:2] {
		o := c.Do(context.Background(), k, "POST", "/v1/messages", body)
		if o.Class != client.OK || o.OrgID != zeroapi.OrgID(i) || o.RequestID == "" || o.Usage.OutputTokens != 5 || o.Usage.InputTokens == 0 || o.StopReason != "end_turn" {
			t.Fatalf("key %d: class %v, org %q, request id %q, usage %+v, stop %q, err %v", i, o.Class, o.OrgID, o.RequestID, o.Usage, o.StopReason, o.Err)
		}
		var m api.Message
		if err := json.Unmarshal(o.Body, &m); err != nil || m.Model != "claude-sonnet-4-5" || m.Type != "message" {
			t.Errorf("answer %s: %+v, %v", o.Body, m, err)
		}
		if o.Date.IsZero() {
			t.Errorf("no Date header")
		}
		// Every limiter's three headers, as the API sends them: a full
		// bucket of a limit no run reaches, refilled by the next second.
		for _, l := range api.Limiters {
			st := o.Limits.Get(l)
			if !st.Present || st.Limit < 1_000_000 || st.Remaining < st.Limit-1000 || st.Reset.Before(o.Date) || st.Reset.After(o.Date.Add(2*time.Second)) {
				t.Errorf("%s headers: %+v (Date %v)", l, *st, o.Date)
			}
		}
	}
	if o := c.Do(context.Background(), pool.Keys()[0], "POST", "/v1/messages/count_tokens", body); o.Class != client.OK || !strings.Contains(string(o.Body), `"input_tokens":`) {
		t.Errorf("count_tokens: %v %s", o.Class, o.Body)
	}
	if o := c.Do(context.Background(), pool.Keys()[2], "POST", "/v1/messages", body); o.Class != client.KeyDead || o.Status != 401 {
		t.Errorf("unknown key: class %v, status %d", o.Class, o.Status)
	}
	if o := c.Do(context.Background(), pool.Keys()[0], "POST", "/v1/messages", []byte(`{"model":"m","stream":true}`)); o.Class != client.Invalid {
		t.Errorf("a stream: class %v, want refused", o.Class)
	}
	st := s.Stats()
	if st.Messages != 2 || st.Extra != 1 || st.CountTokens != 1 || st.Refused != 2 {
		t.Errorf("stats %+v: want 2 messages (the second an extra answer), 1 count_tokens, 2 refused", st)
	}
	resp, err := http.Get(base + "/_zero/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got zeroapi.Stats
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got != s.Stats() {
		t.Errorf("/_zero/stats: %+v, %v; want %+v", got, err, s.Stats())
	}
}

// TestFraming: requests pipelined on one connection are answered in
// order, Connection: close ends the connection after its answer, and a
// chunked request (which it does not read) is refused and the connection
// closed rather than misread.
func TestFraming(t *testing.T) {
	_, base := serve(t, zeroapi.Config{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := func(body, extra string) string {
		return "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + zeroapi.Key(0) + "\r\n" + extra +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	io.WriteString(conn, req(`{"model":"a"}`, "")+req(`{"model":"b"}`, "Connection: close\r\n"))
	br := bufio.NewReader(conn)
	for _, model := range []string{"a", "b"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"model":"`+model+`"`) {
			t.Errorf("answer %d %s, want model %s", resp.StatusCode, b, model)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close the connection stayed open (%v)", err)
	}
	conn2, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	io.WriteString(conn2, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
	br = bufio.NewReader(conn2)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 411 {
		t.Fatalf("chunked request: %v, %v", resp, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after refusing a chunked request the connection stayed open (%v)", err)
	}
}
