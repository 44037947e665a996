package keys_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/keys"
)

type textKey string

func (k textKey) MarshalText() ([]byte, error) { return []byte("k=" + string(k)), nil }
func (k textKey) String() string               { return "textKey" }

func TestRedactingHandlerBytesAndTextMarshalers(t *testing.T) {
	const secret = "sk-ant-test-redact-handler-0001"
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"body []byte":   []byte(`{"error":"invalid x-api-key ` + secret + `"}`),
		"TextMarshaler": textKey(secret),
	} {
		var buf bytes.Buffer
		slog.New(keys.RedactingHandler(slog.NewTextHandler(&buf, nil), p.Redact)).Warn("x", "v", v)
		if strings.Contains(buf.String(), secret) {
			t.Errorf("%s: the key reached the log: %s", name, buf.String())
		}
	}
}
