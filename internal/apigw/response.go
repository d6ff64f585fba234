package apigw

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// document is a body sent as it is, with its own media type (the console's
// files), rather than encoded as JSON.
type document struct {
	contentType string
	data        []byte
}

// noSniff is on every answer: browsers take the declared Content-Type as
// it is, never guessing HTML or script from a body that echoes input.
const noSniff = "nosniff"

func encode(rep reply) (events.APIGatewayV2HTTPResponse, error) {
	if rep.status == http.StatusNotModified || rep.status == http.StatusNoContent {
		// No body, so no Content-Type (RFC 9110 §15.4.5).
		headers := map[string]string{"Cache-Control": "no-store", "X-Content-Type-Options": noSniff}
		for k, v := range rep.headers {
			headers[k] = v
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: rep.status, Headers: headers}, nil
	}
	if d, ok := rep.body.(document); ok {
		headers := map[string]string{"Content-Type": d.contentType, "X-Content-Type-Options": noSniff}
		for k, v := range rep.headers {
			headers[k] = v
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: rep.status, Headers: headers, Body: string(d.data)}, nil
	}
	b, err := marshal(rep.body)
	if err != nil {
		// A stored value that is not JSON: a fault, not the client's.
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("encode response: %w", err)
	}
	headers := map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "X-Content-Type-Options": noSniff}
	for k, v := range rep.headers {
		headers[k] = v
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: rep.status, Headers: headers, Body: string(b)}, nil
}

// Problem is the problem response for err, as the handler answers it: the
// local server uses it for refusals it makes before the handler runs.
func (h *Handler) Problem(requestID, rawPath string, err error) events.APIGatewayV2HTTPResponse {
	return h.problemResponse(&request{ev: &events.APIGatewayV2HTTPRequest{RawPath: rawPath}, requestID: requestID}, err)
}

// MaxFieldErrors bounds a problem's errors (openapi.yaml's Problem.errors):
// a body can be wrong in as many places as it has members.
const MaxFieldErrors = 100

func (h *Handler) problemResponse(r *request, err error) events.APIGatewayV2HTTPResponse {
	path := ""
	if r.ev != nil {
		path = r.ev.RawPath
	}
	return problemAnswer(r.requestID, path, err)
}

// problemAnswer is the problem response for err, answering the request
// requestID for rawPath: the one way every handler answers a problem.
func problemAnswer(requestID, rawPath string, err error) events.APIGatewayV2HTTPResponse {
	p := problemOf(err)
	p.RequestID = requestID
	if len(p.Errors) > MaxFieldErrors {
		// openapi.yaml promises a bound; the first errors say what to fix.
		p.Errors = p.Errors[:MaxFieldErrors]
	}
	p.Instance = instance(rawPath)
	headers := map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store", "X-Content-Type-Options": noSniff}
	switch p.Status {
	case http.StatusUnauthorized:
		headers["WWW-Authenticate"] = `Bearer`
		if p.Type == CodeProviderEventUnverified.Type() {
			// The route is authenticated by its provider's signature
			// (openapi.yaml's webhookSignature scheme), not a token.
			headers["WWW-Authenticate"] = WebhookSignatureChallenge
		}
	case http.StatusMethodNotAllowed:
		headers["Allow"] = p.allow
	case http.StatusServiceUnavailable:
		headers["Retry-After"] = "1"
	case http.StatusTooManyRequests:
		headers["Retry-After"] = strconv.Itoa(p.retryAfter)
		// draft-ietf-httpapi-ratelimit-headers: none of the quota left
		// until a slot frees, in about retryAfter seconds.
		headers["RateLimit"] = fmt.Sprintf("%q;r=%d;t=%d", p.Limit, p.remaining, p.retryAfter)
	}
	b, merr := marshal(p)
	if merr != nil {
		b = []byte(`{"type":"` + CodeInternal.Type() + `","title":"Internal error","status":500,"detail":"an internal error occurred","request_id":"unknown"}`)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: p.Status, Headers: headers, Body: string(b)}
}

// instance is the request's path when it is printable, as the problem's
// occurrence; anything odd is left out rather than echoed.
func instance(p string) string {
	if p == "" || len(p) > 512 || !strings.HasPrefix(p, "/") {
		return ""
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x21 || p[i] > 0x7e {
			return ""
		}
	}
	return p
}

func marshal(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

func (h *Handler) logRequest(ctx context.Context, r *request, status int, jobID string, err error, start time.Time) {
	attrs := []any{
		"request_id", r.requestID,
		"method", r.ev.RequestContext.HTTP.Method,
		"route", r.ev.RouteKey,
		"status", status,
		"duration_ms", h.now().Sub(start).Milliseconds(),
	}
	if jobID != "" {
		attrs = append(attrs, "job_id", jobID)
	}
	if status >= 500 && err != nil {
		attrs = append(attrs, "error", err.Error())
		h.log.ErrorContext(ctx, "request_failed", attrs...)
		return
	}
	h.log.InfoContext(ctx, "request", attrs...)
}

func lowerKeys(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[strings.ToLower(k)] = v
	}
	return out
}

// NewRequestID makes an ID for events that carry none (API Gateway always
// sends one); it looks like API Gateway's.
func NewRequestID() string {
	b := make([]byte, 11)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}
