package apigwlocal

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCORSOrigins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		patterns []string
		origin   string
		want     string // "" when refused
	}{
		{"DefaultLocalhostAnyPort", DefaultCORSOrigins(), "http://localhost:5173", "http://localhost:5173"},
		{"DefaultLoopbackIP", DefaultCORSOrigins(), "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"DefaultIPv6", DefaultCORSOrigins(), "http://[::1]:3000", "http://[::1]:3000"},
		{"DefaultNoPort", DefaultCORSOrigins(), "http://localhost", "http://localhost"},
		{"DefaultRefusesOtherHosts", DefaultCORSOrigins(), "http://example.com:8080", ""},
		{"DefaultRefusesLookalike", DefaultCORSOrigins(), "http://localhost.example.com", ""},
		{"DefaultRefusesNull", DefaultCORSOrigins(), "null", ""},
		{"ExactMatch", []string{"https://app.example.com"}, "https://app.example.com", "https://app.example.com"},
		{"ExactDefaultPort", []string{"https://app.example.com"}, "https://app.example.com:443", "https://app.example.com:443"},
		{"ExactOtherPort", []string{"https://app.example.com"}, "https://app.example.com:8443", ""},
		{"ExactOtherScheme", []string{"https://app.example.com"}, "http://app.example.com", ""},
		{"HostCaseInsensitive", []string{"https://App.Example.com"}, "https://app.example.com", "https://app.example.com"},
		{"Star", []string{"*"}, "https://anything.example", "*"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewCORS(tc.patterns)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := c.allow(tc.origin)
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("allow(%q) = %q %v, want %q", tc.origin, got, ok, tc.want)
			}
		})
	}
	for _, bad := range []string{"localhost:8080", "ftp://x", "https://*.example.com", "https://app.example.com/", "https://app.example.com/path", "https://x:99999", "https://user@x"} {
		if _, err := NewCORS([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

func TestMounts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("web/demo/index.html", "<title>demo</title>")
	write("web/demo/demo.js", "export {}")
	write("web/demo/assets/x.txt", "x")
	write("web/test/run.mjs", "// not a page")
	write("secret.txt", "secret")
	pages, err := Pages(filepath.Join(root, "web"))
	if err != nil || strings.Join(pages, ",") != "demo" {
		t.Fatalf("pages %v %v", pages, err)
	}
	l := newTestLocal(t)
	l.files, err = newFiles([]Mount{{Prefix: "/demo/", Dir: filepath.Join(root, "web", "demo")}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path string
		status             int
		body, ctype        string
	}{
		{"Index", http.MethodGet, "/demo/", 200, "<title>demo</title>", "text/html"},
		{"Script", http.MethodGet, "/demo/demo.js", 200, "export {}", "text/javascript"},
		{"WithoutSlash", http.MethodGet, "/demo", 301, "", ""},
		{"NoListing", http.MethodGet, "/demo/assets/", 404, "", ""},
		{"NoEscape", http.MethodGet, "/demo/../secret.txt", 404, "", ""},
		{"Missing", http.MethodGet, "/demo/nope.js", 404, "", ""},
		{"PostGoesToTheAPI", http.MethodPost, "/demo/", 401, "", "application/problem+json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			l.ServeHTTP(w, httptest.NewRequest(tc.method, "http://127.0.0.1:8080"+tc.path, nil))
			if w.Code != tc.status || (tc.body != "" && w.Body.String() != tc.body) || !strings.HasPrefix(w.Header().Get("Content-Type"), tc.ctype) {
				t.Fatalf("%s %s: %d %q %q", tc.method, tc.path, w.Code, w.Header().Get("Content-Type"), w.Body.String())
			}
			if strings.Contains(w.Body.String(), "secret") {
				t.Fatal("served a file outside the mount")
			}
		})
	}
	// A mount may not shadow the API: /console/ is the console's route.
	for _, bad := range []Mount{{Prefix: "/v1/", Dir: root}, {Prefix: "demo", Dir: root}, {Prefix: "/demo/"}, {Prefix: "/console/", Dir: root}} {
		if _, err := newFiles([]Mount{bad}); err == nil {
			t.Errorf("mount %+v accepted", bad)
		}
	}
}
