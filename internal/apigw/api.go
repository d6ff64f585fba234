package apigw

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// AdminScope in the scope claim makes the caller an operator.
const AdminScope = "jobs:admin"

// Limits checked before the engine is called.
const (
	// maxOwnerBytes keeps the owner within DynamoDB's key limits.
	maxOwnerBytes  = 1024
	maxTypeBytes   = 128
	maxReasonBytes = 1024
	maxCursorBytes = 2048
	maxResultBytes = 64 << 10 // with a 256 KiB input, still within a 400 KB item
)

// Config wires a Handler. Validate it with New.
type Config struct {
	// Jobs runs the use cases (a *lifecycle.Engine).
	Jobs    Jobs
	Catalog Catalog
	// Starter starts a job's execution; nil leaves created jobs pending
	// (for the sweeper), which only tests and tools should want.
	Starter Starter
	Clock   func() time.Time
	Logger  *slog.Logger
	// MaxResponseBytes bounds a list response; 0 means 5 MiB, under
	// Lambda's 6 MB response limit.
	MaxResponseBytes int
}

// Handler serves the API's routes.
type Handler struct {
	jobs    Jobs
	catalog Catalog
	starter Starter
	now     func() time.Time
	log     *slog.Logger
	routes  []route
	// maxResponse bounds a list response's body.
	maxResponse int
}

// New validates the configuration.
func New(c Config) (*Handler, error) {
	if c.Jobs == nil {
		return nil, errors.New("apigw: jobs are required")
	}
	if c.Catalog == nil {
		return nil, errors.New("apigw: catalog is required")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxResponseBytes < 0 {
		return nil, errors.New("apigw: max response bytes must not be negative")
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 5 << 20
	}
	h := &Handler{jobs: c.Jobs, catalog: c.Catalog, starter: c.Starter, now: c.Clock, log: c.Logger,
		maxResponse: c.MaxResponseBytes}
	h.routes = []route{
		{method: http.MethodPost, path: "/v1/jobs", serve: h.createJob},
		{method: http.MethodGet, path: "/v1/jobs", serve: h.listJobs},
		{method: http.MethodGet, path: "/v1/jobs/{id}", serve: h.getJob},
		{method: http.MethodGet, path: "/v1/jobs/{id}/attempts", serve: h.listAttempts},
		{method: http.MethodPost, path: "/v1/jobs/{id}/cancel", serve: h.cancelJob},
		{method: http.MethodPost, path: "/v1/jobs/{id}/attempts/{n}/resolve", serve: h.resolveAttempt},
	}
	return h, nil
}

// route is one API Gateway route; path is in API Gateway's syntax.
type route struct {
	method string
	path   string
	serve  func(ctx context.Context, r *request) (reply, error)
}

func (rt route) key() string { return rt.method + " " + rt.path }

// match matches a path against the route's pattern, returning its
// parameters.
func (rt route) match(segments []string) (map[string]string, bool) {
	pattern := strings.Split(strings.TrimPrefix(rt.path, "/"), "/")
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

// request is one decoded call.
type request struct {
	ev        *events.APIGatewayV2HTTPRequest
	requestID string
	owner     string
	admin     bool
	params    map[string]string
	headers   map[string]string // lower-cased names
}

// reply is a successful answer.
type reply struct {
	status  int
	body    any
	headers map[string]string
	jobID   string
}

// Handle serves one API Gateway HTTP API event. It never returns a Go
// error (API Gateway would answer a bare 500): request problems and faults
// alike become problem responses, faults logged with the request ID.
func (h *Handler) Handle(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, _ error) {
	start := h.now()
	r := &request{ev: &ev, requestID: ev.RequestContext.RequestID, headers: lowerKeys(ev.Headers)}
	if r.requestID == "" {
		r.requestID = NewRequestID()
	}
	var rep reply
	var err error
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
			resp = h.problemResponse(r, err)
		}
		h.logRequest(ctx, r, resp.StatusCode, rep.jobID, err, start)
	}()
	rep, err = h.serve(ctx, r)
	if err == nil {
		resp, err = encode(rep)
	}
	if err != nil {
		resp = h.problemResponse(r, err)
	}
	return resp, nil
}

func (h *Handler) serve(ctx context.Context, r *request) (reply, error) {
	if err := r.authenticate(); err != nil {
		return reply{}, err
	}
	rt, params, err := h.match(r.ev)
	if err != nil {
		return reply{}, err
	}
	r.params = params
	return rt.serve(ctx, r)
}

