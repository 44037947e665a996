package keys

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Every test secret contains marker, so a leak of any part of a value that
// is not its last four characters shows up as the marker, plain or in hex.
const marker = "S3CR3T"

const (
	secretHigh  = "sk-ant-api03-" + marker + "-high-prio-a1b2"
	secretBatch = "sk-ant-api03-" + marker + "-batch-c3d4"
	secretLow   = "sk-ant-api03-" + marker + "-low-prio-e5f6"
)

// assertNoSecret fails if out contains the marker, plain or hex-encoded in
// either case.
func assertNoSecret(t *testing.T, what, out string) {
	t.Helper()
	low := strings.ToLower(out)
	if strings.Contains(out, marker) || strings.Contains(low, strings.ToLower(marker)) ||
		strings.Contains(low, hex.EncodeToString([]byte(marker))) {
		t.Errorf("%s leaks the secret: %s", what, out)
	}
}

// loadEnv loads a pool from env alone (no .env, no keys file).
func loadEnv(t *testing.T, env map[string]string) *Pool {
	t.Helper()
	p, err := Load(LoadOptions{Env: EnvMap(env), NoDotEnv: true})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

// threeKeys loads high_prio, batch and low_prio.
func threeKeys(t *testing.T) *Pool {
	t.Helper()
	return loadEnv(t, map[string]string{EnvAPIKey: secretHigh, EnvBatch: secretBatch, EnvLowPrio: secretLow})
}

// TestFormatsNeverLeak formats keys, structs, slices and maps holding keys,
// and the pool itself, with every verb a caller might reach for.
func TestFormatsNeverLeak(t *testing.T) {
	p := threeKeys(t)
	k, _ := p.ByLabel(LabelHighPrio)
	type exported struct {
		P *Key
		V Key
	}
	type unexported struct {
		p *Key
		v Key
	}
	values := []struct {
		name string
		v    any
	}{
		{"*Key", k},
		{"Key", *k},
		{"struct of exported *Key and Key", exported{k, *k}},
		{"pointer to that struct", &exported{k, *k}},
		{"struct of unexported *Key and Key", unexported{k, *k}},
		{"pointer to the unexported struct", &unexported{k, *k}},
		{"[]*Key", p.Keys()},
		{"[]Key", []Key{*k}},
		{"map[string]*Key", map[string]*Key{"a": k}},
		{"map[Key]int", map[Key]int{*k: 1}},
		{"error formatted with the key", fmt.Errorf("request with %v: %w", k, errors.New("boom"))},
		{"*Pool", p},
		{"Pool", *p},
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%20v", "%-30s", "%.5s"}
	for _, val := range values {
		for _, verb := range verbs {
			t.Run(val.name+" "+verb, func(t *testing.T) {
				assertNoSecret(t, fmt.Sprintf("Sprintf(%q)", verb), fmt.Sprintf(verb, val.v))
			})
		}
		t.Run(val.name+" Sprint", func(t *testing.T) {
			assertNoSecret(t, "Sprint", fmt.Sprint(val.v)+fmt.Sprintln(val.v))
		})
	}
}

// TestRedactedForms pins the exact text each formatting path produces.
func TestRedactedForms(t *testing.T) {
	p := threeKeys(t)
	k, _ := p.ByLabel(LabelHighPrio)
	const want = "high_prio(…a1b2)"
	text, _ := k.MarshalText()
	tests := []struct {
		name, got, want string
	}{
		{"String", k.String(), want},
		{"GoString", k.GoString(), want},
		{"%v", fmt.Sprintf("%v", k), want},
		{"%v of a value", fmt.Sprintf("%v", *k), want},
		{"%#v", fmt.Sprintf("%#v", k), want},
		{"%s", fmt.Sprintf("%s", k), want},
		{"%q", fmt.Sprintf("%q", k), `"` + want + `"`},
		{"%x", fmt.Sprintf("%x", k), hex.EncodeToString([]byte(want))},
		{"%20v pads", fmt.Sprintf("%20v", k), "    " + want},
		{"MarshalText", string(text), want},
		{"LogValue", k.LogValue().String(), want},
		{"Label", k.Label(), "high_prio"},
		{"Last4", k.Last4(), "a1b2"},
		{"Source", k.Source(), "env ANTHROPIC_API_KEY"},
		{"Pool.String", p.String(), "keys.Pool[high_prio(…a1b2) batch(…c3d4) low_prio(…e5f6)]"},
		{"zero Key", Key{}.String(), "keys.Key(zero)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestShortValueHidesLast4(t *testing.T) {
	k := newKey("gw", "test", "abcdefgh12345") // 13 characters
	if k.Last4() != "" || k.String() != "gw(…)" {
		t.Errorf("Last4() = %q, String() = %q; want \"\" and \"gw(…)\"", k.Last4(), k.String())
	}
}

func TestJSONNeverLeaks(t *testing.T) {
	p := threeKeys(t)
	k, _ := p.ByLabel(LabelHighPrio)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"struct with *Key and Key", struct {
			P *Key
			V Key
		}{k, *k}, `{"P":"high_prio(…a1b2)","V":"high_prio(…a1b2)"}`},
		{"slice", p.Keys(), `["high_prio(…a1b2)","batch(…c3d4)","low_prio(…e5f6)"]`},
		{"map key", map[Key]int{*k: 1}, `{"high_prio(…a1b2)":1}`},
		{"pool", p, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			assertNoSecret(t, "json.Marshal", string(out))
			if string(out) != tt.want {
				t.Errorf("json.Marshal = %s want %s", out, tt.want)
			}
		})
	}
}

func TestSlogNeverLeaks(t *testing.T) {
	p := threeKeys(t)
	k, _ := p.ByLabel(LabelBatch)
	handlers := []struct {
		name string
		new  func(*bytes.Buffer) slog.Handler
	}{
		{"json", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }},
	}
	for _, h := range handlers {
		t.Run(h.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(h.new(&buf))
			log.Info("sending", "key", k, "value", *k, "keys", p.Keys(), "pool", p,
				slog.Group("g", slog.Any("k", k)), "err", fmt.Errorf("with %v", k))
			log.With("key", k).Warn("dead")
			out := buf.String()
			assertNoSecret(t, h.name+" handler", out)
			if !strings.Contains(out, "batch(…c3d4)") {
				t.Errorf("log lacks the redacted form: %s", out)
			}
		})
	}
}

