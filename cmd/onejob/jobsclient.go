package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/apigw"
)

// The CLI's own client of the HTTP API: a user tool talks to a deployed API
// with a token it is given, so it neither mints tokens nor links anything
// local (internal/dev/apiclient is the tests' client, and mints its own).

// requestTimeout bounds one plain request; a held GET gets its wait on top.
const requestTimeout = 30 * time.Second

// apiClient sends requests to one API base URL with one bearer token.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// newAPIClient checks the base URL and the token before anything is sent.
func newAPIClient(base, token string) (*apiClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--api %q is not an http(s) URL", base)
	}
	if token == "" {
		return nil, errors.New("no token: pass --token or set ONEJOB_TOKEN (locally, `make run` prints one; `onejob token --sub user-1 --secret S` mints more)")
	}
	return &apiClient{base: strings.TrimSuffix(base, "/"), token: token, http: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}, nil
}

// apiResponse is one HTTP answer the API gave (2xx or 304).
type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// apiCall is one request: path (with its query) relative to the base URL.
type apiCall struct {
	method string
	path   string
	header http.Header
	body   []byte
	// hold is how long the server may hold the request (Prefer: wait).
	hold time.Duration
}

// do sends the call. A 2xx or 304 answer is returned; any other is a
// *problemError, and no answer at all a *networkError.
func (c *apiClient) do(ctx context.Context, call apiCall) (apiResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout+call.hold)
	defer cancel()
	var body io.Reader
	if call.body != nil {
		body = bytes.NewReader(call.body)
	}
	req, err := http.NewRequestWithContext(ctx, call.method, c.base+call.path, body)
	if err != nil {
		return apiResponse{}, err
	}
	for k, vs := range call.header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if call.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return apiResponse{}, &networkError{method: call.method, url: c.base + call.path, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResponse{}, &networkError{method: call.method, url: c.base + call.path, err: err}
	}
	if (resp.StatusCode >= 200 && resp.StatusCode < 300) || resp.StatusCode == http.StatusNotModified {
		return apiResponse{status: resp.StatusCode, header: resp.Header, body: b}, nil
	}
	return apiResponse{}, newProblemError(resp.StatusCode, b)
}

// networkError is a request that got no HTTP answer.
type networkError struct {
	method, url string
	err         error
}

func (e *networkError) Error() string {
	// url.Error repeats the method and URL; say them once.
	inner := e.err
	var ue *url.Error
	if errors.As(inner, &ue) {
		inner = ue.Err
	}
	return fmt.Sprintf("error: no answer from %s %s: %s", e.method, e.url, oneLine(inner.Error()))
}

func (e *networkError) Unwrap() error { return e.err }

// problem is an RFC 9457 problem document with onejob's extension members,
// or API Gateway's own {"message": …} (its 401 and throttling answers).
type problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail"`
	RequestID    string `json:"request_id"`
	JobID        string `json:"job_id"`
	AttemptState string `json:"attempt_state"`
	Errors       []struct {
		Pointer   *string `json:"pointer"`
		Parameter string  `json:"parameter"`
		Detail    string  `json:"detail"`
	} `json:"errors"`
	Message string `json:"message"`
}

// problemError is an answer other than 2xx or 304.
type problemError struct {
	status int
	body   []byte
	p      problem
}

func newProblemError(status int, body []byte) *problemError {
	e := &problemError{status: status, body: body}
	// Anything else is shown as text. A problem's members are read as one
	// line each (oneLine: whitespace folded, the rest escaped).
	_ = json.Unmarshal(body, &e.p)
	cleanStrings(reflect.ValueOf(&e.p), oneLine)
	return e
}

// Error is the one line a person reads: the status, the problem's short
// type, its detail, each field error, and the job or attempt it is about,
// e.g. "error 409 idempotency-key-reused: … (job job_x)".
func (e *problemError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "error %d", e.status)
	p := e.p
	switch {
	case p.Type != "":
		fmt.Fprintf(&b, " %s", strings.TrimPrefix(p.Type, apigw.ProblemBase))
	case p.Message == "" && p.Detail == "":
		fmt.Fprintf(&b, " %s", http.StatusText(e.status))
	}
	detail := p.Detail
	if detail == "" {
		detail = p.Title
	}
	if detail == "" {
		detail = p.Message
	}
	if detail == "" && p.Type == "" {
		detail = strings.TrimSpace(string(e.body))
		if len(detail) > 200 {
			detail = detail[:200] + "…"
		}
	}
	if detail != "" {
		b.WriteString(": " + detail)
	}
	for i, fe := range p.Errors {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		where := fe.Parameter
		if fe.Pointer != nil {
			where = *fe.Pointer
			if where == "" {
				where = "body"
			}
		}
		b.WriteString(sep + strings.TrimSpace(where+" "+fe.Detail))
	}
	if p.JobID != "" {
		fmt.Fprintf(&b, " (job %s)", p.JobID)
	}
	if p.AttemptState != "" {
		fmt.Fprintf(&b, " (attempt is %s)", p.AttemptState)
	}
	if e.status >= 500 && p.RequestID != "" {
		fmt.Fprintf(&b, " (request_id %s)", p.RequestID)
	}
	return oneLine(b.String())
}

// transient says whether sending the same request again may succeed: no
// answer, a 5xx or a 429.
func transient(err error) bool {
	var ne *networkError
	var pe *problemError
	switch {
	case errors.As(err, &ne):
		return !errors.Is(err, context.Canceled)
	case errors.As(err, &pe):
		return pe.status >= 500 || pe.status == http.StatusTooManyRequests
	}
	return false
}

// oneLine folds whitespace runs, newlines included, into single spaces, and
// escapes what must not reach a terminal raw (termSafe).
func oneLine(s string) string { return termSafe(strings.Join(strings.Fields(s), " ")) }
