package view

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/see/history"
	"github.com/sluice-dev/sluice/internal/see/watch"
	"github.com/sluice-dev/sluice/judge"
)

func get(t *testing.T, h http.Handler, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Result(), string(b)
}

// The page, the API and /metrics need the token, on loopback too; the
// page's cookie carries the token to the API.
func TestTokenGuardsTheView(t *testing.T) {
	w := watch.New(watch.Config{Cmd: "run"})
	for _, loop := range []bool{true, false} {
		s := NewServer(w, "s3cret", "a run")
		for _, p := range []string{"/", "/api/status", "/api/history"} {
			if resp, _ := get(t, s, p); resp.StatusCode != 401 {
				t.Errorf("loopback %v: GET %s without the token: %d", loop, p, resp.StatusCode)
			}
			if resp, _ := get(t, s, p+"?token=wrong"); resp.StatusCode != 401 {
				t.Errorf("loopback %v: GET %s with a wrong token: %d", loop, p, resp.StatusCode)
			}
			if resp, _ := get(t, s, p, "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
				t.Errorf("loopback %v: GET %s with the token: %d", loop, p, resp.StatusCode)
			}
		}
		resp, page := get(t, s, "/?token=s3cret")
		if resp.StatusCode != 200 || !strings.Contains(page, "uPlot") || !strings.Contains(page, "<title>a run</title>") {
			t.Fatalf("the page: %d", resp.StatusCode)
		}
		var cookie string
		for _, c := range resp.Cookies() {
			if strings.HasPrefix(c.Name, cookieName) && c.HttpOnly {
				cookie = c.Name + "=" + c.Value
			}
		}
		if resp, _ := get(t, s, "/api/status", "Cookie", cookie); resp.StatusCode != 200 {
			t.Errorf("the API with the page's cookie: %d", resp.StatusCode)
		}
		if resp, _ = get(t, s, "/metrics"); resp.StatusCode != 401 {
			t.Errorf("loopback %v: /metrics without the token: %d, want 401", loop, resp.StatusCode)
		}
		if resp, _ = get(t, s, "/metrics", "Authorization", "Bearer s3cret"); resp.StatusCode != 200 {
			t.Errorf("loopback %v: /metrics with the token: %d, want 200", loop, resp.StatusCode)
		}
	}
}

// The page's cookie is named for the listener's port: a browser sends a
// host's cookies to all its ports, and the token is no other service's.
func TestCookieIsNamedForItsPort(t *testing.T) {
	s := NewServer(watch.New(watch.Config{Cmd: "run"}), "s3cret-s3cret-s3cret", "a run")
	req := httptest.NewRequest("GET", "/?token=s3cret-s3cret-s3cret", nil)
	req.Host = "127.0.0.1:41327"
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	cs := rec.Result().Cookies()
	if len(cs) != 1 || cs[0].Name != cookieName+"_41327" || !cs[0].HttpOnly {
		t.Fatalf("cookies %v, want one HttpOnly %s_41327", cs, cookieName)
	}
	api := httptest.NewRequest("GET", "/api/status", nil)
	api.Host = "127.0.0.1:41327"
	api.AddCookie(cs[0])
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, api)
	if rec.Code != 200 {
		t.Errorf("the API with the page's cookie: %d", rec.Code)
	}
}

// A token from the environment is as long as the proxy's; a listener on
// every interface is named by the host name in the URL.
func TestListenChecksTheToken(t *testing.T) {
	t.Setenv(EnvToken, "short")
	if ln, err := Listen("127.0.0.1:0"); err == nil {
		ln.Close()
		t.Error("a 5-character token was accepted")
	}
	t.Setenv(EnvToken, "0123456789abcdef")
	ln, err := Listen("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, _ := os.Hostname()
	if u := NewServer(watch.New(watch.Config{Cmd: "run"}), NewToken(), "t").URL(ln); h != "" && !strings.HasPrefix(u, "http://"+h+":") {
		t.Errorf("URL %s does not name the host %s", u, h)
	}
}

// The page inlines every asset: nothing is fetched from the network.
func TestPageNeedsNoNetwork(t *testing.T) {
	var b bytes.Buffer
	if err := Report(&b, "t", history.NewTimeline()); err != nil {
		t.Fatal(err)
	}
	// uPlot's licence header names its home; nothing else is an address.
	page := strings.Replace(b.String(), "/*! https://github.com/leeoniya/uPlot", "", 1)
	for _, bad := range []string{"<script src", "<link rel=\"stylesheet\"", "@import", "https://", "http://", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("the page refers to %q", bad)
		}
	}
	if strings.Count(page, "<script") != 3 {
		t.Errorf("%d scripts, want the data, uPlot and the page's", strings.Count(page, "<script"))
	}
}

// Data in the page cannot close its script element.
func TestReportDataIsEscaped(t *testing.T) {
	tl := history.NewTimeline()
	tl.Events = append(tl.Events, history.Event{Kind: "halt", Why: "</script><script>alert(1)</script>"})
	var b bytes.Buffer
	if err := Report(&b, "</title>x", tl); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<script>alert") || strings.Contains(b.String(), "</title>x") {
		t.Error("the report's data or title broke out of their elements")
	}
}

// The judge's report gets each numeric field's distribution per group.
func TestJudgeDistributions(t *testing.T) {
	lo, hi := 0.0, 10.0
	s := judge.Summary{Fields: []judge.Field{{Name: "score", Type: judge.Int, Min: &lo, Max: &hi}},
		Groups: []judge.GroupSummary{{Group: judge.AllGroup}, {Group: "a"}}}
	path := filepath.Join(t.TempDir(), "verdicts.jsonl")
	var b bytes.Buffer
	for _, v := range []judge.Verdict{
		{ID: "1", Class: judge.OK, Scores: map[string]any{"score": 3.0}, Groups: []string{"a"}},
		{ID: "2", Class: judge.OK, Scores: map[string]any{"score": 3.0}},
		{ID: "3", Class: judge.OK, Scores: map[string]any{"score": 10.0}, Groups: []string{"a"}},
		{ID: "4", Class: judge.ParseError},
	} {
		line, _ := json.Marshal(v)
		b.Write(append(line, '\n'))
	}
	os.WriteFile(path, b.Bytes(), 0o644)
	jd := Judge(s, path)
	if len(jd.Distributions) != 1 {
		t.Fatalf("%d distributions", len(jd.Distributions))
	}
	d := jd.Distributions[0]
	if len(d.Bins) != 11 || len(d.Groups) != 2 {
		t.Fatalf("%d bins, %d groups; want 11 (0..10), 2", len(d.Bins), len(d.Groups))
	}
	all, a := d.Groups[0], d.Groups[1]
	if all.N != 3 || all.Counts[3] != 2 || all.Counts[10] != 1 || a.N != 2 || a.Counts[3] != 1 || a.Mean != 6.5 {
		t.Errorf("all %+v, a %+v", all, a)
	}
}
