package proxy

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
)

// A virtual batch's errored row never holds a key an upstream echoed: the
// results a caller downloads, and the file in the state dir, are its line.
func TestRowLineRedactsAnErrorsMessage(t *testing.T) {
	const secret = "sk-ant-api03-echoed-into-a-row-3131"
	res := dispatch.Result{Class: api.ClassFinal, Status: 400,
		Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"bad key ` + secret + `"}}`)}
	line := string(rowLine("r0", res, func(s string) string { return strings.ReplaceAll(s, secret, "k(…3131)") }))
	if strings.Contains(line, secret) || !strings.Contains(line, "bad key k(…3131)") || !strings.Contains(line, `"errored"`) {
		t.Fatalf("row %s", line)
	}
}
