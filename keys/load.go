package keys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// The environment variables Load reads, in the order their keys join the
// pool. The same names are read from a .env file.
const (
	EnvAPIKey  = "ANTHROPIC_API_KEY"          // one key, label high_prio
	EnvBatch   = "ANTHROPIC_BATCH_KEY"        // one key, label batch
	EnvLowPrio = "ANTHROPIC_API_KEY_LOW_PRIO" // one key, label low_prio
	EnvAPIKeys = "ANTHROPIC_API_KEYS"         // comma list of key or label=key
)

// Labels of the single-key variables.
const (
	LabelHighPrio = "high_prio"
	LabelBatch    = "batch"
	LabelLowPrio  = "low_prio"
)

// ErrNoKeys is returned, wrapped with what to set, when Load finds no key.
var ErrNoKeys = errors.New("keys: no API key found")

// LoadOptions says where Load looks for keys. The zero value reads the
// process environment and ./.env.
type LoadOptions struct {
	// Env looks up an environment variable; nil means os.LookupEnv. Tests
	// inject a map with EnvMap.
	Env func(name string) (value string, ok bool)
	// Dir is the directory holding the .env file; "" means ".".
	Dir string
	// KeysFile, if set, is a file of label=key lines (the --keys-file flag).
	KeysFile string
	// NoDotEnv skips the .env file.
	NoDotEnv bool
}

