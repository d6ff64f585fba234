package apigw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// AdminScope in the scope claim makes the caller an operator unless
// Config.Admin says otherwise.
const AdminScope = "jobs:admin"

// Limits checked before the engine is called.
const (
	// maxOwnerBytes keeps the owner within DynamoDB's key limits.
	maxOwnerBytes  = 1024
	maxTypeBytes   = 128
	maxReasonBytes = 1024
	maxCursorBytes = 2048
	// maxRequestIDBytes bounds the request ID a problem quotes.
	maxRequestIDBytes = 128
	maxResultBytes    = 64 << 10 // with a 256 KiB input, still within a 400 KB item
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
	// Pacer spaces the re-reads of a GET held by Prefer: wait; nil uses
	// real timers.
	Pacer Pacer
	// WaitPoll is the interval of those re-reads; 0 means DefaultWaitPoll.
	WaitPoll time.Duration
	// Admin is which claim makes an operator; zero means DefaultAdminRule.
	Admin AdminRule
	// Providers is the providers' health for operators; nil: the
	// deployment keeps none (its routes answer not-found).
	Providers Providers
	// Notifications are the owners' webhook endpoints and their jobs'
	// deliveries; nil: the deployment sends none (their routes answer
	// not-found).
	Notifications Notifications
	// Owners are the owners' counters and spend (the usage routes); nil:
	// Jobs' own when it keeps them (a *lifecycle.Engine does).
	Owners Owners
	// ProviderEvents takes asynchronous providers' webhooks; nil: the
	// deployment has none (the route answers not-found).
	ProviderEvents ProviderEvents
	// StreamBase is where jobs' streams are served (GET
	// /v1/jobs/{id}/stream, the stream function's URL; locally its own
	// loopback port): every job view carries its job's stream_url under
	// it, so a client never builds one. https, or http on loopback; empty:
	// the deployment serves no streams, and views carry none.
	StreamBase string
	// Tracer records a create's start of its execution in its job's
	// trace; nil: Jobs' own (a *lifecycle.Engine's), none without.
	Tracer lifecycle.Tracer
	// Traces reads jobs' recorded spans for operators (locally onejob
	// run's span store); nil: the deployment keeps none (the route answers
	// not-found: traces are read in X-Ray).
	Traces Traces
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
	pacer       Pacer
	waitPoll    time.Duration
	// console holds the console's files by name, with their ETags.
	console   map[string]consoleFile
	admin     AdminRule
	providers Providers
	// notifications: nil when the deployment sends none.
	notifications Notifications
	// ratePolicy is the RateLimit-Policy field value; empty without quotas.
	ratePolicy     string
	owners         Owners
	providerEvents ProviderEvents
	streamBase     string
	tracer         lifecycle.Tracer
	traces         Traces
}

// New validates the configuration.
func New(c Config) (*Handler, error) {
	if c.Jobs == nil {
		return nil, errors.New("apigw: jobs are required")
	}
	if c.Catalog == nil {
		return nil, errors.New("apigw: catalog is required")
	}
	if err := c.defaults(); err != nil {
		return nil, err
	}
	if o, ok := c.Jobs.(Owners); ok && c.Owners == nil {
		c.Owners = o
	}
	h := &Handler{jobs: c.Jobs, catalog: c.Catalog, starter: c.Starter, now: c.Clock, log: c.Logger,
		maxResponse: c.MaxResponseBytes, pacer: c.Pacer, waitPoll: c.WaitPoll, admin: c.Admin, providers: c.Providers,
		notifications: c.Notifications, owners: c.Owners, providerEvents: c.ProviderEvents, streamBase: c.StreamBase,
		traces: c.Traces}
	h.routes = routes()
	if h.tracer = c.Tracer; h.tracer == nil {
		if t, ok := c.Jobs.(interface{ Tracer() lifecycle.Tracer }); ok {
			h.tracer = t.Tracer()
		}
	}
	var b job.Budget
	if c.Owners != nil {
		b = c.Owners.Budget()
	}
	h.ratePolicy = ratePolicy(c.Jobs.Quotas(), b)
	files, err := consoleFiles()
	if err != nil {
		return nil, err
	}
	h.console = files
	return h, nil
}

