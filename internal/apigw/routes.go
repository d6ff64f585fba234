package apigw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/tracing/propagate"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

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
	// The client's W3C trace context, if valid (a malformed one is
	// ignored, never refused): the parent of the job's trace.
	req.Trace = propagate.Parse(r.headers[propagate.Traceparent], r.headers[propagate.Tracestate])
	j, replayed, err := h.jobs.Create(ctx, req)
	if err != nil {
		rep := reply{}
		var reused *job.KeyReusedError
		if errors.As(err, &reused) {
			rep.jobID = reused.JobID
		}
		return rep, err
	}
	h.startTraced(ctx, r, j)
	rep := reply{status: http.StatusCreated, body: r.viewer().job(j), jobID: j.ID,
		headers: map[string]string{"Location": "/v1/jobs/" + j.ID}}
	if replayed {
		rep.status = http.StatusOK
		rep.headers = map[string]string{"Idempotent-Replayed": "true"}
	}
	return rep, nil
}

// startTraced starts j's execution in a span of j's trace.
func (h *Handler) startTraced(ctx context.Context, r *request, j job.Job) {
	if h.tracer == nil {
		h.start(ctx, r, j)
		return
	}
	ctx, span := h.tracer.Start(ctx, semconv.SpanStart, j)
	h.start(ctx, r, j)
	span.End(nil)
}

// decodeCreate turns a checked body into a request, reporting every
// problem it finds at once.
func (h *Handler) decodeCreate(body []byte) (job.Request, error) {
	m, errs := members(body, "type", "input", "providers", "tier", "stream")
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
	var tier job.Tier
	if raw, ok := m["tier"]; ok && !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) != nil || s == "" {
			errs = append(errs, FieldError{Pointer: "/tier", Detail: "must be one of " + job.TierNames()})
		}
		tier = job.Tier(s)
	}
	var stream bool
	if raw, ok := m["stream"]; ok && !isNull(raw) && json.Unmarshal(raw, &stream) != nil {
		errs = append(errs, FieldError{Pointer: "/stream", Detail: "must be true or false"})
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
	tier, reason := job.ChooseTier(tier, jt.Tier(), jt.MaxTier())
	if reason != "" {
		errs = append(errs, FieldError{Pointer: "/tier", Detail: reason})
	}
	for _, fe := range jt.ValidateInput(input) {
		fe.Pointer = "/input" + fe.Pointer
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return job.Request{}, invalid(errs...)
	}
	r := job.Request{Type: jobType, Input: input, Providers: providers, Retention: jt.Retention(), Primary: job.PrimaryOf(jt.Providers()), Tier: tier,
		Stream: stream}
	if h.owners != nil && h.owners.Budget().Enabled() {
		basis, err := jt.CostBasis(input)
		if err != nil {
			// An input its schema accepts renders; one that does not
			// cannot be priced, so it is refused before anything is set
			// aside.
			return job.Request{}, invalid(FieldError{Pointer: "/input", Detail: "cannot be rendered into the type's prompt"})
		}
		r.Basis = basis
	}
	return r, nil
}

// start starts the job's execution. The job is durable already, so a
// failure is logged and left to the sweeper, never reported as an error.
func (h *Handler) start(ctx context.Context, r *request, j job.Job) {
	if h.starter == nil || !job.ShouldStart(j) {
		return
	}
	if _, err := h.starter.Start(ctx, j); err != nil {
		h.log.ErrorContext(ctx, "execution_start_failed", "request_id", r.requestID, "job_id", j.ID, "error", err.Error())
	}
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
	return reply{status: http.StatusOK, body: r.viewer().attempts(j.ID, attempts), jobID: j.ID}, nil
}

