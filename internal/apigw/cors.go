package apigw

import (
	"slices"
	"time"
)

// What browsers are told about cross-origin calls: API Gateway answers with
// these in AWS (infra/stack's CORS preflight configuration) and the local
// server with the same, so a page that works against `make run` works
// against a deployed environment. Only the allowed origins differ, per
// environment.

// CORSAllowHeaders are the request headers a page may send. Last-Event-ID
// is how a fetch-based stream client resumes a job's stream (at the
// stream function's URL, which takes these too).
func CORSAllowHeaders() []string {
	return []string{"Authorization", "Content-Type", "Idempotency-Key", "If-None-Match", "Last-Event-ID", "Prefer"}
}

// CORSExposeHeaders are the response headers a page's script may read
// beyond the safelisted ones: without them a browser client could not see
// where a job was created, that a create was a replay, or how to wait.
func CORSExposeHeaders() []string {
	return []string{"Location", "Idempotent-Replayed", "ETag", "Retry-After", "Preference-Applied"}
}

// CORSAllowMethods are the methods the routes use.
func CORSAllowMethods() []string {
	var out []string
	for _, r := range routes() {
		if !slices.Contains(out, r.Method) {
			out = append(out, r.Method)
		}
	}
	slices.Sort(out)
	return out
}

// CORSMaxAge is how long a browser may reuse a preflight's answer (Chromium
// caps it at two hours).
const CORSMaxAge = time.Hour
