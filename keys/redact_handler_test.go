package keys_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/keys"
)

// TestRedactingHandlerKeepsKeysOutOfLogs: a key value in the message, a
// string attribute, an error (a raw error body), a Stringer, a group, or
// attributes bound with With never reaches the output.
func TestRedactingHandlerKeepsKeysOutOfLogs(t *testing.T) {
	const secret = "sk-ant-test-redact-handler-0001"
	p, err := keys.Load(keys.LoadOptions{Env: keys.EnvMap(map[string]string{keys.EnvAPIKey: secret}), NoDotEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(keys.RedactingHandler(slog.NewTextHandler(&buf, nil), p.Redact))
	body := fmt.Errorf(`batch: HTTP 400: {"error":{"message":"invalid x-api-key %s"}}`, secret)
	log.With("bound", "key="+secret).WithGroup("g").Warn("echo "+secret,
		"s", secret, "err", body, "wrapped", errors.Join(errors.New("a"), body),
		"stringer", stringer(secret), "n", 42,
		slog.Group("inner", "s", "x"+secret+"y"))
	out := buf.String()
	if strings.Contains(out, secret) || strings.Contains(out, secret[len(secret)-12:]) {
		t.Fatalf("the key reached the log:\n%s", out)
	}
	for _, want := range []string{"echo ", "g.n=42", "bound=", "g.inner.s="} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q: redaction must keep the rest", out, want)
		}
	}
}

type stringer string

func (s stringer) String() string { return "stringer " + string(s) }
