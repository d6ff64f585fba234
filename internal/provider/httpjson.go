package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/onejob/onejob/internal/tracing/propagate"
)

// DefaultMaxResponseBytes bounds how much of a provider answer is read; a
// structured output larger than this is treated as malformed.
const DefaultMaxResponseBytes = 4 << 20

// JSONClient is the shared JSON-over-HTTP helper for HTTP adapters. It turns
// every failure into a *CallError with status, Retry-After, request id and
// class filled in, so adapters only map their own body formats.
type JSONClient struct {
	// Provider names the provider in errors.
	Provider string
	// HTTP is the client used; nil means http.DefaultClient. It never
	// follows a redirect, whatever its CheckRedirect says (NoRedirects). No
	// client-level timeout is expected: the caller's ctx deadline (the job
	// type's timeout) bounds the call.
	HTTP *http.Client
	// Now is the clock used to resolve HTTP-date Retry-After values.
	Now func() time.Time
	// RequestIDHeaders are checked in order for the provider's request id.
	RequestIDHeaders []string
	// MaxResponseBytes bounds the body read; 0 means DefaultMaxResponseBytes.
	// It bounds a streamed answer's bytes in all, too.
	MaxResponseBytes int64
	// MaxEventBytes bounds one event of a streamed answer (at most
	// MaxResponseBytes); 0 means a quarter of MaxResponseBytes.
	MaxEventBytes int64
}

// HTTPResponse is a 2xx answer.
type HTTPResponse struct {
	Status    int
	Header    http.Header
	Body      []byte
	RequestID string
}

// PostJSON marshals body, POSTs it to url with the given extra headers and
// returns the 2xx answer. Any other outcome is a *CallError.
func (c *JSONClient) PostJSON(ctx context.Context, url string, header http.Header, body any) (HTTPResponse, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return HTTPResponse{}, c.fail(ClassNonRetryable, 0, "", "encode request", fmt.Errorf("%w: %w", ErrInvalidRequest, err))
	}
	return c.do(ctx, http.MethodPost, url, header, payload)
}

// PostBytes POSTs payload as it is, under contentType (a multipart upload,
// say), and returns the 2xx answer. Any other outcome is a *CallError.
func (c *JSONClient) PostBytes(ctx context.Context, url string, header http.Header, contentType string, payload []byte) (HTTPResponse, error) {
	header = header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", contentType)
	return c.do(ctx, http.MethodPost, url, header, payload)
}

// GetJSON GETs url with the given extra headers and returns the 2xx answer.
// Any other outcome is a *CallError.
func (c *JSONClient) GetJSON(ctx context.Context, url string, header http.Header) (HTTPResponse, error) {
	return c.do(ctx, http.MethodGet, url, header, nil)
}

func (c *JSONClient) do(ctx context.Context, method, url string, header http.Header, payload []byte) (HTTPResponse, error) {
	resp, requestID, err := c.open(ctx, method, url, header, payload, "application/json")
	if err != nil {
		return HTTPResponse{}, err
	}
	defer resp.Body.Close()
	data, err := c.read(resp, requestID)
	if err != nil {
		return HTTPResponse{}, err
	}
	return HTTPResponse{Status: resp.StatusCode, Header: resp.Header, Body: data, RequestID: requestID}, nil
}

// open sends the request and returns a 2xx answer with its body unread
// (the caller closes it); any other outcome is a *CallError, the body of a
// refusal read and classified.
func (c *JSONClient) open(ctx context.Context, method, url string, header http.Header, payload []byte, accept string) (*http.Response, string, error) {
	ctx, sent := TrackSent(ctx)
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, "", c.fail(ClassNonRetryable, 0, "", "build request", fmt.Errorf("%w: %w", ErrInvalidRequest, err))
	}
	// Never a resend behind the caller's back: Go's transport counts a
	// POST with an Idempotency-Key header (which the adapters send) as
	// replayable and, when a kept-alive connection drops before the
	// answer, sends it again unseen, to providers that honour no such key
	// (OpenAI, Anthropic): a second execution of the attempt. Without
	// GetBody it cannot rewind the body, so it does not; the lost answer
	// is an ambiguous outcome, settled as any other.
	hreq.GetBody = nil
	if payload != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		hreq.Header.Del(k)
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	hreq.Header.Set("Accept", accept)
	// The call's span (issue 42): a provider that traces joins the job's
	// trace; nothing without one.
	propagate.Inject(ctx, hreq.Header)

	resp, err := c.client().Do(hreq)
	if err != nil {
		return nil, "", c.fail(ClassifyTransport(err, sent()), 0, "", "send request", fmt.Errorf("%w: %w", ErrTransport, err))
	}
	requestID := RequestIDFrom(resp.Header, c.RequestIDHeaders...)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, requestID, nil
	}
	defer resp.Body.Close()
	data, err := c.read(resp, requestID)
	if err != nil {
		return nil, "", err
	}
	if Redirected(resp.StatusCode) {
		return nil, "", c.fail(ClassNonRetryable, resp.StatusCode, requestID, RedirectMessage, ErrHTTPStatus)
	}
	ce := c.fail(ClassifyStatus(resp.StatusCode), resp.StatusCode, requestID, ErrorMessage(data), ErrHTTPStatus)
	ce.Detail, _ = ParseAPIError(data)
	ce.RetryAfter = ParseRetryAfter(resp.Header, c.now())
	ce.Replayed = resp.Header.Get(HeaderIdempotentReplayed) == "true"
	ce.LookupUnknown = resp.Header.Get("Idempotency-Lookup") == "unknown"
	if ce.Class == ClassExhausted {
		ce.Exhausted()
	}
	return nil, "", ce
}

