package apigw

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// Route is one route of the HTTP API, in API Gateway's syntax
// ("GET /v1/jobs/{id}"). Every route needs a valid JWT unless it is Public:
// a public route has no authorizer (infra/ deploys it without one, the
// local server checks no token for it) and its handler reads no claims.
// Only pages that hold no data are public (the operator console), and the
// inbound provider webhooks, which their provider's signature
// authenticates instead (a provider sends no JWT).
type Route struct {
	Method, Path string
	Public       bool
	// Function is the function that serves the route when it is not the
	// API's (FnEvents); infra/ integrates it with that function.
	Function string
}

// FnEvents names the function that serves asynchronous providers' webhooks
// (deploy.FnEvents): the only one, beside run, that reads the providers'
// configuration, so that the API function never does.
const FnEvents = "events"

// Key is the route key API Gateway names the route by.
func (r Route) Key() string { return r.Method + " " + r.Path }

// route is a Route and the handler method that serves it.
type route struct {
	Route
	serve func(h *Handler, ctx context.Context, r *request) (reply, error)
}

// routes is the one list of the API's routes: the handler serves these,
// infra/ deploys exactly these (Routes), and a test holds openapi.yaml to
// them.
func routes() []route {
	return []route{
		{Route{http.MethodPost, "/v1/jobs", false, ""}, (*Handler).createJob},
		{Route{http.MethodGet, "/v1/jobs", false, ""}, (*Handler).listJobs},
		{Route{http.MethodGet, "/v1/jobs/{id}", false, ""}, (*Handler).getJob},
		{Route{http.MethodGet, "/v1/jobs/{id}/attempts", false, ""}, (*Handler).listAttempts},
		{Route{http.MethodPost, "/v1/jobs/{id}/cancel", false, ""}, (*Handler).cancelJob},
		{Route{http.MethodPost, "/v1/jobs/{id}/attempts/{n}/resolve", false, ""}, (*Handler).resolveAttempt},
		{Route{http.MethodGet, "/v1/jobs/{id}/deliveries", false, ""}, (*Handler).listDeliveries},
		{Route{http.MethodPost, "/v1/jobs/{id}/deliveries/{delivery}/redeliver", false, ""}, (*Handler).redeliver},
		{Route{http.MethodGet, "/v1/jobs/{id}/trace", false, ""}, (*Handler).getTrace},
		{Route{http.MethodPost, "/v1/webhook-endpoints", false, ""}, (*Handler).createEndpoint},
		{Route{http.MethodGet, "/v1/webhook-endpoints", false, ""}, (*Handler).listEndpoints},
		{Route{http.MethodGet, "/v1/webhook-endpoints/{id}", false, ""}, (*Handler).getEndpoint},
		{Route{http.MethodDelete, "/v1/webhook-endpoints/{id}", false, ""}, (*Handler).deleteEndpoint},
		{Route{http.MethodPost, "/v1/webhook-endpoints/{id}/rotate-secret", false, ""}, (*Handler).rotateSecret},
		{Route{http.MethodPost, "/v1/webhook-endpoints/{id}/renew", false, ""}, (*Handler).renewEndpoint},
		{Route{http.MethodGet, "/v1/admin/jobs", false, ""}, (*Handler).listOpenJobs},
		{Route{http.MethodPost, "/v1/admin/attempts/resolve", false, ""}, (*Handler).resolveAttempts},
		{Route{http.MethodGet, "/v1/admin/providers", false, ""}, (*Handler).listProviders},
		{Route{http.MethodPost, "/v1/admin/providers/{name}/force", false, ""}, (*Handler).forceProvider},
		{Route{http.MethodGet, "/v1/usage", false, ""}, (*Handler).getUsage},
		{Route{http.MethodGet, "/v1/admin/owners", false, ""}, (*Handler).listOwners},
		{Route{http.MethodPost, "/v1/admin/owners/{owner}/budget", false, ""}, (*Handler).setBudget},
		// An asynchronous provider's signed webhooks (Tasks.ProviderEvent).
		{Route{http.MethodPost, "/v1/provider-events/{provider}", true, FnEvents}, (*Handler).providerEvent},
		// A job's stream: served at the stream function's own URL (a
		// StreamHandler; an HTTP API cannot stream), never by API Gateway.
		{Route{http.MethodGet, StreamPath, false, FnStream}, (*Handler).streamElsewhere},
		// The operator console: static files that call the routes above
		// with the operator's token.
		{Route{http.MethodGet, "/console", true, ""}, (*Handler).consolePage},
		{Route{http.MethodGet, "/console/{file}", true, ""}, (*Handler).consoleFile},
	}
}

// Routes lists the API's routes.
func Routes() []Route {
	var out []Route
	for _, rt := range routes() {
		out = append(out, rt.Route)
	}
	return out
}

// match matches a path against the route's pattern, returning its
// parameters.
func (rt route) match(segments []string) (map[string]string, bool) {
	pattern := strings.Split(strings.TrimPrefix(rt.Path, "/"), "/")
	if len(pattern) != len(segments) {
		return nil, false
	}
	params := map[string]string{}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segments[i] == "" {
				return nil, false
			}
			params[p[1:len(p)-1]] = segments[i]
			continue
		}
		if p != segments[i] {
			return nil, false
		}
	}
	return params, true
}

// match picks the route: by routeKey when API Gateway named one of ours,
// else by method and path (a $default or proxy route, or a bare event).
func (h *Handler) match(ev *events.APIGatewayV2HTTPRequest) (route, map[string]string, error) {
	for _, rt := range h.routes {
		if ev.RouteKey == rt.Key() {
			return rt, ev.PathParameters, nil
		}
	}
	method := ev.RequestContext.HTTP.Method
	path := ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	segments, ok := splitPath(path)
	if !ok {
		return route{}, nil, fail(CodeNotFound, "no such resource")
	}
	var allow []string
	for _, rt := range h.routes {
		params, ok := rt.match(segments)
		if !ok {
			continue
		}
		if rt.Method == method {
			return rt, params, nil
		}
		allow = append(allow, rt.Method)
	}
	if len(allow) > 0 {
		return route{}, nil, &Error{Code: CodeMethodNotAllowed, Detail: "the resource does not support " + safeMethod(method),
			Allow: strings.Join(allow, ", ")}
	}
	return route{}, nil, fail(CodeNotFound, "no such resource")
}

// RouteFor returns the route key API Gateway would pick and its decoded
// path parameters, or "$default" when no route matches. The local server
// uses it to build the event API Gateway would send.
func (h *Handler) RouteFor(method, rawPath string) (string, map[string]string) {
	segments, ok := splitPath(rawPath)
	if !ok {
		return "$default", nil
	}
	for _, rt := range h.routes {
		if params, ok := rt.match(segments); ok && rt.Method == method {
			if len(params) == 0 {
				params = nil
			}
			return rt.Key(), params
		}
	}
	return "$default", nil
}

// splitPath splits a raw path into percent-decoded segments.
func splitPath(p string) ([]string, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		d, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		parts[i] = d
	}
	return parts, true
}

func safeMethod(m string) string {
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return "this method"
		}
	}
	if m == "" || len(m) > 16 {
		return "this method"
	}
	return m
}

// streamElsewhere answers a request for a job's stream that reached the
// API (which API Gateway, not deploying the route, would answer itself):
// a stream is read at the job's stream_url.
func (h *Handler) streamElsewhere(context.Context, *request) (reply, error) {
	return reply{}, fail(CodeNotFound, "a job's stream is read at its stream_url (GET /v1/jobs/{id} names it), not at this address")
}
