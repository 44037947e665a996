package dispatch_test

// The parser of a streamed Messages answer is streamReader (stream.go),
// reached through Dispatcher.StreamSender, which sends with
// client.Client.Send: these targets drive that whole path with an
// in-memory transport that serves fuzzed server-sent events.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/keys"
)

const fuzzSecret = "sk-ant-test-fuzz-secret-000000000001"

var errFuzzReset = errors.New("connection reset by fuzz")

// chunkReader serves data in reads of the sizes splits gives (cycling;
// one read when splits is empty), then end.
type chunkReader struct {
	data   []byte
	splits []byte
	i      int
	end    error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.end
	}
	n := len(r.data)
	if len(r.splits) > 0 {
		n = int(r.splits[r.i%len(r.splits)]) + 1
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func (r *chunkReader) Close() error { return nil }

// sseTransport answers every request with a 200 text/event-stream whose
// body is next().
type sseTransport struct{ next func() io.ReadCloser }

func (s *sseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set(api.HeaderRequestID, "req_fuzz")
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: h, Body: s.next(), Request: req,
		ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1}, nil
}

// sinkRecorder keeps copies of the events a stream delivers.
type sinkRecorder struct {
	begins int
	events [][]byte
}

func (s *sinkRecorder) Begin(int, http.Header) error { s.begins++; return nil }

func (s *sinkRecorder) Event(ev []byte) error {
	s.events = append(s.events, bytes.Clone(ev))
	return nil
}

// streamRig runs one streamed attempt over a fixed body.
type streamRig struct {
	d   *dispatch.Dispatcher
	key *keys.Key
	tr  *sseTransport
}

func newStreamRig(f *testing.F) *streamRig {
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: fuzzSecret}), NoDotEnv: true})
	if err != nil {
		f.Fatal(err)
	}
	k := p.Keys()[0]
	k.SetOrg("org-fuzz")
	tr := &sseTransport{}
	c := client.New(client.Config{BaseURL: "http://api.invalid", Transport: tr})
	d, err := dispatch.New(dispatch.Config{Client: c, Keys: p.Keys(), StreamIdle: -1})
	if err != nil {
		f.Fatal(err)
	}
	return &streamRig{d: d, key: k, tr: tr}
}

// run streams data, read in the given splits and ended by end.
func (r *streamRig) run(t *testing.T, data, splits []byte, end error) (client.Outcome, [][]byte) {
	t.Helper()
	r.tr.next = func() io.ReadCloser {
		return &chunkReader{data: bytes.Clone(data), splits: splits, end: end}
	}
	var sink sinkRecorder
	send := r.d.StreamSender([]byte(`{"model":"claude-haiku-4-5","max_tokens":1,"stream":true,"messages":[]}`), nil, &sink)
	o := send(context.Background(), r.key)
	if sink.begins != 1 {
		t.Fatalf("the sink began %d times", sink.begins)
	}
	if o.Err != nil && strings.Contains(o.Err.Error(), fuzzSecret) {
		t.Fatalf("the outcome's error shows the key: %v", o.Err)
	}
	if o.ShouldRetry != 0 {
		t.Fatalf("a stream that began has ShouldRetry %d, want 0: it must never be sent again", o.ShouldRetry)
	}
	return o, sink.events
}

// refEvents frames stream by the rules StreamSender documents, read
// line by line: an event is its lines up to and including the blank line
// that ends it; blank lines outside an event and an event the end of the
// stream cuts off are not events.
func refEvents(stream []byte) [][]byte {
	var events [][]byte
	var cur []byte
	for len(stream) > 0 {
		i := bytes.IndexByte(stream, '\n')
		if i < 0 {
			break // a last line without its newline ends nothing
		}
		l := stream[:i+1]
		stream = stream[i+1:]
		if strings.Trim(string(l), "\r\n") == "" {
			if len(cur) > 0 {
				events = append(events, append(cur, l...))
			}
			cur = nil
			continue
		}
		cur = append(cur, l...)
	}
	return events
}

// eventFields returns an event's name (its last event: field, trimmed)
// and data: its data: fields, one leading space dropped, joined by
// newlines, nil when there are none. Leading empty data fields are left
// out, as the reader leaves them out (the SSE rules would keep a newline
// for each; nothing depends on it), so an error event whose data fields
// are all empty has no data and is no error.
func eventFields(ev []byte) (string, []byte) {
	var name string
	var data []byte
	for _, l := range strings.SplitAfter(string(ev), "\n") {
		l = strings.TrimRight(l, "\r\n")
		if v, ok := strings.CutPrefix(l, "event:"); ok {
			name = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "data:"); ok {
			v = strings.TrimPrefix(v, " ")
			switch {
			case data != nil:
				data = append(append(data, '\n'), v...)
			case v != "":
				data = []byte(v)
			}
		}
	}
	return name, data
}

