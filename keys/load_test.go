package keys

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// writeFile writes content to dir/name with the given mode and returns the
// path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode is subject to umask
		t.Fatal(err)
	}
	return path
}

// summary lists a pool as "label=value source" lines, values and all: the
// tests compare values, the package never prints them.
func summary(p *Pool) []string {
	var out []string
	for _, k := range p.Keys() {
		out = append(out, k.Label()+"="+k.k.secret()+" "+k.Source())
	}
	return out
}

func val(name string) string { return "sk-ant-api03-" + marker + "-" + name + "-0000" }

// TestLoadSources covers the order of sources, environment over .env,
// lists, keys files, de-duplication and label clashes.
func TestLoadSources(t *testing.T) {
	a, b, c, d := val("a"), val("b"), val("c"), val("d")
	tests := []struct {
		name         string
		env          map[string]string
		dotEnv       string // "" means no .env file
		noDotEnv     bool
		keysFile     string // "" means no keys file
		want         []string
		wantWarnings []string // substrings, one per warning, in order
	}{
		{
			name: "single variables in order",
			env:  map[string]string{EnvLowPrio: c, EnvBatch: b, EnvAPIKey: a},
			want: []string{"high_prio=" + a + " env ANTHROPIC_API_KEY", "batch=" + b + " env ANTHROPIC_BATCH_KEY", "low_prio=" + c + " env ANTHROPIC_API_KEY_LOW_PRIO"},
		},
		{
			name: "list of bare and labelled items",
			env:  map[string]string{EnvAPIKeys: " " + a + " , team=" + b + ",, " + c + ","},
			want: []string{"key1=" + a + " env ANTHROPIC_API_KEYS item 1", "team=" + b + " env ANTHROPIC_API_KEYS item 2", "key3=" + c + " env ANTHROPIC_API_KEYS item 3"},
		},
		{
			name:   "environment wins over .env, .env fills the rest",
			env:    map[string]string{EnvAPIKey: a},
			dotEnv: "ANTHROPIC_API_KEY=" + d + "\nexport ANTHROPIC_BATCH_KEY='" + b + "'\nOTHER=x\n",
			want:   []string{"high_prio=" + a + " env ANTHROPIC_API_KEY", "batch=" + b + " .env ANTHROPIC_BATCH_KEY"},
			wantWarnings: []string{"ANTHROPIC_API_KEY is set in the environment and in " + ".env (line 1): using the environment's",
				"accessible by group or others"},
		},
		{
			name:   "the same value in both places is no conflict",
			env:    map[string]string{EnvAPIKey: a},
			dotEnv: "ANTHROPIC_API_KEY=" + a,
			want:   []string{"high_prio=" + a + " env ANTHROPIC_API_KEY"},
		},
		{
			name:         "blank environment value counts as absent",
			env:          map[string]string{EnvAPIKey: "  \t", EnvBatch: ""},
			dotEnv:       "ANTHROPIC_API_KEY=" + a + "\nANTHROPIC_BATCH_KEY=\"  \"",
			want:         []string{"high_prio=" + a + " .env ANTHROPIC_API_KEY"},
			wantWarnings: []string{"accessible by group or others"},
		},
		{
			name:     "NoDotEnv ignores .env",
			env:      map[string]string{EnvBatch: b},
			dotEnv:   "ANTHROPIC_API_KEY=" + a,
			noDotEnv: true,
			want:     []string{"batch=" + b + " env ANTHROPIC_BATCH_KEY"},
		},
		{
			name:         ".env list",
			dotEnv:       "ANTHROPIC_API_KEYS=x=" + a + "," + b,
			want:         []string{"x=" + a + " .env ANTHROPIC_API_KEYS item 1", "key2=" + b + " .env ANTHROPIC_API_KEYS item 2"},
			wantWarnings: []string{"accessible by group or others"},
		},
		{
			name:         "same value under two labels is kept once, first label",
			env:          map[string]string{EnvAPIKey: a, EnvLowPrio: a, EnvAPIKeys: "spare=" + b + ",again=" + a},
			want:         []string{"high_prio=" + a + " env ANTHROPIC_API_KEY", "spare=" + b + " env ANTHROPIC_API_KEYS item 1"},
			wantWarnings: []string{"key low_prio (env ANTHROPIC_API_KEY_LOW_PRIO) has the same value as high_prio", "key again (env ANTHROPIC_API_KEYS item 2) has the same value as high_prio"},
		},
		{
			name:     "keys file after the environment, label clashes get a suffix",
			env:      map[string]string{EnvAPIKey: a},
			keysFile: "# team keys\nhigh_prio=" + b + "\n\nhigh_prio=" + c + "\nhigh_prio-2=" + d + "\n",
			want: []string{"high_prio=" + a + " env ANTHROPIC_API_KEY", "high_prio-2=" + b + " keys file {kf} line 2",
				"high_prio-3=" + c + " keys file {kf} line 4", "high_prio-2-2=" + d + " keys file {kf} line 5"},
			wantWarnings: []string{"label high_prio (keys file {kf} line 2) is already taken: using high_prio-2",
				"label high_prio (keys file {kf} line 4) is already taken: using high_prio-3",
				"label high_prio-2 (keys file {kf} line 5) is already taken: using high_prio-2-2"},
		},
		{
			name:         "blank entries are skipped with a warning",
			env:          map[string]string{EnvAPIKeys: "empty=, " + a},
			keysFile:     "none=\n",
			want:         []string{"key2=" + a + " env ANTHROPIC_API_KEYS item 2"},
			wantWarnings: []string{"env ANTHROPIC_API_KEYS item 1: label empty has no key: skipped", "keys file {kf} line 1: label none has no key: skipped"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := LoadOptions{Env: EnvMap(tt.env), Dir: dir, NoDotEnv: tt.noDotEnv}
			if tt.dotEnv != "" {
				writeFile(t, dir, ".env", tt.dotEnv, 0o644)
			}
			if tt.keysFile != "" {
				opts.KeysFile = writeFile(t, dir, "keys.txt", tt.keysFile, 0o600)
			}
			p, err := Load(opts)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			fix := strings.NewReplacer("{kf}", opts.KeysFile, ".env (line", filepath.Join(dir, ".env")+" (line")
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = fix.Replace(w)
			}
			if got := summary(p); !slices.Equal(got, want) {
				t.Errorf("keys:\n got %q\nwant %q", got, want)
			}
			warnings := p.Warnings()
			if runtime.GOOS == "windows" {
				return // no permission warnings there
			}
			if len(warnings) != len(tt.wantWarnings) {
				t.Fatalf("warnings = %q, want %d", warnings, len(tt.wantWarnings))
			}
			for i, w := range warnings {
				assertNoSecret(t, "warning", w)
				if want := fix.Replace(tt.wantWarnings[i]); !strings.Contains(w, want) {
					t.Errorf("warning %d = %q, want it to contain %q", i, w, want)
				}
			}
		})
	}
}