// authenticate reads the principal from the JWT authorizer's claims; the
// body and headers are never consulted for it.
func (r *request) authenticate() error {
	a := r.ev.RequestContext.Authorizer
	if a == nil || a.JWT == nil {
		return &AuthError{Reason: "no verified token claims"}
	}
	sub := a.JWT.Claims["sub"]
	if sub == "" || len(sub) > maxOwnerBytes || !utf8.ValidString(sub) {
		return &AuthError{Reason: ReasonSubject}
	}
	r.owner = sub
	r.admin = HasScope(a.JWT.Claims["scope"], AdminScope)
	return nil
}

// match picks the route: by routeKey when API Gateway named one of ours,
// else by method and path (a $default or proxy route, or a bare event).
func (h *Handler) match(ev *events.APIGatewayV2HTTPRequest) (route, map[string]string, error) {
	for _, rt := range h.routes {
		if ev.RouteKey == rt.key() {
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
		if rt.method == method {
			return rt, params, nil
		}
		allow = append(allow, rt.method)
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
		if params, ok := rt.match(segments); ok && rt.method == method {
			if len(params) == 0 {
				params = nil
			}
			return rt.key(), params
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

// ---- routes -------------------------------------------------------------------

func (h *Handler) createJob(ctx context.Context, r *request) (reply, error) {
	body, err := rawBody(r.ev)
	if err != nil {
		return reply{}, err
	}
	key, present := r.headers["idempotency-key"]
	if !present {
		return reply{}, fail(CodeIdempotencyKeyMissing, "send an Idempotency-Key header naming this intent")
	}
	if !job.ValidKey(key) {
		return reply{}, fail(CodeIdempotencyKeyInvalid, "the Idempotency-Key must be 1–255 visible ASCII characters")
	}
	if err := requireJSON(r.headers["content-type"]); err != nil {
		return reply{}, err
	}
	if err := checkJSON(body); err != nil {
		return reply{}, err
	}
	req, err := h.decodeCreate(body)
	if err != nil {
		return reply{}, err
	}
	req.Owner, req.IdempotencyKey = r.owner, key
	j, replayed, err := h.jobs.Create(ctx, req)
	if err != nil {
		rep := reply{}
		var reused *job.KeyReusedError
		if errors.As(err, &reused) {
			rep.jobID = reused.JobID
		}
		return rep, err
	}
	h.start(ctx, r, j)
	rep := reply{status: http.StatusCreated, body: jobView(j), jobID: j.ID,
		headers: map[string]string{"Location": "/v1/jobs/" + j.ID}}
	if replayed {
		rep.status = http.StatusOK
		rep.headers = map[string]string{"Idempotent-Replayed": "true"}
	}
	return rep, nil
}

// decodeCreate turns a checked body into a request, reporting every
// problem it finds at once.
func (h *Handler) decodeCreate(body []byte) (job.Request, error) {
	m, errs := members(body, "type", "input", "providers")
	if m == nil {
		return job.Request{}, invalid(errs...)
	}
	jobType, fe := stringMember(m, "type", maxTypeBytes)
	if fe != nil {
		errs = append(errs, *fe)
	}
	input, ok := m["input"]
	switch {
	case !ok:
		errs = append(errs, FieldError{Pointer: "/input", Detail: "is required"})
	case !isObject(input):
		errs = append(errs, FieldError{Pointer: "/input", Detail: "must be an object"})
	}
	var providers []string
	if raw, ok := m["providers"]; ok && !isNull(raw) {
		// [] decodes to an empty list, which names too few providers; an
		// absent or null member leaves nil, the type's own.
		if json.Unmarshal(raw, &providers) != nil {
			errs = append(errs, FieldError{Pointer: "/providers", Detail: "must be an array of strings"})
		}
	}
	if len(errs) > 0 {
		return job.Request{}, invalid(errs...)
	}
	jt, ok := h.catalog.Lookup(jobType)
	if !ok {
		return job.Request{}, &Error{Code: CodeUnknownJobType, Detail: "no job type of that name",
			Errors: []FieldError{{Pointer: "/type", Detail: "unknown job type"}}}
	}
	providers, problems := job.ChooseProviders(providers, jt.Providers())
	for _, p := range problems {
		ptr := "/providers"
		if p.Index >= 0 {
			ptr += "/" + strconv.Itoa(p.Index)
		}
		errs = append(errs, FieldError{Pointer: ptr, Detail: p.Reason})
	}
	for _, fe := range jt.ValidateInput(input) {
		fe.Pointer = "/input" + fe.Pointer
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return job.Request{}, invalid(errs...)
	}
	return job.Request{Type: jobType, Input: input, Providers: providers}, nil
}

// start starts the job's execution. The job is durable already, so a
// failure is logged and left to the sweeper, never reported as an error.
func (h *Handler) start(ctx context.Context, r *request, j job.Job) {
	if h.starter == nil || !job.ShouldStart(j) {
		return
	}
	if _, err := h.starter.Start(ctx, j.ID); err != nil {
		h.log.ErrorContext(ctx, "execution_start_failed", "request_id", r.requestID, "job_id", j.ID, "error", err.Error())
	}
}

func (h *Handler) getJob(ctx context.Context, r *request) (reply, error) {
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	return reply{status: http.StatusOK, body: jobView(j), jobID: j.ID}, nil
}

func (h *Handler) listAttempts(ctx context.Context, r *request) (reply, error) {
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	attempts, err := h.jobs.Attempts(ctx, j)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	return reply{status: http.StatusOK, body: attemptsView(j.ID, attempts), jobID: j.ID}, nil
}

func (h *Handler) cancelJob(ctx context.Context, r *request) (reply, error) {
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	j, err = h.jobs.Cancel(ctx, j.ID)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	return reply{status: http.StatusOK, body: jobView(j), jobID: j.ID}, nil
}

func (h *Handler) listJobs(ctx context.Context, r *request) (reply, error) {
	q := lifecycle.ListQuery{Owner: r.owner, Limit: lifecycle.DefaultPageSize}
	params := r.query()
	var errs []FieldError
	if s, ok := params["status"]; ok {
		q.Status = job.Status(s)
		if !q.Status.Valid() {
			errs = append(errs, FieldError{Parameter: "status", Detail: "must be one of " + statusList()})
		}
	}
	if s, ok := params["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > lifecycle.MaxPageSize {
			errs = append(errs, FieldError{Parameter: "limit", Detail: fmt.Sprintf("must be an integer from 1 to %d", lifecycle.MaxPageSize)})
		}
		q.Limit = n
	}
	if len(errs) > 0 {
		return reply{}, invalid(errs...)
	}
	if c, ok := params["cursor"]; ok {
		if c == "" || len(c) > maxCursorBytes {
			return reply{}, lifecycle.ErrInvalidCursor
		}
		q.Cursor = c
	}
	// A page of large jobs could outgrow Lambda's response limit; then ask
	// for fewer. One job always fits (a DynamoDB item is at most 400 KB).
	for {
		page, err := h.jobs.List(ctx, q)
		if err != nil {
			return reply{}, err
		}
		b, err := marshal(listView(page))
		if err != nil {
			return reply{}, err
		}
		if len(b) <= h.maxResponse || len(page.Jobs) <= 1 {
			return reply{status: http.StatusOK, body: json.RawMessage(b)}, nil
		}
		q.Limit = len(page.Jobs) / 2
	}
}

func (h *Handler) resolveAttempt(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, fail(CodeForbidden, "resolving an attempt needs the "+AdminScope+" scope")
	}
	id, err := r.jobID()
	if err != nil {
		return reply{}, err
	}
	n, err := strconv.Atoi(r.params["n"])
	if err != nil || n < 1 || n > 1<<20 {
		return reply{}, job.ErrAttemptNotFound
	}
	body, err := rawBody(r.ev)
	if err != nil {
		return reply{}, err
	}
	if err := requireJSON(r.headers["content-type"]); err != nil {
		return reply{}, err
	}
	if err := checkJSON(body); err != nil {
		return reply{}, err
	}
	res, err := decodeResolution(body)
	if err != nil {
		return reply{}, err
	}
	// Operators may resolve any owner's job: no owner check here.
	j, err := h.jobs.Resolve(ctx, id, n, res)
	if err != nil {
		return reply{jobID: id}, err
	}
	return reply{status: http.StatusOK, body: jobView(j), jobID: j.ID}, nil
}

func decodeResolution(body []byte) (job.Resolution, error) {
	m, errs := members(body, "outcome", "result", "reason")
	if m == nil {
		return job.Resolution{}, invalid(errs...)
	}
	var res job.Resolution
	outcome, fe := stringMember(m, "outcome", 32)
	switch {
	case fe != nil:
		errs = append(errs, *fe)
	case outcome != string(job.AttemptSucceeded) && outcome != string(job.AttemptFailed) && outcome != string(job.AttemptCancelled):
		errs = append(errs, FieldError{Pointer: "/outcome", Detail: "must be succeeded, failed or cancelled"})
	}
	res.Outcome = job.AttemptState(outcome)
	reason, fe := stringMember(m, "reason", maxReasonBytes)
	if fe != nil {
		errs = append(errs, *fe)
	}
	res.Reason = reason
	result, given := m["result"]
	given = given && !isNull(result)
	switch {
	case res.Outcome == job.AttemptSucceeded && !given:
		errs = append(errs, FieldError{Pointer: "/result", Detail: "is required when the outcome is succeeded"})
	case res.Outcome != job.AttemptSucceeded && given:
		errs = append(errs, FieldError{Pointer: "/result", Detail: "is allowed only when the outcome is succeeded"})
	case given && !isObject(result):
		errs = append(errs, FieldError{Pointer: "/result", Detail: "must be an object"})
	case given && len(result) > job.MaxResultBytes:
		errs = append(errs, FieldError{Pointer: "/result", Detail: fmt.Sprintf("must be at most %d bytes", job.MaxResultBytes)})
	case given:
		res.Result = compact(result)
	}
	if len(errs) > 0 {
		return job.Resolution{}, invalid(errs...)
	}
	return res, nil
}

// ownJob reads the job named by the path, as its owner. Someone else's job
// is reported exactly as a missing one.
func (h *Handler) ownJob(ctx context.Context, r *request) (job.Job, error) {
	id, err := r.jobID()
	if err != nil {
		return job.Job{}, err
	}
	j, err := h.jobs.Get(ctx, id)
	if err != nil {
		return job.Job{}, err
	}
	if j.Owner != r.owner {
		return job.Job{}, job.ErrNotFound
	}
	return j, nil
}

// jobID returns the path's job ID when it could name a job at all, so that
// garbage never reaches the store.
func (r *request) jobID() (string, error) {
	if id := r.params["id"]; job.ValidID(id) {
		return id, nil
	}
	return "", job.ErrNotFound
}

// statusList names every job status, for messages.
func statusList() string {
	var names []string
	for _, s := range job.Statuses() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// query returns the query parameters as API Gateway passes them (repeated
// names comma-joined), parsing the raw query string if they are absent.
func (r *request) query() map[string]string {
	if r.ev.QueryStringParameters != nil || r.ev.RawQueryString == "" {
		return r.ev.QueryStringParameters
	}
	v, _ := url.ParseQuery(r.ev.RawQueryString)
	out := make(map[string]string, len(v))
	for k, vs := range v {
		out[k] = strings.Join(vs, ",")
	}
	return out
}

// ---- responses ----------------------------------------------------------------

func encode(rep reply) (events.APIGatewayV2HTTPResponse, error) {
	b, err := marshal(rep.body)
	if err != nil {
		// A stored value that is not JSON: a fault, not the client's.
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("encode response: %w", err)
	}
	headers := map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"}
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

func (h *Handler) problemResponse(r *request, err error) events.APIGatewayV2HTTPResponse {
	p := problemOf(err)
	p.RequestID = r.requestID
	if r.ev != nil {
		p.Instance = instance(r.ev)
	}
	headers := map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"}
	switch p.Status {
	case http.StatusUnauthorized:
		headers["WWW-Authenticate"] = `Bearer`
	case http.StatusMethodNotAllowed:
		headers["Allow"] = p.allow
	case http.StatusServiceUnavailable:
		headers["Retry-After"] = "1"
	}
	b, merr := marshal(p)
	if merr != nil {
		b = []byte(`{"type":"` + CodeInternal.Type() + `","title":"Internal error","status":500,"detail":"an internal error occurred","request_id":"unknown"}`)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: p.Status, Headers: headers, Body: string(b)}
}

// instance is the request's path when it is printable, as the problem's
// occurrence; anything odd is left out rather than echoed.
func instance(ev *events.APIGatewayV2HTTPRequest) string {
	p := ev.RawPath
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