// defaults fills what every handler (New's, NewEvents') needs and was not
// given, and refuses what is invalid.
func (c *Config) defaults() error {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxResponseBytes < 0 {
		return errors.New("apigw: max response bytes must not be negative")
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = 5 << 20
	}
	if c.Pacer == nil {
		c.Pacer = timerPacer{}
	}
	if c.WaitPoll < 0 {
		return errors.New("apigw: wait poll interval must not be negative")
	}
	if c.WaitPoll == 0 {
		c.WaitPoll = DefaultWaitPoll
	}
	if c.Admin == (AdminRule{}) {
		c.Admin = DefaultAdminRule()
	}
	base, err := streamBase(c.StreamBase)
	if err != nil {
		return err
	}
	c.StreamBase = base
	return c.Admin.Validate()
}

// request is one decoded call.
type request struct {
	ev        *events.APIGatewayV2HTTPRequest
	requestID string
	owner     string
	admin     bool
	params    map[string]string
	headers   map[string]string // lower-cased names
	// streamBase is the Handler's: where the job views say a job's stream
	// is read.
	streamBase string
}

// viewer is how the caller sees jobs: as their owner, or as an operator.
func (r *request) viewer() viewer { return viewer{admin: r.admin, streamBase: r.streamBase} }

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
	r := &request{ev: &ev, requestID: ev.RequestContext.RequestID, headers: lowerKeys(ev.Headers), streamBase: h.streamBase}
	if r.requestID == "" || len(r.requestID) > maxRequestIDBytes {
		// API Gateway's IDs are short; openapi.yaml bounds request_id.
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
	if h.ratePolicy != "" {
		if resp.Headers == nil {
			resp.Headers = map[string]string{}
		}
		resp.Headers["RateLimit-Policy"] = h.ratePolicy
	}
	return resp, nil
}

// ratePolicy announces the owners' quotas as
// draft-ietf-httpapi-ratelimit-headers' RateLimit-Policy field: each a
// concurrency quota (no window), or the create rate, named by the limit it
// bounds.
func ratePolicy(q job.Quotas, b job.Budget) string {
	var parts []string
	if q.UnfinishedJobs > 0 {
		parts = append(parts, fmt.Sprintf("%q;q=%d;qu=\"concurrent-requests\"", job.LimitUnfinishedJobs, q.UnfinishedJobs))
	}
	if q.HeldRequests > 0 {
		parts = append(parts, fmt.Sprintf("%q;q=%d;qu=\"concurrent-requests\"", job.LimitHeldRequests, q.HeldRequests))
	}
	if c := q.Creates; c.Enabled() {
		// A token bucket: Burst creates, refilled at PerMinute a minute
		// (the window is how long a full burst takes to come back).
		window := max(1, int((time.Duration(c.Burst)*c.Interval()+time.Second-1)/time.Second))
		parts = append(parts, fmt.Sprintf("%q;q=%d;w=%d", job.LimitCreateRate, c.Burst, window))
	}
	if b.Enabled() {
		// The deployment's amount in micro-dollars a window (an owner's
		// own amount is in GET /v1/usage): no registered quota unit
		// counts money, so the unit is named.
		parts = append(parts, fmt.Sprintf("%q;q=%d;qu=\"usd-micros\";w=%d", job.LimitBudget, b.Amount/1000, int64(b.Period/time.Second)))
	}
	return strings.Join(parts, ", ")
}

func (h *Handler) serve(ctx context.Context, r *request) (reply, error) {
	rt, params, err := h.match(r.ev)
	// A public route is served to anyone; for every other request, even one
	// that matches no route, who is asking is settled first.
	if err != nil || !rt.Public {
		if err := r.authenticate(h.admin); err != nil {
			return reply{}, err
		}
	}
	if err != nil {
		return reply{}, err
	}
	r.params = params
	return rt.serve(h, ctx, r)
}
