package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestLoggerRedactsTheLoadedKeys: once the key pool is loaded, every
// logger of the command — made before or after — prints no key value,
// whatever a lower layer hands it.
func TestLoggerRedactsTheLoadedKeys(t *testing.T) {
	const secret = "sk-ant-test-cmd-logger-redact-0001"
	t.Setenv("ANTHROPIC_API_KEY", secret)
	t.Setenv("ANTHROPIC_BATCH_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY_LOW_PRIO", "")
	t.Setenv("ANTHROPIC_API_KEYS", "")
	t.Cleanup(func() { logRedact.Store(nil) })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	before := newLogger()
	f := &engineFlags{noDotEnv: true}
	if _, err := f.loadKeys(slog.New(slog.DiscardHandler)); err != nil {
		os.Stderr = stderr
		t.Fatal(err)
	}
	after := newLogger()
	os.Stderr = stderr
	before.Warn("batch: create refused", "err", `{"error":{"message":"bad key `+secret+`"}}`)
	after.Info("echo " + secret)
	w.Close()
	var out bytes.Buffer
	out.ReadFrom(r)
	if strings.Contains(out.String(), secret) || !strings.Contains(out.String(), "echo ") {
		t.Fatalf("log output:\n%s", out.String())
	}
}
