// Package console is the operator console: one page (index.html), its ES
// modules (console.mjs, the entry, and the modules of its views it
// imports), one stylesheet (console.css) and an icon, embedded in the api
// function and served by it at /console, so it is deployed with the API it
// talks to and needs no build step, framework or CDN.
//
// The page holds no data: everything it shows it reads from the public API
// with the operator's token (pasted into it, or carried in the URL's
// fragment, which no server sees), so its routes need no token. It is
// same-origin with the API, so it needs no CORS either; a job's stream,
// served at its own origin, answers it with CORS as it answers any page.
package console

import (
	"embed"
	"fmt"
	"path"
)

//go:embed index.html *.mjs console.css icon.svg
var embedded embed.FS

// Page names the page itself among Files; the other names are what the
// page loads from /console/<name>.
const Page = "index.html"

// File is one file of the console, ready to serve.
type File struct {
	Name        string
	ContentType string
	Body        []byte
}

// contentType is a file's media type, by extension: the console's own
// table, so nothing depends on the machine's MIME tables.
func contentType(name string) (string, bool) {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".mjs":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".svg":
		return "image/svg+xml", true
	}
	return "", false
}

// Files reads the embedded files by name.
func Files() (map[string]File, error) {
	entries, err := embedded.ReadDir(".")
	if err != nil {
		return nil, err
	}
	out := make(map[string]File, len(entries))
	for _, e := range entries {
		ct, ok := contentType(e.Name())
		if !ok {
			return nil, fmt.Errorf("console: %s has no content type", e.Name())
		}
		b, err := embedded.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = File{Name: e.Name(), ContentType: ct, Body: b}
	}
	if _, ok := out[Page]; !ok {
		return nil, fmt.Errorf("console: %s is missing", Page)
	}
	return out, nil
}

// SecurityHeaders are sent with every file of the console. The policy
// allows only the console's own files and calls to its own origin (the
// API) and to streams, the origin where jobs' streams are served (the
// stream function's URL, its own origin; "" when there is none): no
// inline script or style (the page has none), no plugins, no framing, no
// form posts elsewhere, no <base> rewriting; the token in the fragment is
// never sent as a referrer.
func SecurityHeaders(streams string) map[string]string {
	connect := "'self'"
	if streams != "" {
		connect += " " + streams
	}
	return map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
			"connect-src " + connect + "; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		"X-Content-Type-Options":       "nosniff",
		"X-Frame-Options":              "DENY",
		"Referrer-Policy":              "no-referrer",
		"Cross-Origin-Opener-Policy":   "same-origin",
		"Cross-Origin-Resource-Policy": "same-origin",
	}
}
