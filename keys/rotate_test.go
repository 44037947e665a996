package keys

import (
	"strings"
	"testing"
)

// TestReplacedNeedsAnotherWorkingKeyOfTheOrg: a removed key is replaced
// only by a key of its own organization that is neither dead, retired nor
// removed itself; a dead removed key has nothing to keep.
func TestReplacedNeedsAnotherWorkingKeyOfTheOrg(t *testing.T) {
	mk := func(label, org string) *Key {
		k := newKey(label, "test", "sk-ant-test-"+label+"-0000000000")
		if org != "" {
			k.SetOrg(org)
		}
		return k
	}
	old := mk("old", "org-a")
	old.MarkRemoved()
	if !old.Removed() || old.Retired() {
		t.Fatal("MarkRemoved must mark the key removed, not retired")
	}
	other := mk("other", "org-b")
	deadNew := mk("dead_new", "org-a")
	deadNew.MarkDead("probe: HTTP 401")
	retired := mk("retired", "org-a")
	retired.Retire()
	alsoRemoved := mk("also_removed", "org-a")
	alsoRemoved.MarkRemoved()
	unknown := mk("unknown", "")
	for _, tc := range []struct {
		name   string
		others []*Key
		want   bool
	}{
		{"alone", []*Key{old}, false},
		{"another org's key", []*Key{old, other}, false},
		{"a dead key of its org", []*Key{old, deadNew}, false},
		{"a retired key of its org", []*Key{old, retired}, false},
		{"a removed key of its org", []*Key{old, alsoRemoved}, false},
		{"a key of no known org", []*Key{old, unknown}, false},
		{"a working key of its org", []*Key{old, other, mk("good", "org-a")}, true},
	} {
		if got := old.Replaced(tc.others); got != tc.want {
			t.Errorf("%s: Replaced = %v, want %v", tc.name, got, tc.want)
		}
	}
	gone := mk("gone", "org-a")
	gone.MarkRemoved()
	gone.MarkDead("HTTP 401")
	if !gone.Replaced(nil) {
		t.Error("a dead removed key must be let go")
	}
	orgless := mk("orgless", "")
	orgless.MarkRemoved()
	if orgless.Replaced([]*Key{unknown}) {
		t.Error("a key of no known org was replaced")
	}
}

// A nil Pool holds no keys, so rotating it is how a pool is made of keys
// already loaded: every one is in it, and its Redact hides their values.
func TestRotatedFromNilPool(t *testing.T) {
	src, err := Load(LoadOptions{NoDotEnv: true, Env: EnvMap(map[string]string{EnvAPIKey: "sk-ant-api03-rotated-from-nil-0001"})})
	if err != nil {
		t.Fatal(err)
	}
	p := (*Pool)(nil).Rotated(src.Keys(), nil)
	if len(p.Keys()) != 1 || p.Keys()[0] != src.Keys()[0] {
		t.Fatalf("keys %v", p.Keys())
	}
	if got := p.Redact("x sk-ant-api03-rotated-from-nil-0001 y"); strings.Contains(got, "rotated-from-nil") {
		t.Fatalf("Redact left the value: %q", got)
	}
}
