package results

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// TestEncode: a record is one compact line ending in '\n', HTML characters
// unescaped, a nil result written as null; a result that is not JSON is
// refused with the decoder's reason.
func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		rec  api.ResultRecord
		want string
	}{
		{api.ResultRecord{CustomID: "a", Result: json.RawMessage(" { \"x\" : [ 1 , \"<a b>\\n\" ] }\n")},
			`{"custom_id":"a","result":{"x":[1,"<a b>\n"]}}` + "\n"},
		{api.ResultRecord{CustomID: "a&b", Sluice: &api.RunMeta{ParamsHash: "abc", Class: "final"}},
			`{"custom_id":"a&b","result":null,"sluice":{"params_hash":"abc","class":"final"}}` + "\n"},
	} {
		if got, err := encode(tc.rec); err != nil || string(got) != tc.want {
			t.Errorf("encode(%+v) = %s, %v; want %s", tc.rec, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":}`, `nul`} {
		if _, err := encode(api.ResultRecord{CustomID: "x", Result: json.RawMessage(bad)}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("encode of the result %q: %v, want it refused", bad, err)
		}
	}
}
