package keys

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	const (
		short   = "sk-ant-" + marker + "-0001"
		long    = short + "-and-more-9999" // contains short
		escaped = "tok+" + marker + "/x=abcd"
	)
	p := loadEnv(t, map[string]string{EnvAPIKeys: "s=" + short + ",l=" + long + ",e=" + escaped})
	tests := []struct {
		name, in, want string
	}{
		{"no key", "dial tcp: connection refused", "dial tcp: connection refused"},
		{"one key", "bad key " + short + ".", "bad key s(…0001)."},
		{"twice", short + short, "s(…0001)s(…0001)"},
		{"longer value that contains a shorter one", "k=" + long, "k=l(…9999)"},
		{"in a URL", `Get "https://h/v1?key=` + short + `": EOF`, `Get "https://h/v1?key=s(…0001)": EOF`},
		{"as is with URL characters", "auth " + escaped, "auth e(…abcd)"},
		{"query-escaped", "?k=" + url.QueryEscape(escaped), "?k=e(…abcd)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Redact(tt.in)
			if got != tt.want {
				t.Errorf("Redact(…) = %q want %q", got, tt.want)
			}
			assertNoSecret(t, "Redact", got)
		})
	}
	var nilPool *Pool
	if got := nilPool.Redact("x"); got != "x" {
		t.Errorf("nil Pool Redact = %q want %q", got, "x")
	}
}

func TestPoolAccessors(t *testing.T) {
	p := threeKeys(t)
	batch, ok := p.ByLabel(LabelBatch)
	if !ok || batch.Label() != LabelBatch {
		t.Fatalf("ByLabel(batch) = %v, %v", batch, ok)
	}
	if _, ok := p.ByLabel("nope"); ok {
		t.Error("ByLabel(nope) found a key")
	}
	batch.MarkDead("revoked")
	if got, want := labels(p.Live()), []string{"high_prio", "low_prio"}; !slices.Equal(got, want) {
		t.Errorf("Live() = %q want %q", got, want)
	}
	if got, want := labels(p.Keys()), []string{"high_prio", "batch", "low_prio"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %q want %q", got, want)
	}
	// Keys returns a copy.
	ks := p.Keys()
	ks[0] = nil
	if p.Keys()[0] == nil {
		t.Error("Keys() shares the pool's slice")
	}
}

func labels(ks []*Key) []string {
	var out []string
	for _, k := range ks {
		out = append(out, k.Label())
	}
	return out
}

func TestGroupByOrg(t *testing.T) {
	p := loadEnv(t, map[string]string{EnvAPIKeys: strings.Join([]string{
		"a=" + val("a"), "b=" + val("b"), "c=" + val("c"), "d=" + val("d"), "e=" + val("e"), "f=" + val("f")}, ",")})
	orgs := map[string]string{"a": "org-2", "b": "org-1", "c": "org-2", "d": "org-3", "f": "org-1"} // e unknown
	for label, org := range orgs {
		k, _ := p.ByLabel(label)
		k.SetOrg(org)
	}
	f, _ := p.ByLabel("f")
	f.MarkDead("revoked") // dead keys still count
	groups := p.GroupByOrg()
	want := map[string][]string{"org-1": {"b", "f"}, "org-2": {"a", "c"}, "org-3": {"d"}}
	if len(groups) != len(want) {
		t.Fatalf("GroupByOrg has %d orgs, want %d", len(groups), len(want))
	}
	for org, ls := range want {
		if got := labels(groups[org]); !slices.Equal(got, ls) {
			t.Errorf("GroupByOrg()[%s] = %q want %q", org, got, ls)
		}
	}
	wantWarnings := []string{
		"keys b and f belong to the same organization (org-1): they share one rate-limit budget, no additive gain",
		"keys a and c belong to the same organization (org-2): they share one rate-limit budget, no additive gain",
	}
	if got := p.SameOrgWarnings(); !slices.Equal(got, wantWarnings) {
		t.Errorf("SameOrgWarnings() = %q\nwant %q", got, wantWarnings)
	}
	e, _ := p.ByLabel("e")
	e.SetOrg("org-1")
	if got, want := p.SameOrgWarnings()[0], "keys b, e and f belong"; !strings.HasPrefix(got, want) {
		t.Errorf("SameOrgWarnings()[0] = %q, want prefix %q", got, want)
	}
}