// EnvMap returns a lookup function over m for LoadOptions.Env.
func EnvMap(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// candidate is one key value found by Load, before de-duplication.
type candidate struct{ label, value, source, workspace string }

// Load gathers keys from every source, merged in this order:
// ANTHROPIC_API_KEY (label high_prio), ANTHROPIC_BATCH_KEY (batch),
// ANTHROPIC_API_KEY_LOW_PRIO (low_prio), ANTHROPIC_API_KEYS (a comma list
// whose items are "key", labelled key1, key2, … by position, or
// "label=key"), then the keys file, one "label=key" per line with # comments
// and blank lines.
//
// Each variable is taken from the process environment, else from the .env
// file in opts.Dir; for the same variable the environment wins, and the .env
// value is not used at all. Values are trimmed; a blank value counts as
// absent. A value must be at least 8 printable ASCII characters without
// spaces.
//
// A value found twice with the same workspace is kept once, under its first
// label, with a warning; with two workspaces it is two keys.
// Labels must match [A-Za-z0-9_.-]+; a label already taken gets the suffix
// -2 (-3, …) with a warning. Files readable by group or others are warned
// about. Warnings are in Pool.Warnings.
//
// Load fails on an unreadable file, a malformed line (the error names the
// file and line number, never the line's content), an invalid label or
// value, and when no key is found at all (an error wrapping ErrNoKeys that
// lists the variables and the --keys-file option). No error contains a key
// value.
func Load(opts LoadOptions) (*Pool, error) {
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.Dir == "" {
		opts.Dir = "."
	}
	l := &loader{opts: opts}
	if err := l.readDotEnv(); err != nil {
		return nil, err
	}
	for _, v := range []struct{ name, label string }{
		{EnvAPIKey, LabelHighPrio}, {EnvBatch, LabelBatch}, {EnvLowPrio, LabelLowPrio},
	} {
		value, source, ok := l.lookup(v.name)
		if !ok {
			continue
		}
		if err := checkValue(value); err != nil {
			return nil, fmt.Errorf("keys: %s: %w", source, err)
		}
		l.cands = append(l.cands, candidate{v.label, value, source, ""})
	}
	if err := l.readList(); err != nil {
		return nil, err
	}
	if err := l.readKeysFile(); err != nil {
		return nil, err
	}
	if l.usedDotEnv {
		l.warnings = append(l.warnings, l.dotEnvPermWarning...)
	}
	if len(l.cands) == 0 {
		return nil, l.noKeysError()
	}
	return newPool(l.cands, l.warnings), nil
}

// loader is the state of one Load call.
type loader struct {
	opts              LoadOptions
	dotEnvPath        string
	dotEnv            map[string]dotVar // nil when there is no .env
	dotEnvPermWarning []string          // reported only if .env supplied a key
	usedDotEnv        bool
	cands             []candidate
	warnings          []string
}

// readDotEnv parses opts.Dir/.env, if present and not disabled.
func (l *loader) readDotEnv() error {
	if l.opts.NoDotEnv {
		return nil
	}
	l.dotEnvPath = filepath.Join(l.opts.Dir, ".env")
	data, mode, err := readFile(l.dotEnvPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	vars, err := parseDotEnv(data)
	if err != nil {
		return fmt.Errorf("keys: %s %w", l.dotEnvPath, err)
	}
	l.dotEnv = vars
	if w := permWarning(l.dotEnvPath, mode); w != "" {
		l.dotEnvPermWarning = []string{w}
	}
	return nil
}

// lookup returns the trimmed, non-blank value of an environment variable,
// from the process environment first, else from .env, and its source.
func (l *loader) lookup(name string) (value, source string, ok bool) {
	envValue, _ := l.opts.Env(name)
	envValue = strings.TrimSpace(envValue)
	fileVar, inFile := l.dotEnv[name]
	fileValue := strings.TrimSpace(fileVar.value)
	switch {
	case envValue != "":
		if inFile && fileValue != "" && fileValue != envValue {
			l.warnings = append(l.warnings, fmt.Sprintf("%s is set in the environment and in %s (line %d): using the environment's",
				name, l.dotEnvPath, fileVar.line))
		}
		return envValue, "env " + name, true
	case fileValue != "":
		l.usedDotEnv = true
		return fileValue, ".env " + name, true
	}
	return "", "", false
}

// readList adds the items of ANTHROPIC_API_KEYS.
func (l *loader) readList() error {
	list, source, ok := l.lookup(EnvAPIKeys)
	if !ok {
		return nil
	}
	n := 0
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		n++
		where := source + " item " + strconv.Itoa(n)
		label, value := "key"+strconv.Itoa(n), item
		if before, after, found := strings.Cut(item, "="); found {
			label, value = strings.TrimSpace(before), strings.TrimSpace(after)
			if !validLabel(label) {
				return fmt.Errorf("keys: %s: %w", where, errBadLabel)
			}
			if value == "" {
				l.warnings = append(l.warnings, fmt.Sprintf("%s: label %s has no key: skipped", where, label))
				continue
			}
		}
		if err := checkValue(value); err != nil {
			return fmt.Errorf("keys: %s: %w", where, err)
		}
		l.cands = append(l.cands, candidate{label, value, where, ""})
	}
	return nil
}

// readKeysFile adds the lines of opts.KeysFile.
func (l *loader) readKeysFile() error {
	path := l.opts.KeysFile
	if path == "" {
		return nil
	}
	data, mode, err := readFile(path)
	if err != nil {
		return fmt.Errorf("keys: keys file: %w", err)
	}
	if w := permWarning(path, mode); w != "" {
		l.warnings = append(l.warnings, w)
	}
	entries, err := parseKeysFile(data)
	if err != nil {
		return fmt.Errorf("keys: keys file %s %w", path, err)
	}
	for _, e := range entries {
		where := fmt.Sprintf("keys file %s line %d", path, e.line)
		if e.value == "" {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: label %s has no key: skipped", where, e.label))
			continue
		}
		l.cands = append(l.cands, candidate{e.label, e.value, where, e.workspace})
	}
	return nil
}

func (l *loader) noKeysError() error {
	where := "in the environment or in " + l.dotEnvPath
	if l.opts.NoDotEnv {
		where = "in the environment (.env reading is off)"
	}
	var file string
	if l.opts.KeysFile != "" {
		file = " (" + l.opts.KeysFile + " has none)"
	}
	return fmt.Errorf("%w: set %s, %s, %s or %s (comma list of key or label=key) %s, or pass --keys-file PATH with label=key lines%s",
		ErrNoKeys, EnvAPIKey, EnvBatch, EnvLowPrio, EnvAPIKeys, where, file)
}

var errBadLabel = errors.New("label must match [A-Za-z0-9_.-]+")

// validLabel reports whether s matches [A-Za-z0-9_.-]+.
func validLabel(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// minValueLen is the shortest accepted key value. Anthropic keys are about
// a hundred characters; the floor keeps Redact from rewriting common words.
const minValueLen = 8

// checkValue rejects values that cannot be a key. Its errors describe the
// value without quoting it.
func checkValue(v string) error {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\'':
			return fmt.Errorf("key contains a quote character at byte %d", i+1)
		case c <= ' ' || c > '~':
			return fmt.Errorf("key contains whitespace or a non-printable or non-ASCII character at byte %d", i+1)
		}
	}
	if len(v) < minValueLen {
		return fmt.Errorf("key is too short (%d characters, want at least %d)", len(v), minValueLen)
	}
	return nil
}

// readFile returns a file's content and permission bits.
func readFile(path string) (string, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if st.IsDir() {
		return "", 0, fmt.Errorf("%s is a directory", path)
	}
	data, err := io.ReadAll(f)
	return string(data), st.Mode().Perm(), err
}

// permWarning returns a warning if a file holding keys is readable by group
// or others, else "". Windows permission bits mean nothing, so it is silent
// there.
func permWarning(path string, mode fs.FileMode) string {
	if runtime.GOOS == "windows" || mode&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("%s holds API keys and is accessible by group or others (mode %04o): run chmod 600 %s", path, mode, path)
}
