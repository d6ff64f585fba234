package apigw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/onejob/onejob/internal/apigw"
)

// ---- the OpenAPI contract ---------------------------------------------------------

// contract validates responses against openapi.yaml.
type contract struct {
	doc       *openapi3.T
	router    routers.Router
	problem   *openapi3.Schema
	routeKeys map[string]bool // "GET /v1/jobs/{id}", as API Gateway names routes
}

func loadContract(t testing.TB) *contract {
	t.Helper()
	c, err := parseContract()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// envContract is the contract every env's client validates against,
// parsed once per test binary (read only after that, as kin-openapi's
// own validating middleware shares one document between requests):
// parsing it for each of the package's 56 envs took a tenth of its CPU.
var envContract struct {
	once sync.Once
	c    *contract
	err  error
}

func sharedContract(t testing.TB) *contract {
	t.Helper()
	envContract.once.Do(func() { envContract.c, envContract.err = parseContract() })
	if envContract.err != nil {
		t.Fatal(envContract.err)
	}
	return envContract.c
}

func parseContract() (*contract, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(apigw.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi.yaml is %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.yaml is invalid: %w", err)
	}
	// The router matches requests against the servers too; the document
	// names the deployed API's (and the stream function's), and these
	// tests call loopback servers.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
		for _, op := range item.Operations() {
			op.Servers = nil
		}
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			keys[method+" "+path] = true
		}
	}
	return &contract{doc: doc, router: router, problem: doc.Components.Schemas["Problem"].Value, routeKeys: keys}, nil
}

// check validates one response to req. Requests outside the document's
// operations (unknown paths, other methods) must answer a problem.
func (c *contract) check(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	// The legacy router ignores a trailing slash; the API does not.
	if err != nil || (len(req.URL.Path) > 1 && strings.HasSuffix(req.URL.Path, "/")) {
		return c.checkProblem(status, header, body)
	}
	if status == http.StatusNotModified {
		// kin-openapi never validates a 304; the document still has to
		// describe it.
		return c.checkNotModified(req, route, header, body)
	}
	if ct, _, _ := mime.ParseMediaType(header.Get("Content-Type")); ct == "text/event-stream" && status == http.StatusOK {
		// kin-openapi reads no event stream: the status and headers are
		// checked as documented, each event's data against its schema.
		if err := c.checkEventStream(body); err != nil {
			return fmt.Errorf("%s %s → %d: %w", req.Method, req.URL.Path, status, err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 status, Header: header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: true},
		}
		return openapi3filter.ValidateResponse(context.Background(), in)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s → %d: %w\nbody: %s", req.Method, req.URL.Path, status, err, body)
	}
	return nil
}

// checkNotModified holds a 304 to the operation's documented 304: no body,
// every required header present, every documented header valid.
func (c *contract) checkNotModified(req *http.Request, route *routers.Route, header http.Header, body []byte) error {
	ref := route.Operation.Responses.Status(http.StatusNotModified)
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("%s %s → 304: not documented", req.Method, req.URL.Path)
	}
	if len(body) > 0 {
		return fmt.Errorf("%s %s → 304 with a body: %s", req.Method, req.URL.Path, body)
	}
	for name, h := range ref.Value.Headers {
		v := header.Get(name)
		if v == "" {
			if h.Value.Required {
				return fmt.Errorf("%s %s → 304 without header %s", req.Method, req.URL.Path, name)
			}
			continue
		}
		if err := h.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return fmt.Errorf("%s %s → 304: header %s %q: %w", req.Method, req.URL.Path, name, v, err)
		}
	}
	return nil
}

func (c *contract) checkProblem(status int, header http.Header, body []byte) error {
	if status < 400 || header.Get("Content-Type") != "application/problem+json" {
		return fmt.Errorf("undocumented response %d %s: %s", status, header.Get("Content-Type"), body)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("problem body: %w", err)
	}
	if err := c.problem.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("problem %s: %w", body, err)
	}
	return nil
}

// checkEvent validates a handler response to an event.
func (c *contract) checkEvent(ev events.APIGatewayV2HTTPRequest, resp events.APIGatewayV2HTTPResponse) error {
	path := ev.RawPath
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	method := ev.RequestContext.HTTP.Method
	// A route key names the operation whatever the raw path (a named stage
	// prefixes it); the handler trusts it as it trusts API Gateway.
	if m, tmpl, ok := strings.Cut(ev.RouteKey, " "); ok && c.routeKeys[ev.RouteKey] {
		method, path = m, tmpl
		for k, v := range ev.PathParameters {
			path = strings.ReplaceAll(path, "{"+k+"}", v)
		}
	}
	req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}}
	header := http.Header{}
	for k, v := range resp.Headers {
		header.Set(k, v)
	}
	return c.check(req, resp.StatusCode, header, []byte(resp.Body))
}

// validating checks every response the local server sends.
type validating struct {
	t    testing.TB
	next http.RoundTripper
	c    *contract
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	// The document describes the API, not the files the local server also
	// serves nor the CORS preflights the gateway answers itself.
	if err != nil || req.URL.Path == "/openapi.yaml" || isPreflight(req) {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := v.c.check(req, resp.StatusCode, resp.Header, body); err != nil {
		v.t.Errorf("response violates openapi.yaml: %v", err)
	}
	// Every answer of the API, whatever its status or body, tells browsers
	// to take its Content-Type as it is.
	if got := resp.Header.Values("X-Content-Type-Options"); len(got) != 1 || got[0] != "nosniff" {
		v.t.Errorf("%s %s answered %d with X-Content-Type-Options %q, want nosniff", req.Method, req.URL.Path, resp.StatusCode, got)
	}
	return resp, nil
}

func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// ---- events -------------------------------------------------------------------------