// errorClass is the class the docs give a mid-stream error event.
func errorClass(data []byte) client.Class {
	var e api.ErrorBody
	_ = json.Unmarshal(data, &e)
	switch e.Err.Type {
	case api.ErrOverloaded:
		return client.Overloaded
	case api.ErrRateLimit:
		return client.RateLimited
	case api.ErrInvalidRequest, api.ErrNotFound, api.ErrRequestTooLarge:
		return client.Invalid
	}
	return client.ServerError
}

// sameOutcome compares what a stream's reader decides.
func sameOutcome(a, b client.Outcome) bool {
	return a.Class == b.Class && a.Status == b.Status && bytes.Equal(a.Body, b.Body) &&
		reflect.DeepEqual(a.Usage, b.Usage) && a.StopReason == b.StopReason
}

// FuzzStream feeds any bytes as the event stream of a 200 answer, read in
// fuzzed pieces. It checks that the sink gets exactly the whole events of
// the stream, byte for byte (no stray blank line, nothing of an event cut
// off at the end); that the outcome — class, body, usage, stop reason —
// and the events are the same however the stream is split into reads,
// with bytes without a newline appended, or with a reset instead of a
// clean end; that the class follows from the events (the last error
// event's class and data, else ok iff a message_stop came, else
// transport); and that a stop reason or usage only comes with the events
// that carry them.
func FuzzStream(f *testing.F) {
	whole := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	f.Add([]byte(whole), []byte(nil), []byte("x"))
	f.Add([]byte(whole), []byte{0, 1, 2, 3, 250}, []byte(nil))
	f.Add([]byte(strings.ReplaceAll(whole, "\n", "\r\n")), []byte{6}, []byte("event: message_stop"))
	f.Add([]byte(whole[:len(whole)/2]), []byte{9}, []byte(nil))
	f.Add([]byte("\n\n\r\n"+whole), []byte{0}, []byte(nil))
	f.Add([]byte("event: message_start\ndata: {\"message\":\ndata: {\"usage\":{\"input_tokens\":-5,\"output_tokens\":9223372036854775807}}}\n\n"), []byte(nil), []byte(nil))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\nevent: message_stop\ndata: {}\n\n"), []byte{3}, []byte(nil))
	f.Add([]byte("event:error\ndata:not json\n\n"), []byte(nil), []byte(nil))
	f.Add([]byte("event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"\xff\"},\"usage\":{\"output_tokens\":1e400}}\n\n"), []byte(nil), []byte(nil))
	f.Add([]byte(": comment\nid: 1\nretry: 10\nevent: message_stop\n\n\r\r\n"), []byte{1, 1}, []byte(nil))
	f.Add([]byte("data: "+strings.Repeat("x", 40<<10)+"\nevent: message_stop\n\n"), []byte{255, 128}, []byte(nil))
	rig := newStreamRig(f)
	f.Fuzz(func(t *testing.T, stream, splits, tail []byte) {
		tail = bytes.ReplaceAll(tail, []byte{'\n'}, nil)
		o, events := rig.run(t, stream, nil, io.EOF)
		want := refEvents(stream)
		if len(events) != len(want) {
			t.Fatalf("%d events delivered, the stream has %d whole events: %q want %q", len(events), len(want), events, want)
		}
		for i := range want {
			if !bytes.Equal(events[i], want[i]) {
				t.Fatalf("event %d is %q want %q", i, events[i], want[i])
			}
		}

		for _, v := range []struct {
			name           string
			stream, splits []byte
			end            error
		}{
			{"split", stream, splits, io.EOF},
			{"with an unfinished last line", append(bytes.Clone(stream), tail...), splits, io.EOF},
			{"reset", stream, splits, errFuzzReset},
		} {
			o2, events2 := rig.run(t, v.stream, v.splits, v.end)
			if !sameOutcome(o, o2) || !reflect.DeepEqual(events, events2) {
				t.Fatalf("%s (%v): %+v, %q\nwhole: %+v, %q", v.name, v.splits, o2, events2, o, events)
			}
		}

		var errData []byte
		stopped, delta, start := false, false, false
		for _, ev := range events {
			switch name, data := eventFields(ev); name {
			case "error":
				if data != nil {
					errData = data
				}
			case "message_stop":
				stopped = true
			case "message_delta":
				delta = true
			case "message_start":
				start = true
			}
		}
		switch {
		case errData != nil:
			if o.Class != errorClass(errData) || !bytes.Equal(o.Body, errData) || o.Err == nil {
				t.Fatalf("a stream with an error event %q: class %v, body %q, err %v", errData, o.Class, o.Body, o.Err)
			}
		case stopped:
			if o.Class != client.OK || o.Err != nil {
				t.Fatalf("a stream with message_stop: class %v, err %v", o.Class, o.Err)
			}
		default:
			if o.Class != client.Transport || o.Err == nil {
				t.Fatalf("a stream without message_stop: class %v, err %v", o.Class, o.Err)
			}
		}
		if o.Status != 200 {
			t.Fatalf("status %d", o.Status)
		}
		if o.StopReason != "" && !delta {
			t.Fatalf("stop reason %q without a message_delta event", o.StopReason)
		}
		if !reflect.DeepEqual(o.Usage, api.Usage{}) && !start && !delta {
			t.Fatalf("usage %+v without a message_start or message_delta event", o.Usage)
		}
	})
}

