package apigw_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/apigw/console"
)

// TestConsoleIsPublic: the console's page and files are served without a
// token (a bad one is ignored, as API Gateway ignores it on a route without
// an authorizer), with the security headers, through the local server and
// to a bare event alike; every other route still needs a token.
func TestConsoleIsPublic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	files, err := console.Files()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, token, contentType string
	}{
		{"Page", "/console", "", "text/html; charset=utf-8"},
		{"PageWithBadToken", "/console", "not.a.jwt", "text/html; charset=utf-8"},
		{"PageWithAdminToken", "/console", e.token(t, "operator", apigw.AdminScope), "text/html; charset=utf-8"},
		{"Script", "/console/console.mjs", "", "text/javascript; charset=utf-8"},
		{"Stylesheet", "/console/console.css", "", "text/css; charset=utf-8"},
		{"Icon", "/console/icon.svg", "", "image/svg+xml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, call{method: http.MethodGet, path: tc.path, token: tc.token})
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != tc.contentType {
				t.Errorf("Content-Type %q, want %q", ct, tc.contentType)
			}
			checkConsoleHeaders(t, r.header)
			// Revalidated with its ETag: unchanged, it costs no body.
			again := e.do(t, call{method: http.MethodGet, path: tc.path, headers: map[string]string{"If-None-Match": r.header.Get("ETag")}})
			if again.status != http.StatusNotModified || len(again.body) != 0 || again.header.Get("ETag") != r.header.Get("ETag") {
				t.Errorf("revalidation: %d %v %q", again.status, again.header, again.body)
			}
		})
	}

	// Where streams are served (their own origin), the console may read
	// them, and nowhere else.
	t.Run("StreamsOrigin", func(t *testing.T) {
		t.Parallel()
		s := newEnv(t, withStreams)
		r := s.do(t, call{method: http.MethodGet, path: "/console"})
		got := regexp.MustCompile(`connect-src ([^;]*);`).FindStringSubmatch(r.header.Get("Content-Security-Policy"))
		submit := s.do(t, call{method: http.MethodPost, path: "/v1/jobs", token: s.token(t, "csp"),
			headers: map[string]string{"Idempotency-Key": "csp-1", "Content-Type": "application/json"}, body: []byte(`{"type":"demo","input":{"prompt":"x"}}`)})
		var j struct {
			StreamURL string `json:"stream_url"`
		}
		if err := json.Unmarshal(submit.body, &j); err != nil || j.StreamURL == "" {
			t.Fatalf("create: %d %s", submit.status, submit.body)
		}
		u, err := url.Parse(j.StreamURL)
		if err != nil || got == nil || got[1] != "'self' "+u.Scheme+"://"+u.Host {
			t.Fatalf("connect-src %q, stream_url %s", got, j.StreamURL)
		}
	})

	t.Run("PageLoadsOnlyItsOwnFiles", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, call{method: http.MethodGet, path: "/console"})
		page := string(r.body)
		// No inline script or style: the policy would refuse them.
		for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
			if !strings.Contains(m, ` src="console/`) || !strings.Contains(m, `type="module"`) {
				t.Errorf("inline or foreign script %s", m)
			}
		}
		if regexp.MustCompile(`(?i)<style|\sstyle=|\son[a-z]+=|javascript:`).MatchString(page) {
			t.Error("the page has inline style or script")
		}
		refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
		if len(refs) < 3 {
			t.Fatalf("the page loads %d files", len(refs))
		}
		for _, m := range refs {
			name, ok := strings.CutPrefix(m[1], "console/")
			if _, exists := files[name]; !ok || !exists {
				t.Errorf("the page loads %q, not one of the console's files", m[1])
				continue
			}
			if f := e.do(t, call{method: http.MethodGet, path: "/" + m[1]}); f.status != http.StatusOK {
				t.Errorf("%s: %d", m[1], f.status)
			}
		}
	})

	// The page loads one module; it imports the views' modules, and they
	// what they share: each must be one of the console's files, served.
	t.Run("ModulesImportOnlyConsoleFiles", func(t *testing.T) {
		t.Parallel()
		imports := regexp.MustCompile(`(?m)^(?:import|export)\s[^;]*?\sfrom\s+"([^"]+)";`)
		modules := 0
		for name, f := range files {
			if !strings.HasSuffix(name, ".mjs") {
				continue
			}
			modules++
			for _, m := range imports.FindAllStringSubmatch(string(f.Body), -1) {
				dep, ok := strings.CutPrefix(m[1], "./")
				if _, exists := files[dep]; !ok || !exists {
					t.Errorf("%s imports %q, not one of the console's files", name, m[1])
					continue
				}
				if r := e.do(t, call{method: http.MethodGet, path: "/console/" + dep}); r.status != http.StatusOK {
					t.Errorf("%s imports %s: %d", name, dep, r.status)
				}
			}
		}
		if modules < 2 {
			t.Fatalf("%d modules", modules)
		}
	})

	t.Run("UnknownFiles", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{"/console/nope.mjs", "/console/index.html", "/console/..%2fopenapi.yaml"} {
			r := e.do(t, call{method: http.MethodGet, path: p})
			wantProblem(t, r, http.StatusNotFound, apigw.CodeNotFound)
		}
	})

	t.Run("APIRoutesStillNeedAToken", func(t *testing.T) {
		t.Parallel()
		params := strings.NewReplacer("{id}", "job_n8hhcm0n0vmtvc05hjaswa1h44", "{n}", "1")
		n := 0
		for _, rt := range apigw.Routes() {
			if rt.Public {
				continue
			}
			n++
			path := params.Replace(rt.Path)
			r := e.do(t, call{method: rt.Method, path: path, headers: map[string]string{"Content-Type": "application/json"}, body: []byte("{}")})
			wantProblem(t, r, http.StatusUnauthorized, apigw.CodeUnauthenticated)
			// A bare event without claims (a route without an authorizer
			// that should have had one) is refused by the handler too.
			resp := e.handle(t, event(rt.Method, path, "", "", nil, "{}"))
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s without claims: %d %s", rt.Key(), resp.StatusCode, resp.Body)
			}
		}
		if n == 0 {
			t.Fatal("no token-protected routes")
		}
	})

	t.Run("BareEvent", func(t *testing.T) {
		t.Parallel()
		resp := e.handle(t, event(http.MethodGet, "/console", "", "", nil, ""))
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, "<!doctype html>") {
			t.Fatalf("%d %s", resp.StatusCode, resp.Body)
		}
		h := http.Header{}
		for k, v := range resp.Headers {
			h.Set(k, v)
		}
		checkConsoleHeaders(t, h)
	})
}

func checkConsoleHeaders(t *testing.T, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	directives := map[string]string{}
	for _, d := range strings.Split(csp, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	for name, want := range map[string]string{
		"default-src": "'self'", "script-src": "'self'", "style-src": "'self'", "connect-src": "'self'",
		"frame-ancestors": "'none'", "object-src": "'none'", "base-uri": "'none'",
	} {
		if directives[name] != want {
			t.Errorf("CSP %s is %q, want %q (policy %q)", name, directives[name], want, csp)
		}
	}
	if strings.Contains(csp, "unsafe-") || strings.Contains(csp, "*") {
		t.Errorf("CSP allows too much: %q", csp)
	}
	for name, want := range map[string]string{
		"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s %q, want %q", name, got, want)
		}
	}
	if !regexp.MustCompile(`^"[A-Za-z0-9_-]{20}"$`).MatchString(h.Get("ETag")) {
		t.Errorf("ETag %q", h.Get("ETag"))
	}
}
