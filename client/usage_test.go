package client

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
)

// usageCases are usage objects the API sends and the odd ones the fast
// path must hand to encoding/json.
var usageCases = []string{
	`{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":3000,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":3,"service_tier":"standard","server_tool_use":null,"output_tokens_details":{"thinking_tokens":0}}`,
	`{ "input_tokens" : 7 , "output_tokens" : 1 }`,
	`{}`,
	`{"input_tokens":null,"service_tier":null,"cache_creation":null,"server_tool_use":null}`,
	`{"inference_geo":"us","server_tool_use":{"web_search_requests":2}}`,
	`{"Input_Tokens":5}`,                    // case-folded: encoding/json takes it
	`{"input_tokens":5,"INPUT_TOKENS":6}`,   // both, last wins
	`{"input_tokens":5,"input_tokens":9}`,   // duplicate
	`{"input_tokens":1.0}`,                  // an error in encoding/json
	`{"input_tokens":1e3}`,                  // an error too
	`{"input_tokens":"12"}`,                 // an error
	`{"input_tokens":-4}`,                   //
	`{"input_tokens":99999999999999999999}`, // overflows: an error
	`{"input_tokens":999999999999999999}`,   // 18 digits
	`{"service_tier":"\u0073tandard"}`,      // escaped
	`{"\u0069nput_tokens":3}`,               // an escaped key
	"{\"service_tier\":\"std\xff\"}",        // invalid UTF-8: replaced by encoding/json
	`{"service_tier":5}`,                    // an error
	`{"cache_creation":{"ephemeral_1h_input_tokens":3000,"ephemeral_5m_input_tokens":2}}`,
	`{"cache_creation":{"Ephemeral_1h_input_tokens":3000}}`,
	`{"cache_creation":{"ephemeral_1h_input_tokens":1,"ephemeral_1h_input_tokens":2}}`,
	`{"cache_creation":{"ephemeral_1h_input_tokens":1},"cache_creation":{"ephemeral_5m_input_tokens":2}}`, // merged by encoding/json
	`{"cache_creation":7}`,
	`{"cache_creation":{"ephemeral_1h_input_tokens":null,"other":[1,2]}}`,
	`{"output_tokens_details": { "thinking_tokens" : 4 } }`,
	`{"\u212aey":1,"input_\u212a":2}`, // the Kelvin sign folds to k
	`[]`, `5`, `"usage"`,
}

// TestDecodeUsageIsUnmarshal: decodeUsage gives what json.Unmarshal into
// an api.Usage gives, value and error, on every case — the fast path's
// and the ones it must hand back.
func TestDecodeUsageIsUnmarshal(t *testing.T) {
	for _, c := range usageCases {
		checkUsage(t, []byte(c))
	}
	// The shape the API sends takes the fast path.
	if _, ok := walkUsage([]byte(usageCases[0])); !ok {
		t.Errorf("the API's usage object left the fast path")
	}
}

func FuzzDecodeUsage(f *testing.F) {
	for _, c := range usageCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		checkUsage(t, b)
	})
}

func checkUsage(t *testing.T, b []byte) {
	t.Helper()
	var want api.Usage
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeUsage(b)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%s: error %v, encoding/json's %v", b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", b, got, want)
	}
}

// TestUsageKeysAreTheTags: the walk's key lists are api.Usage's and
// api.CacheCreation's JSON names in field order — a field added to either
// without its name would be dropped by the walk and kept by
// json.Unmarshal.
func TestUsageKeysAreTheTags(t *testing.T) {
	tags := func(v any) []string {
		var names []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			names = append(names, name)
		}
		return names
	}
	if want := tags(api.Usage{}); !slices.Equal(usageKeys[:], want) {
		t.Errorf("usageKeys = %q, api.Usage's tags are %q", usageKeys, want)
	}
	if want := tags(api.CacheCreation{}); !slices.Equal(cacheCreationKeys[:], want) {
		t.Errorf("cacheCreationKeys = %q, api.CacheCreation's tags are %q", cacheCreationKeys, want)
	}
}