func (h *Handler) cancelJob(ctx context.Context, r *request) (reply, error) {
	c, err := decodeCancel(r)
	if err != nil {
		return reply{}, err
	}
	j, err := h.ownJob(ctx, r)
	if err != nil {
		return reply{}, err
	}
	j, err = h.jobs.CancelBy(ctx, j.ID, c)
	if err != nil {
		return reply{jobID: j.ID}, err
	}
	return reply{status: http.StatusOK, body: r.viewer().job(j), jobID: j.ID}, nil
}

func (h *Handler) listJobs(ctx context.Context, r *request) (reply, error) {
	p, err := r.page(func(s job.Status) bool { return s.Valid() }, statusList())
	if err != nil {
		return reply{}, err
	}
	q := lifecycle.ListQuery{Owner: r.owner, Status: p.status, Limit: p.limit, Cursor: p.cursor}
	// A page of large jobs could outgrow Lambda's response limit; then ask
	// for fewer. One job always fits (a DynamoDB item is at most 400 KB).
	for {
		page, err := h.jobs.List(ctx, q)
		if err != nil {
			return reply{}, err
		}
		b, err := marshal(r.viewer().list(page))
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
		return reply{}, h.operatorsOnly("resolving an attempt")
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
	res.By = r.owner
	j, err := h.ownJob(ctx, r) // an operator's: any owner's job
	if err != nil {
		return reply{}, err
	}
	if res.Outcome == job.AttemptSucceeded {
		// A result no consumer could read is refused before anything is
		// written, as a provider's would be.
		jt, ok := h.catalog.Lookup(j.Type)
		if !ok {
			return reply{jobID: j.ID}, &Error{Code: CodeResultViolatesContract,
				Detail: "this build does not know the job's type, so its result cannot be checked"}
		}
		if errs := jt.CheckOutput(res.Result); len(errs) > 0 {
			for i := range errs {
				errs[i].Pointer = "/result" + errs[i].Pointer
			}
			return reply{jobID: j.ID}, &Error{Code: CodeResultViolatesContract,
				Detail: "the result does not meet the job type's output contract; see errors", Errors: errs}
		}
	}
	if j, err = h.jobs.ResolveOn(ctx, j, n, res); err != nil {
		return reply{jobID: j.ID}, err
	}
	return reply{status: http.StatusOK, body: r.viewer().job(j), jobID: j.ID}, nil
}

// operatorsOnly refuses a caller who is not an operator.
func (h *Handler) operatorsOnly(what string) error {
	return fail(CodeForbidden, what+" is for operators (a token whose "+h.admin.Claim+" claim holds "+h.admin.Value+")")
}

// listOpenJobs lists every owner's jobs without an outcome, oldest first, for
// operators: the blocked ones (status=unknown) are what they look for. A
// status filter applies after the read, so a page may be short and still
// have a next_cursor.
func (h *Handler) listOpenJobs(ctx context.Context, r *request) (reply, error) {
	if !r.admin {
		return reply{}, h.operatorsOnly("listing every owner's jobs")
	}
	p, err := r.page(func(s job.Status) bool { return s.Valid() && !s.Terminal() }, openStatusList())
	if err != nil {
		return reply{}, err
	}
	q := lifecycle.OpenQuery{CreatedBefore: h.now().Add(time.Minute), Limit: p.limit, Cursor: p.cursor}
	// As listJobs: a page that would outgrow Lambda's response limit is
	// read again with half the limit, so its next_cursor follows the last
	// job it shows.
	for {
		page, err := h.jobs.ListOpen(ctx, q)
		if err != nil {
			return reply{}, err
		}
		if p.status != "" {
			page.Jobs = slices.DeleteFunc(page.Jobs, func(j job.Job) bool { return j.Status != p.status })
		}
		b, err := marshal(r.viewer().list(page))
		if err != nil {
			return reply{}, err
		}
		if len(b) <= h.maxResponse || len(page.Jobs) <= 1 || q.Limit <= 1 {
			return reply{status: http.StatusOK, body: json.RawMessage(b)}, nil
		}
		q.Limit /= 2
	}
}

// pageQuery is a listing's query parameters.
type pageQuery struct {
	status job.Status // empty: any
	limit  int
	cursor string
}

// page reads status (which allowed admits; named lists them), limit and
// cursor, every problem at once.
func (r *request) page(allowed func(job.Status) bool, named string) (pageQuery, error) {
	params, err := r.query()
	if err != nil {
		return pageQuery{}, err
	}
	p := pageQuery{limit: lifecycle.DefaultPageSize}
	var errs []FieldError
	if s, ok := params["status"]; ok {
		p.status = job.Status(s)
		if !allowed(p.status) {
			errs = append(errs, FieldError{Parameter: "status", Detail: "must be one of " + named})
		}
	}
	if s, ok := params["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > lifecycle.MaxPageSize {
			errs = append(errs, FieldError{Parameter: "limit", Detail: fmt.Sprintf("must be an integer from 1 to %d", lifecycle.MaxPageSize)})
		}
		p.limit = n
	}
	if len(errs) > 0 {
		return pageQuery{}, invalid(errs...)
	}
	if c, ok := params["cursor"]; ok {
		if c == "" || len(c) > maxCursorBytes {
			return pageQuery{}, lifecycle.ErrInvalidCursor
		}
		p.cursor = c
	}
	return p, nil
}