// read reads a whole answer's body, bounded by MaxResponseBytes.
func (c *JSONClient) read(resp *http.Response, requestID string) ([]byte, error) {
	limit := c.maxResponse()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// The provider already answered with headers, so it processed the
		// request: losing the body leaves the outcome unknown.
		return nil, c.fail(ClassAmbiguous, resp.StatusCode, requestID, "read response body", fmt.Errorf("%w: %w", ErrTransport, err))
	}
	if int64(len(data)) > limit {
		return nil, c.fail(ClassRetryable, resp.StatusCode, requestID, fmt.Sprintf("response body exceeds %d bytes", limit), ErrMalformedResponse)
	}
	return data, nil
}

func (c *JSONClient) maxResponse() int64 {
	if c.MaxResponseBytes > 0 {
		return c.MaxResponseBytes
	}
	return DefaultMaxResponseBytes
}

// Malformed builds the error for a 2xx body that could not be used. It is
// retryable: the provider answered, so nothing is in flight, and inference
// output is side-effect free, so asking again (here or elsewhere) is safe.
func (c *JSONClient) Malformed(resp HTTPResponse, msg string, cause error) *CallError {
	err := ErrMalformedResponse
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrMalformedResponse, cause)
	}
	return c.fail(ClassRetryable, resp.Status, resp.RequestID, msg, err)
}

// NoStructuredOutput builds the error for a model that answered without the
// requested structure. Retryable for the same reason as Malformed.
func (c *JSONClient) NoStructuredOutput(resp HTTPResponse, msg string) *CallError {
	return c.fail(ClassRetryable, resp.Status, resp.RequestID, msg, ErrNoStructuredOutput)
}

// Filtered builds the error for an answer the provider's content filter
// stopped. Retryable: another provider's filter may let it through.
func (c *JSONClient) Filtered(resp HTTPResponse, msg string) *CallError {
	return c.fail(ClassRetryable, resp.Status, resp.RequestID, msg, fmt.Errorf("%w: %w", ErrNoStructuredOutput, ErrContentFiltered))
}

func (c *JSONClient) fail(class Class, status int, requestID, msg string, err error) *CallError {
	return &CallError{Provider: c.Provider, Class: class, Status: status, ProviderRequestID: requestID, Msg: msg, Err: err}
}

func (c *JSONClient) client() *http.Client { return NoRedirects(c.HTTP) }

// NoRedirects is c (http.DefaultClient when nil) refusing every redirect:
// the 3xx itself is the answer. Following one would send the request again
// with its headers — an x-api-key survives a cross-host redirect, only
// Authorization and Cookie are dropped — and its body, the prompt, to
// wherever the answer points, https→http included. The copy shares c's
// transport and its connection pool.
func NoRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	refusing := *c
	refusing.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &refusing
}

// RedirectMessage is a refused redirect's failure text.
const RedirectMessage = "provider redirected; redirects are never followed (check its base_url)"

// Redirected reports whether a status is a redirect: a provider's answer
// that onejob refuses as non-retryable (NoRedirects).
func Redirected(status int) bool { return status >= 300 && status <= 399 }

func (c *JSONClient) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// TrackSent returns a ctx that records, through httptrace, whether the whole
// request was written to the wire. sent reports it. Works for any client that
// issues its requests with the returned ctx (including the AWS SDK).
func TrackSent(ctx context.Context) (_ context.Context, sent func() bool) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	return httptrace.WithClientTrace(ctx, trace), wrote.Load
}

// ClassifyTransport classifies an error that happened without a response.
// If the request was fully written the provider may be working on it, so the
// failure (timeout, reset, cancellation) is ambiguous; before that nothing
// reached the provider and the call is retryable.
func ClassifyTransport(err error, sent bool) Class {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return ClassRetryable
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return ClassRetryable
	}
	if sent {
		return ClassAmbiguous
	}
	return ClassRetryable
}

