package gosdk_test

import (
	"os"
	"strings"
	"testing"

	anthropic1 "github.com/anthropics/anthropic-sdk-go"
	option1 "github.com/anthropics/anthropic-sdk-go/option"
	anthropic2 "github.com/anthropics/anthropic-sdk-go/v2"
	option2 "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sluice-dev/sluice/internal/testkit/proxytest"
)

// TestTwoEnvironmentVariables checks the migration guide's claim for Go:
// a program that builds its client with NewClient and no base URL or key
// reaches the proxy once ANTHROPIC_BASE_URL points at it and
// ANTHROPIC_API_KEY holds the proxy's token. (Not parallel: it sets the
// environment.)
func TestTwoEnvironmentVariables(t *testing.T) {
	e := proxytest.Start(t, proxytest.Options{})
	t.Setenv("HOME", t.TempDir()) // no profile files
	for _, name := range []string{"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_CONFIG_DIR"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	t.Setenv("ANTHROPIC_API_KEY", e.Token)
	t.Setenv("ANTHROPIC_BASE_URL", e.URL)

	v1 := anthropic1.NewClient(option1.WithMaxRetries(0))
	m1, err := v1.Messages.New(ctxOf(t), anthropic1.MessageNewParams{Model: model, MaxTokens: 32,
		Messages: []anthropic1.MessageParam{anthropic1.NewUserMessage(anthropic1.NewTextBlock("v1 from the environment"))}})
	if err != nil {
		t.Errorf("v1: %v", err)
	} else if !strings.HasPrefix(v1Msg(m1).Text, "sim-") {
		t.Errorf("v1: %+v", v1Msg(m1))
	}
	v2 := anthropic2.NewClient(option2.WithMaxRetries(0))
	m2, err := v2.Messages.New(ctxOf(t), anthropic2.MessageNewParams{Model: model, MaxTokens: 32,
		Messages: []anthropic2.MessageParam{anthropic2.NewUserMessage(anthropic2.NewTextBlock("v2 from the environment"))}})
	if err != nil {
		t.Errorf("v2: %v", err)
	} else if !strings.HasPrefix(v2Msg(m2).Text, "sim-") {
		t.Errorf("v2: %+v", v2Msg(m2))
	}
	if st, _ := e.Dispatcher.Snapshot(); st.OK != 2 {
		t.Errorf("the proxy answered %d calls, want 2", st.OK)
	}
}