// TestLoadEnvDefaultsToProcess checks the zero LoadOptions read the process
// environment and ./.env.
func TestLoadEnvDefaultsToProcess(t *testing.T) {
	for _, name := range []string{EnvAPIKey, EnvBatch, EnvLowPrio, EnvAPIKeys} {
		t.Setenv(name, "")
	}
	t.Setenv(EnvBatch, val("proc"))
	t.Chdir(t.TempDir())
	p, err := Load(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := summary(p), []string{"batch=" + val("proc") + " env ANTHROPIC_BATCH_KEY"}; !slices.Equal(got, want) {
		t.Errorf("keys = %q want %q", got, want)
	}
}

func TestLoadErrorsNeverLeak(t *testing.T) {
	s := val("x")
	tests := []struct {
		name     string
		env      map[string]string
		dotEnv   string
		keysFile string
		want     []string // substrings of the error
	}{
		{"keys file line without label", nil, "", "ok=" + val("ok") + "\n" + s + "\n", []string{"keys file", "keys.txt", "line 2", "expected label=key"}},
		{"keys file bad label", nil, "", "my key!=" + s, []string{"keys.txt line 1", "label must match"}},
		{"keys file key with a space", nil, "", "a=" + s + " " + s, []string{"keys.txt line 1", "whitespace"}},
		{"keys file missing", nil, "", "-", []string{"keys file", "no such file"}},
		{".env unterminated quote", nil, "\nANTHROPIC_API_KEY=\"" + s + "\n", "", []string{".env line 2", "not closed"}},
		{".env line without =", nil, s, "", []string{".env line 1", "expected NAME=VALUE"}},
		{".env line that is the key as a name", nil, s + "=x", "", []string{".env line 1", "variable name"}},
		{".env text after the quote", nil, "ANTHROPIC_API_KEY='" + s + "'" + s, "", []string{".env line 1", "after the closing quote"}},
		{".env key with a space", nil, "ANTHROPIC_API_KEY=" + s + " " + s, "", []string{".env ANTHROPIC_API_KEY", "whitespace"}},
		{"env key with quotes left in", map[string]string{EnvAPIKey: `"` + s + `"`}, "", "", []string{"env ANTHROPIC_API_KEY", "quote"}},
		{"env key with a newline", map[string]string{EnvBatch: s + "\n" + s}, "", "", []string{"env ANTHROPIC_BATCH_KEY", "whitespace"}},
		{"env key too short", map[string]string{EnvLowPrio: marker}, "", "", []string{"env ANTHROPIC_API_KEY_LOW_PRIO", "too short"}},
		{"list bad label", map[string]string{EnvAPIKeys: val("ok") + ",my label=" + s}, "", "", []string{"env ANTHROPIC_API_KEYS item 2", "label must match"}},
		{"list bad item", map[string]string{EnvAPIKeys: s + " " + s}, "", "", []string{"env ANTHROPIC_API_KEYS item 1", "whitespace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := LoadOptions{Env: EnvMap(tt.env), Dir: dir}
			if tt.dotEnv != "" {
				writeFile(t, dir, ".env", tt.dotEnv, 0o600)
			}
			switch tt.keysFile {
			case "":
			case "-":
				opts.KeysFile = filepath.Join(dir, "keys.txt")
			default:
				opts.KeysFile = writeFile(t, dir, "keys.txt", tt.keysFile, 0o600)
			}
			p, err := Load(opts)
			if err == nil {
				t.Fatalf("Load = %v, want an error", p)
			}
			msg := err.Error()
			assertNoSecret(t, "error", msg)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestLoadNoKeys(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		dotEnv   string
		noDotEnv bool
		keysFile string
		want     string
	}{
		{"nothing at all", nil, "", false, "", ".env"},
		{"blank values", map[string]string{EnvAPIKey: " ", EnvAPIKeys: " , ,"}, "ANTHROPIC_BATCH_KEY=", false, "", ".env"},
		{".env off", nil, "ANTHROPIC_API_KEY=" + val("a"), true, "", ".env reading is off"},
		{"empty keys file", nil, "", false, "# nothing yet\n", "keys.txt has none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := LoadOptions{Env: EnvMap(tt.env), Dir: dir, NoDotEnv: tt.noDotEnv}
			if tt.dotEnv != "" {
				writeFile(t, dir, ".env", tt.dotEnv, 0o600)
			}
			if tt.keysFile != "" {
				opts.KeysFile = writeFile(t, dir, "keys.txt", tt.keysFile, 0o600)
			}
			_, err := Load(opts)
			if !errors.Is(err, ErrNoKeys) {
				t.Fatalf("Load error = %v, want ErrNoKeys", err)
			}
			for _, w := range []string{EnvAPIKey, EnvBatch, EnvLowPrio, EnvAPIKeys, "--keys-file", tt.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			assertNoSecret(t, "error", err.Error())
		})
	}
}

func TestLoadPermissionWarnings(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no permission bits on Windows")
	}
	tests := []struct {
		name         string
		dotEnvMode   os.FileMode // 0: no .env
		dotEnvKey    bool        // .env supplies a key
		keysFileMode os.FileMode // 0: no keys file
		want         []string
	}{
		{"private files", 0o600, true, 0o600, nil},
		{"keys file readable by others", 0, false, 0o644, []string{"keys.txt"}},
		{"keys file readable by group", 0, false, 0o640, []string{"keys.txt"}},
		{".env that supplied a key", 0o644, true, 0, []string{".env"}},
		{".env that supplied nothing is not ours to judge", 0o644, false, 0o600, nil},
		{"both", 0o604, true, 0o660, []string{"keys.txt", ".env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := LoadOptions{Env: EnvMap(nil), Dir: dir}
			if tt.dotEnvMode != 0 {
				content := "OTHER=1\n"
				if tt.dotEnvKey {
					content += "ANTHROPIC_API_KEY=" + val("a")
				}
				writeFile(t, dir, ".env", content, tt.dotEnvMode)
			}
			if tt.keysFileMode != 0 {
				opts.KeysFile = writeFile(t, dir, "keys.txt", "k="+val("k"), tt.keysFileMode)
			}
			p, err := Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], filepath.Join(dir, w)) || !strings.Contains(got[i], "chmod 600") {
					t.Errorf("warning %d = %q, want one about %s", i, got[i], w)
				}
			}
		})
	}
}
