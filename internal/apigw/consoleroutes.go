package apigw

import (
	"context"
	"net/http"
	"net/url"

	"github.com/onejob/onejob/internal/apigw/console"
)

// consoleFile is one of the console's files with its strong ETag.
type consoleFile struct {
	console.File
	etag string
}

// consoleFiles loads the embedded console once, when the handler is made.
func consoleFiles() (map[string]consoleFile, error) {
	files, err := console.Files()
	if err != nil {
		return nil, err
	}
	out := make(map[string]consoleFile, len(files))
	for name, f := range files {
		out[name] = consoleFile{File: f, etag: etagOf(f.Body)}
	}
	return out, nil
}

// consolePage serves the console's page at /console. Its links are
// relative (console/console.mjs), so the page also works under a named
// stage's path prefix.
func (h *Handler) consolePage(_ context.Context, r *request) (reply, error) {
	return h.serveConsole(r, console.Page)
}

// consoleFile serves the files the page loads, at /console/{file}. The
// page itself is only at /console: under /console/ its relative links
// would not resolve.
func (h *Handler) consoleFile(_ context.Context, r *request) (reply, error) {
	name := r.params["file"]
	if name == console.Page {
		return reply{}, fail(CodeNotFound, "no such file")
	}
	return h.serveConsole(r, name)
}

// serveConsole answers a file with the console's security headers. Clients
// revalidate every time (no-cache) and get 304 for the ETag they hold, so
// a deploy shows at once and an unchanged file costs no body.
func (h *Handler) serveConsole(r *request, name string) (reply, error) {
	f, ok := h.console[name]
	if !ok {
		return reply{}, fail(CodeNotFound, "no such file")
	}
	headers := console.SecurityHeaders(originOfBase(h.streamBase))
	headers["Cache-Control"] = "no-cache"
	headers["ETag"] = f.etag
	if inm, ok := r.headers["if-none-match"]; ok && !noneMatch(inm, f.etag) {
		return reply{status: http.StatusNotModified, headers: headers}, nil
	}
	return reply{status: http.StatusOK, body: document{contentType: f.ContentType, data: f.Body}, headers: headers}, nil
}

// originOfBase is a stream base's origin (scheme and host), what the
// console's policy lets it connect to; "" for none.
func originOfBase(base string) string {
	u, err := url.Parse(base)
	if base == "" || err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}
