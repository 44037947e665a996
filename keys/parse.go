package keys

import (
	"fmt"
	"strings"
)

// Both parsers here read text that holds secrets. Their errors name a line
// number and what is wrong, and never quote the text.

// lineError is a parse error at a 1-based line. Its text is
// "line N: reason"; callers prefix the file name.
type lineError struct {
	line   int
	reason string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.reason) }

// dotVar is one assignment of a .env file and the line it starts on.
type dotVar struct {
	value string
	line  int
}

// parseDotEnv parses the content of a .env file:
//
//   - blank lines and lines starting with # are skipped;
//   - an assignment is NAME=VALUE, optionally prefixed by "export ", with
//     NAME matching [A-Za-z_][A-Za-z0-9_]* and spaces allowed around =;
//   - an unquoted VALUE is trimmed and ends at a # that follows a space or
//     tab (an inline comment);
//   - a 'single-quoted' VALUE is literal; a "double-quoted" VALUE
//     understands \n \r \t \" and \\ (other backslashes stay as they are);
//     either may span lines, and only spaces or a comment may follow the
//     closing quote;
//   - a later assignment of a name replaces an earlier one.
func parseDotEnv(data string) (map[string]dotVar, error) {
	vars := make(map[string]dotVar)
	lines := strings.Split(strings.TrimPrefix(data, "\ufeff"), "\n")
	for i := 0; i < len(lines); i++ {
		n := i + 1
		line := strings.TrimSpace(lines[i])
		if line == "" || line[0] == '#' {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimLeft(rest, " \t")
		}
		name, raw, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &lineError{n, "expected NAME=VALUE"}
		}
		name = strings.TrimSpace(name)
		if !validEnvName(name) {
			return nil, &lineError{n, "variable name must match [A-Za-z_][A-Za-z0-9_]*"}
		}
		val := strings.TrimLeft(raw, " \t")
		if val == "" || (val[0] != '"' && val[0] != '\'') {
			vars[name] = dotVar{strings.TrimSpace(cutComment(raw)), n}
			continue
		}
		quote := val[0]
		body := val[1:]
		for {
			end := closingQuote(body, quote)
			if end >= 0 {
				rest := strings.TrimSpace(body[end+1:])
				if rest != "" && rest[0] != '#' {
					return nil, &lineError{n, "unexpected text after the closing quote"}
				}
				body = body[:end]
				break
			}
			i++
			if i == len(lines) {
				return nil, &lineError{n, "quoted value is not closed"}
			}
			body += "\n" + strings.TrimSuffix(lines[i], "\r")
		}
		if quote == '"' {
			body = unescapeDouble(body)
		}
		vars[name] = dotVar{body, n}
	}
	return vars, nil
}

// closingQuote returns the index of the quote that closes s, or -1. In a
// double-quoted value a backslash escapes the next byte.
func closingQuote(s string, quote byte) int {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quote == '"':
			i++
		case s[i] == quote:
			return i
		}
	}
	return -1
}

func unescapeDouble(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '"', '\\':
			b.WriteByte(s[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// cutComment returns s up to an inline comment: a # after a space or tab.
func cutComment(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

// validEnvName reports whether s matches [A-Za-z_][A-Za-z0-9_]*.
func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// fileEntry is one label=key line of a keys file.
type fileEntry struct {
	label, value string
	workspace    string
	line         int
}

// parseKeysFile parses a keys file: one label=key per line, label matching
// [A-Za-z0-9_.-]+, spaces allowed around =, the key optionally in matching
// single or double quotes, then optional attributes separated by spaces:
// workspace=ID, the anthropic-workspace-id the key sends (ID matching
// wrkspc_[A-Za-z0-9_-]+); blank lines, lines starting with # and inline
// comments (a # after a space or tab) are skipped. An entry with an empty
// key is returned with value "" for the caller to skip. A malformed line, a
// bad label, a bad key or attribute is an error naming the line.
func parseKeysFile(data string) ([]fileEntry, error) {
	var out []fileEntry
	for i, line := range strings.Split(strings.TrimPrefix(data, "\ufeff"), "\n") {
		n := i + 1
		line = strings.TrimSpace(cutComment(strings.TrimSpace(line)))
		if line == "" || line[0] == '#' {
			continue
		}
		label, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &lineError{n, "expected label=key"}
		}
		label, value = strings.TrimSpace(label), strings.TrimSpace(value)
		if !validLabel(label) {
			return nil, &lineError{n, errBadLabel.Error()}
		}
		whole := value
		value, attrs := splitAttrs(value)
		for _, a := range attrs {
			if !strings.HasPrefix(a, "workspace=") {
				// Not an attribute: a key with a space in it, as before
				// attributes were allowed.
				reason := "after the key only workspace=ID may follow"
				if err := checkValue(whole); err != nil {
					reason = err.Error() + " (" + reason + ")"
				}
				return nil, &lineError{n, reason}
			}
		}
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = strings.TrimSpace(value[1 : len(value)-1])
		}
		if value != "" {
			if err := checkValue(value); err != nil {
				return nil, &lineError{n, err.Error()}
			}
		}
		e := fileEntry{label: label, value: value, line: n}
		for i, a := range attrs {
			if i > 0 {
				return nil, &lineError{n, "workspace= is given twice (a key sends one workspace: one line per workspace)"}
			}
			v := strings.TrimPrefix(a, "workspace=")
			if !validWorkspace(v) {
				return nil, &lineError{n, "workspace must match wrkspc_[A-Za-z0-9_-]+"}
			}
			e.workspace = v
		}
		out = append(out, e)
	}
	return out, nil
}

// splitAttrs splits the value part of a keys-file line into the key (as
// written, quotes included) and the attributes after it: the key ends at
// its closing quote, or at the first space or tab.
func splitAttrs(v string) (key string, attrs []string) {
	end := strings.IndexAny(v, " \t")
	if len(v) > 0 && (v[0] == '"' || v[0] == '\'') {
		if i := strings.IndexByte(v[1:], v[0]); i >= 0 {
			end = i + 2
			if end == len(v) {
				end = -1
			}
		}
	}
	if end < 0 {
		return v, nil
	}
	return v[:end], strings.Fields(v[end:])
}

// validWorkspace reports whether s matches wrkspc_[A-Za-z0-9_-]+.
func validWorkspace(s string) bool {
	rest, ok := strings.CutPrefix(s, "wrkspc_")
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