func TestApply(t *testing.T) {
	p := threeKeys(t)
	k, _ := p.ByLabel(LabelLowPrio)
	tests := []struct {
		style        AuthStyle
		header, want string
	}{
		{AuthXAPIKey, "x-api-key", secretLow},
		{AuthBearer, "Authorization", "Bearer " + secretLow},
	}
	for _, tt := range tests {
		t.Run(tt.style.String(), func(t *testing.T) {
			h := http.Header{}
			k.Apply(h, tt.style)
			if got := h.Get(tt.header); got != tt.want {
				t.Errorf("after Apply(%v) %s = %q want %q", tt.style, tt.header, got, tt.want)
			}
			if len(h) != 1 {
				t.Errorf("Apply(%v) set %d headers, want 1", tt.style, len(h))
			}
		})
	}
}

func TestPanicsOnMisuse(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	tests := []struct {
		name string
		f    func()
	}{
		{"Apply on zero Key", func() { Key{}.Apply(http.Header{}, AuthXAPIKey) }},
		{"SetOrg on zero Key", func() { Key{}.SetOrg("o") }},
		{"MarkDead on zero Key", func() { Key{}.MarkDead("x") }},
		{"unknown AuthStyle", func() { k.Apply(http.Header{}, AuthStyle(9)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("did not panic")
				}
				assertNoSecret(t, "panic value", fmt.Sprint(r))
			}()
			tt.f()
		})
	}
}

func TestParseAuthStyle(t *testing.T) {
	tests := []struct {
		in      string
		want    AuthStyle
		wantErr bool
	}{
		{"x-api-key", AuthXAPIKey, false},
		{"Bearer", AuthBearer, false},
		{"basic", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseAuthStyle(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseAuthStyle(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMarkDeadOnce(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	if dead, _ := k.Dead(); dead {
		t.Fatal("new key is dead")
	}
	if !k.MarkDead("401 with " + secretHigh) {
		t.Fatal("first MarkDead = false")
	}
	if k.MarkDead("second reason") {
		t.Error("second MarkDead = true")
	}
	dead, reason := k.Dead()
	if !dead || reason != "401 with a(…a1b2)" {
		t.Errorf("Dead() = %v, %q; want true, first reason redacted", dead, reason)
	}
	// A copy of the Key shares its state.
	cp := *k
	if dead, _ := cp.Dead(); !dead {
		t.Error("a copy of a dead Key is not dead")
	}
}

func TestMarkDeadConcurrent(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	const n = 64
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts int
	)
	for i := range n {
		wg.Go(func() {
			if k.MarkDead(fmt.Sprint("reason ", i)) {
				mu.Lock()
				firsts++
				mu.Unlock()
			}
			k.Dead()
			k.SetOrg("org")
			k.Org()
		})
	}
	wg.Wait()
	if firsts != 1 {
		t.Errorf("%d of %d concurrent MarkDead calls returned true, want 1", firsts, n)
	}
}

func TestOrg(t *testing.T) {
	k := newKey("a", "test", secretHigh)
	steps := []struct {
		set, want string
	}{
		{"", ""},
		{"org-1", "org-1"},
		{"", "org-1"}, // a response without the header changes nothing
		{"org-2", "org-2"},
	}
	for _, s := range steps {
		k.SetOrg(s.set)
		if got := k.Org(); got != s.want {
			t.Errorf("after SetOrg(%q) Org() = %q want %q", s.set, got, s.want)
		}
	}
}