// FuzzStreamRoundTrip builds a well-formed stream, as the API sends it,
// from fuzzed usage, stop reason and text, with LF or CRLF lines, "data:"
// with or without its space, comments and id fields, data split over two
// lines, and pings, and reads it in fuzzed pieces: the outcome is ok with
// exactly the usage (message_start's, with message_delta's positive
// counts over it) and stop reason written, and the sink gets every event,
// in order.
func FuzzStreamRoundTrip(f *testing.F) {
	f.Add(int64(12), int64(0), int64(0), int64(31), "end_turn", "Hello", uint8(0), []byte(nil))
	f.Add(int64(0), int64(2048), int64(100000), int64(0), "max_tokens", "a\nb\r\n\n", uint8(0xff), []byte{0, 7})
	f.Add(int64(1<<62), int64(-1), int64(5), int64(-3), "", "\xff\xfe", uint8(0x15), []byte{1})
	f.Add(int64(7), int64(7), int64(7), int64(1), "refusal", "event: message_stop\n\n", uint8(0x2a), []byte{200, 3})
	rig := newStreamRig(f)
	f.Fuzz(func(t *testing.T, in, cacheCreate, cacheRead, out int64, stop, text string, style uint8, splits []byte) {
		nl := "\n"
		if style&1 != 0 {
			nl = "\r\n"
		}
		dataPrefix := "data: "
		if style&2 != 0 {
			dataPrefix = "data:"
		}
		var b strings.Builder
		var names []string
		event := func(name string, data any) {
			js, err := json.Marshal(data)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
			if style&4 != 0 {
				b.WriteString(": keep-alive" + nl + "id: " + fmt.Sprint(len(names)) + nl)
			}
			b.WriteString("event: " + name + nl)
			if style&8 != 0 {
				// Two data fields, joined by a newline after the object's
				// opening brace: still the same JSON.
				b.WriteString(dataPrefix + string(js[:1]) + nl + dataPrefix + string(js[1:]) + nl)
			} else {
				b.WriteString(dataPrefix + string(js) + nl)
			}
			b.WriteString(nl)
		}
		usage := map[string]any{"input_tokens": in, "cache_creation_input_tokens": cacheCreate,
			"cache_read_input_tokens": cacheRead, "output_tokens": 1}
		event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_fuzz", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
		for range int(style>>4) % 4 {
			event("ping", map[string]any{"type": "ping"})
		}
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": text}})
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}})
		event("message_stop", map[string]any{"type": "message_stop"})

		o, events := rig.run(t, []byte(b.String()), splits, io.EOF)
		var wantStop string // stop as JSON carries it (invalid UTF-8 replaced)
		js, _ := json.Marshal(stop)
		if err := json.Unmarshal(js, &wantStop); err != nil {
			t.Fatal(err)
		}
		want := api.Usage{InputTokens: in, CacheCreationInputTokens: cacheCreate, CacheReadInputTokens: cacheRead, OutputTokens: 1}
		if out > 0 {
			want.OutputTokens = out
		}
		if o.Class != client.OK || o.Err != nil || o.StopReason != wantStop || !reflect.DeepEqual(o.Usage, want) {
			t.Fatalf("stream %q: class %v, err %v, stop %q, usage %+v want ok, %q, %+v", b.String(), o.Class, o.Err, o.StopReason, o.Usage, wantStop, want)
		}
		if len(events) != len(names) {
			t.Fatalf("%d events delivered, %d sent", len(events), len(names))
		}
		for i, ev := range events {
			if name, _ := eventFields(ev); name != names[i] {
				t.Fatalf("event %d is %q want %s", i, ev, names[i])
			}
		}
	})
}
