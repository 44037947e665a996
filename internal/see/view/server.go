package view

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/internal/see/watch"
)

// EnvToken names the variable that sets the view's token (required for an
// address beyond loopback); otherwise a random one is made.
const EnvToken = "SLUICE_UI_TOKEN"

// cookieName, with the port appended (cookieFor), holds the token once
// the page was opened with it.
const cookieName = "sluice_ui_token"

// Server serves one Watch: the page, /api/status, /api/history and
// /metrics, each of which requires the token: on a shared machine the
// lanes' figures (organizations, their spend) are no other user's to read,
// as for the proxy's /metrics (docs/proxy.md).
type Server struct {
	w       *watch.Watch
	token   string
	title   string
	metrics http.Handler
	mux     *http.ServeMux
}

// ErrNeedToken is Listen's error for an address beyond loopback without
// EnvToken.
var ErrNeedToken = errors.New("view: the address is not a loopback address: set " + EnvToken + " (the page's token)")

// Listen opens the view's listener at addr; beyond loopback it requires
// EnvToken. The bound address decides (a name may resolve beyond
// loopback).
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ui: %w", err)
	}
	tcp, ok := ln.Addr().(*net.TCPAddr)
	loop := ok && tcp.IP.IsLoopback()
	if t := os.Getenv(EnvToken); t != "" && (len(t) < minTokenLen || strings.ContainsAny(t, " \t\r\n")) {
		ln.Close()
		return nil, fmt.Errorf("--ui: %s must be at least %d characters with no spaces (as the proxy's token)", EnvToken, minTokenLen)
	}
	if !loop && os.Getenv(EnvToken) == "" {
		ln.Close()
		return nil, fmt.Errorf("--ui %s (bound %s): %w", addr, ln.Addr(), ErrNeedToken)
	}
	return ln, nil
}

// minTokenLen is the shortest EnvToken accepted, the proxy's rule.
const minTokenLen = 16

// NewToken returns EnvToken's value, else a random token.
func NewToken() string {
	if t := os.Getenv(EnvToken); t != "" {
		return t
	}
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewServer serves w with token. Title heads the page.
func NewServer(w *watch.Watch, token string, title string) *Server {
	s := &Server{w: w, token: token, title: title,
		metrics: promhttp.HandlerFor(w.Registry(), promhttp.HandlerOpts{})}
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.authed(s.handlePage))
	m.HandleFunc("GET /api/status", s.authed(s.handleStatus))
	m.HandleFunc("GET /api/history", s.authed(s.handleHistory))
	m.HandleFunc("GET /metrics", s.handleMetrics)
	m.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { rw.Write([]byte("ok\n")) })
	s.mux = m
	return s
}

// URL is the page's address on ln, with the token. A listener on every
// interface (0.0.0.0, ::) is named by the machine's host name, which
// another machine can open.
func (s *Server) URL(ln net.Listener) string {
	addr := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			addr = net.JoinHostPort(h, strconv.Itoa(tcp.Port))
		}
	}
	return "http://" + addr + "/?token=" + s.token
}

// cookieFor is the name of the token's cookie for the listener r came to:
// a browser sends a cookie to every port of a host, so each view's cookie
// is named for its port and never reaches another local service.
func cookieFor(r *http.Request) string {
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		return cookieName + "_" + port
	}
	return cookieName
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.Header().Set("Referrer-Policy", "no-referrer") // the URL holds the token
	s.mux.ServeHTTP(rw, r)
}

// tokenOK reports whether r carries the token: ?token=, the cookie, or
// Authorization: Bearer.
func (s *Server) tokenOK(r *http.Request) bool {
	same := func(t string) bool { return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1 }
	if same(r.URL.Query().Get("token")) {
		return true
	}
	if c, err := r.Cookie(cookieFor(r)); err == nil && same(c.Value) {
		return true
	}
	a := r.Header.Get("Authorization")
	return strings.HasPrefix(a, "Bearer ") && same(strings.TrimPrefix(a, "Bearer "))
}

func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if !s.tokenOK(r) {
			http.Error(rw, "sluice: open the URL printed when the run started (it holds the page's token)", http.StatusUnauthorized)
			return
		}
		h(rw, r)
	}
}

func (s *Server) handlePage(rw http.ResponseWriter, r *http.Request) {
	http.SetCookie(rw, &http.Cookie{Name: cookieFor(r), Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	render(rw, s.title, []byte(`{"title":`+jsonString(s.title)+`}`))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (s *Server) handleStatus(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, s.w.Status())
}

func (s *Server) handleHistory(rw http.ResponseWriter, r *http.Request) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(rw, "since: want Unix milliseconds", http.StatusBadRequest)
			return
		}
		since = n
	}
	b, err := s.w.Timeline(since)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Write(b)
}

func (s *Server) handleMetrics(rw http.ResponseWriter, r *http.Request) {
	if !s.tokenOK(r) {
		http.Error(rw, "sluice: /metrics needs the view's token (Authorization: Bearer)", http.StatusUnauthorized)
		return
	}
	s.metrics.ServeHTTP(rw, r)
}

func writeJSON(rw http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Write(append(b, '\n'))
}