// openStatusList names the statuses of a job without an outcome.
func openStatusList() string {
	var names []string
	for _, s := range job.Statuses() {
		if !s.Terminal() {
			names = append(names, string(s))
		}
	}
	return strings.Join(names, ", ")
}

// decodeCancel reads a cancel's optional body, {"reason"?}; the caller is
// who cancels.
func decodeCancel(r *request) (job.Cancellation, error) {
	c := job.Cancellation{By: r.owner}
	body, err := rawBody(r.ev)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return c, err
	}
	if err := requireJSON(r.headers["content-type"]); err != nil {
		return c, err
	}
	if err := checkJSON(body); err != nil {
		return c, err
	}
	m, errs := members(body, "reason")
	if m == nil {
		return c, invalid(errs...)
	}
	if _, given := m["reason"]; given {
		reason, fe := stringMember(m, "reason", maxReasonBytes)
		if fe != nil {
			errs = append(errs, *fe)
		}
		c.Reason = reason
	}
	if len(errs) > 0 {
		return c, invalid(errs...)
	}
	return c, nil
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
// ownJob reads the path's job if the caller may see it: its owner, or any
// operator. Someone else's job is not found, as an absent one is.
func (h *Handler) ownJob(ctx context.Context, r *request) (job.Job, error) {
	id, err := r.jobID()
	if err != nil {
		return job.Job{}, err
	}
	j, err := h.jobs.Get(ctx, id)
	if err != nil {
		return job.Job{}, err
	}
	if j.Owner != r.owner && !r.admin {
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
func (r *request) query() (map[string]string, error) {
	if r.ev.RawQueryString == "" {
		// A bare event (a test, a console invoke) may carry only the map.
		return r.ev.QueryStringParameters, nil
	}
	// The raw string is what the client sent: API Gateway's map joins
	// repeated names with commas and leaves undecodable ones as written.
	v, err := url.ParseQuery(r.ev.RawQueryString)
	if err != nil {
		return nil, fail(CodeInvalidQuery, "the query string does not decode (bad percent-encoding or a semicolon)")
	}
	out := make(map[string]string, len(v))
	var repeated []FieldError
	for k, vs := range v {
		if len(vs) > 1 {
			repeated = append(repeated, FieldError{Parameter: k, Detail: "is given more than once"})
		}
		out[k] = vs[0]
	}
	if len(repeated) > 0 {
		sort.Slice(repeated, func(i, j int) bool { return repeated[i].Parameter < repeated[j].Parameter })
		return nil, &Error{Code: CodeInvalidQuery, Detail: "a query parameter is repeated", Errors: repeated}
	}
	return out, nil
}