// RequestIDFrom returns the first non-empty header among names.
func RequestIDFrom(h http.Header, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(h.Get(n)); v != "" {
			return v
		}
	}
	return ""
}

// ParseRetryAfter reads the back-off a provider asked for: the non-standard
// retry-after-ms (sent by OpenAI and Anthropic, more precise) first, then
// Retry-After as delay-seconds or an HTTP-date relative to now. Past dates and
// garbage yield 0.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// maxErrorMessage bounds how much provider text ends up in errors and logs.
const maxErrorMessage = 300

// APIError is an error body in one of the documented shapes: OpenAI's
// {"error":{"message","type","param","code"}}, Anthropic's
// {"type":"error","error":{"type","message"},"request_id"}, or a plain
// {"error":"..."} / {"message":"..."}.
type APIError struct {
	Type    string `json:"type,omitempty"`
	Code    string `json:"code,omitempty"`
	Param   string `json:"param,omitempty"`
	Message string `json:"message,omitempty"`
}

// ParseAPIError reads an error body; ok is false when it has none of the
// shapes.
func ParseAPIError(body []byte) (e APIError, ok bool) {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &shaped) != nil {
		return APIError{}, false
	}
	var nested struct {
		Type    string `json:"type"`
		Code    any    `json:"code"`
		Param   any    `json:"param"`
		Message string `json:"message"`
	}
	var flat string
	switch {
	case len(shaped.Error) > 0 && json.Unmarshal(shaped.Error, &nested) == nil && nested.Message != "":
		return APIError{Type: nested.Type, Code: scalar(nested.Code), Param: scalar(nested.Param), Message: nested.Message}, true
	case len(shaped.Error) > 0 && json.Unmarshal(shaped.Error, &flat) == nil && flat != "":
		return APIError{Message: flat}, true
	case shaped.Message != "":
		return APIError{Message: shaped.Message}, true
	}
	return APIError{}, false
}

// scalar renders a JSON code or param (a string, a number, or null).
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// String is the operator-facing text: "type: message (code c, param p)".
// The code and param are kept: they name what to fix.
func (e APIError) String() string {
	s := e.Message
	if e.Type != "" {
		s = e.Type + ": " + s
	}
	var extra []string
	if e.Code != "" && e.Code != e.Type {
		extra = append(extra, "code "+e.Code)
	}
	if e.Param != "" {
		extra = append(extra, "param "+e.Param)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// ErrorMessage extracts a human-readable message from an error body in the
// documented shapes (see APIError), falling back to a truncated excerpt of
// the body.
func ErrorMessage(body []byte) string {
	if e, ok := ParseAPIError(body); ok {
		return truncate(e.String())
	}
	return truncate(strings.TrimSpace(string(body)))
}

// Exhausted marks the error as the account's state (billing, a spent
// quota): ClassExhausted, and no back-off, since waiting does not help.
func (e *CallError) Exhausted() *CallError {
	e.Class = ClassExhausted
	e.RetryAfter = 0
	e.Err = fmt.Errorf("%w: %w", ErrAccountExhausted, e.Err)
	return e
}

// Excerpt shortens provider text for error messages.
func Excerpt(s string) string { return truncate(strings.TrimSpace(s)) }

func truncate(s string) string {
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// HTTPBase is what every HTTP adapter shares: a JSON client named after the
// provider, a logger and a clock, with their defaults filled in once here.
type HTTPBase struct {
	http JSONClient
	log  *slog.Logger
	now  func() time.Time
}

// NewHTTPBase fills the defaults: a discarding logger, time.Now, the
// adapter's request-id headers, and, when client is nil, a client with a
// transport of the adapter's own. Not http.DefaultTransport: anything in the
// process may close that pool's idle connections (httptest.Server.Close
// does), and a POST on a connection closed under it fails with "transport
// connection broken", an ambiguous call, and is never retried by net/http.
func NewHTTPBase(name string, client *http.Client, log *slog.Logger, now func() time.Time, requestIDHeaders ...string) HTTPBase {
	if client == nil {
		client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if log == nil {
		log = DiscardLogger()
	}
	if now == nil {
		now = time.Now
	}
	return HTTPBase{
		http: JSONClient{Provider: name, HTTP: client, Now: now, RequestIDHeaders: requestIDHeaders},
		log:  log,
		now:  now,
	}
}

// Client is the JSON client.
func (b *HTTPBase) Client() *JSONClient { return &b.http }

// Logger is the adapter's logger.
func (b HTTPBase) Logger() *slog.Logger { return b.log }

// Clock is the adapter's clock.
func (b HTTPBase) Clock() func() time.Time { return b.now }
