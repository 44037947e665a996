package keys

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestParseDotEnv(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     map[string]string
		wantLine int // >0: a parse error at this line
	}{
		{"plain", "A=1\nB=two words  \n", map[string]string{"A": "1", "B": "two words"}, 0},
		{"empty file", "", map[string]string{}, 0},
		{"export prefix", "export A=1\nexport\tB=2\nexport=3", map[string]string{"A": "1", "B": "2", "export": "3"}, 0},
		{"spaces around =", "  A = 1  ", map[string]string{"A": "1"}, 0},
		{"comments and blank lines", "# c\n\n  # indented\nA=1 # note\nB=x#y\nC= #only a comment\nD=", map[string]string{"A": "1", "B": "x#y", "C": "", "D": ""}, 0},
		{"single quotes are literal", `A='a # b \n "c"'`, map[string]string{"A": `a # b \n "c"`}, 0},
		{"double quotes unescape", `A="a\"b\\c\nd\te\$"`, map[string]string{"A": "a\"b\\c\nd\te\\$"}, 0},
		{"quoted value keeps spaces and #", `A="  x # y  " # comment`, map[string]string{"A": "  x # y  "}, 0},
		{"empty quotes", `A=""` + "\nB=''", map[string]string{"A": "", "B": ""}, 0},
		{"multi-line double quotes", "A=\"line1\nline2\"\nB=3", map[string]string{"A": "line1\nline2", "B": "3"}, 0},
		{"multi-line single quotes", "A='x\r\ny'\r\nB=3", map[string]string{"A": "x\ny", "B": "3"}, 0},
		{"CRLF", "A=1\r\nB=2\r\n", map[string]string{"A": "1", "B": "2"}, 0},
		{"byte order mark", "\ufeffA=1", map[string]string{"A": "1"}, 0},
		{"later assignment wins", "A=1\nA=2", map[string]string{"A": "2"}, 0},
		{"no =", "A=1\njunk", nil, 2},
		{"bad name", "A=1\n\n1A=x", nil, 3},
		{"name with dash", "MY-KEY=x", nil, 1},
		{"empty name", "=x", nil, 1},
		{"unterminated quote", "A=1\nB=\"abc\nC=2", nil, 2},
		{"unterminated single quote", "B='abc", nil, 1},
		{"text after closing quote", `A="x"y`, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars, err := parseDotEnv(tt.in)
			if tt.wantLine > 0 {
				var le *lineError
				if !errors.As(err, &le) || le.line != tt.wantLine {
					t.Fatalf("parseDotEnv error = %v, want a lineError at line %d", err, tt.wantLine)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseDotEnv: %v", err)
			}
			got := make(map[string]string, len(vars))
			for name, v := range vars {
				got[name] = v.value
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("parseDotEnv = %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestParseDotEnvLineNumbers(t *testing.T) {
	vars, err := parseDotEnv("# x\nA=\"1\n2\"\n\nB=3")
	if err != nil {
		t.Fatal(err)
	}
	if vars["A"].line != 2 || vars["B"].line != 5 {
		t.Errorf("lines A=%d B=%d, want 2 and 5", vars["A"].line, vars["B"].line)
	}
}

func TestParseKeysFile(t *testing.T) {
	const v = "sk-ant-api03-value-0001"
	tests := []struct {
		name     string
		in       string
		want     []fileEntry
		wantLine int
		wantWhy  string
	}{
		{"lines, comments, blanks", "# keys\n\nprod=" + v + "\n  dev.1 = '" + v + "x' # spare\nci-2=\"" + v + "y\"\n",
			[]fileEntry{{label: "prod", value: v, line: 3}, {label: "dev.1", value: v + "x", line: 4}, {label: "ci-2", value: v + "y", line: 5}}, 0, ""},
		{"empty key is returned for the caller to skip", "a=\nb=''", []fileEntry{{label: "a", line: 1}, {label: "b", line: 2}}, 0, ""},
		{"a workspace after the key", "a=" + v + " workspace=wrkspc_01AbC-d_9\nb='" + v + "x'  workspace=wrkspc_2 # a comment",
			[]fileEntry{{label: "a", value: v, workspace: "wrkspc_01AbC-d_9", line: 1}, {label: "b", value: v + "x", workspace: "wrkspc_2", line: 2}}, 0, ""},
		{"a bad workspace", "a=" + v + " workspace=ws_1", nil, 1, "workspace must match"},
		{"an unknown attribute", "a=" + v + " region=us", nil, 1, "whitespace"},
		{"no =", "a=" + v + "\n" + v, nil, 2, "expected label=key"},
		{"bad label", "my key=" + v, nil, 1, "label must match"},
		{"empty label", "=" + v, nil, 1, "label must match"},
		{"space inside key", "a=sk-ant value-0001", nil, 1, "whitespace"},
		{"unbalanced quote", "a=\"" + v, nil, 1, "quote"},
		{"short key", "a=abc", nil, 1, "too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKeysFile(tt.in)
			if tt.wantLine > 0 {
				var le *lineError
				if !errors.As(err, &le) || le.line != tt.wantLine || !strings.Contains(le.reason, tt.wantWhy) {
					t.Fatalf("parseKeysFile error = %v, want line %d: …%s…", err, tt.wantLine, tt.wantWhy)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseKeysFile: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("parseKeysFile = %+v want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("entry %d = %+v want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
