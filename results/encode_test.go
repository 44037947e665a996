package results

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// encoderLine is what a json.Encoder with HTML escaping off writes for
// rec: the format encode must keep byte for byte.
func encoderLine(rec api.ResultRecord) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(rec)
	return buf.Bytes(), err
}

// fullMeta is a RunMeta with every field set, by reflection: a field
// added to api.RunMeta and not to encode makes TestEncodeIsEncoder fail
// instead of vanishing from results files.
func fullMeta() *api.RunMeta {
	m := &api.RunMeta{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("v<&>" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(-7 * (i + 1)))
		default:
			panic("fullMeta: a RunMeta field of kind " + f.Kind().String() + ": teach encode and this test")
		}
	}
	return m
}

func TestEncodeIsEncoder(t *testing.T) {
	for _, rec := range []api.ResultRecord{
		{CustomID: "a", Result: json.RawMessage(`{"type":"succeeded"}`)},
		{CustomID: "a", Result: nil},
		{CustomID: "q\"\\\b\f\n\r\t\x00\x1f\x7f<>&\u2028\u2029é\xff\xc3", Result: json.RawMessage(" { \"x\" : [ 1 , \"a b\\n\" ] }\n"), Sluice: fullMeta()},
		{CustomID: "id", Result: json.RawMessage(`{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"<tag> & \u2028"}}}`), Sluice: &api.RunMeta{ParamsHash: "abc", Class: "final"}},
	} {
		got, err := encode(rec)
		want, werr := encoderLine(rec)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Errorf("encode(%+v):\n got %q (%v)\nwant %q (%v)", rec, got, err, want, werr)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":}`, `nul`} {
		if _, err := encode(api.ResultRecord{CustomID: "x", Result: json.RawMessage(bad)}); err == nil {
			t.Errorf("encode accepted the result %q, which is not JSON", bad)
		}
	}
}

func FuzzEncode(f *testing.F) {
	f.Add("item-1", `{"type":"succeeded","message":{"content":[{"text":"hi"}]}}`, "00ff", "ok", "org", "key", 3, int64(120), "")
	f.Add("\xff\u2028<", " [ 1 , 2 ] ", "", "", "", "", 0, int64(0), "msgbatch_1")
	f.Fuzz(func(t *testing.T, id, result, hash, class, org, key string, attempts int, latency int64, batch string) {
		if !json.Valid([]byte(result)) {
			return
		}
		rec := api.ResultRecord{CustomID: id, Result: json.RawMessage(result),
			Sluice: &api.RunMeta{ParamsHash: hash, Class: class, Org: org, Key: key, Attempts: attempts, LatencyMs: latency, BatchID: batch, Route: strings.ToUpper(class)}}
		got, err := encode(rec)
		want, werr := encoderLine(rec)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("encode:\n got %q (%v)\nwant %q (%v)", got, err, want, werr)
		}
	})
}
