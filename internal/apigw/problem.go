package apigw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// ProblemBase prefixes every problem type URI (RFC 9457 §3.1.1). The URIs
// are stable identifiers; clients match on them, never on titles.
const ProblemBase = "https://onejob.dev/problems/"

// Code names a kind of problem; its type URI is ProblemBase + code.
type Code string

// Problem codes.
const (
	CodeIdempotencyKeyMissing Code = "idempotency-key-missing"
	CodeIdempotencyKeyInvalid Code = "idempotency-key-invalid"
	CodeIdempotencyKeyReused  Code = "idempotency-key-reused"
	CodeMalformedJSON         Code = "malformed-json"
	CodeUnsupportedMediaType  Code = "unsupported-media-type"
	CodePayloadTooLarge       Code = "payload-too-large"
	CodeValidationFailed      Code = "validation-failed"
	CodeUnknownJobType        Code = "unknown-job-type"
	CodeInvalidCursor         Code = "invalid-cursor"
	CodeInvalidQuery          Code = "invalid-query"
	CodeNotFound              Code = "not-found"
	CodeForbidden             Code = "forbidden"
	CodeUnauthenticated       Code = "unauthenticated"
	CodeConflict              Code = "conflict"
	CodeMethodNotAllowed      Code = "method-not-allowed"
	CodeUnavailable           Code = "unavailable"
	CodeInternal              Code = "internal"
	// CodeResolutionConflict: the resolution cannot apply (the attempt is
	// not unknown, another resolution applied, or the job has an outcome).
	CodeResolutionConflict Code = "resolution-conflict"
	// CodeResultViolatesContract: a resolution's result breaks the job
	// type's output contract.
	CodeResultViolatesContract Code = "result-violates-contract"
	// CodeQuotaExceeded: the owner is at one of its quotas (limit names
	// which); nothing was written.
	CodeQuotaExceeded Code = "quota-exceeded"
	// CodeBudgetExceeded: the owner's budget has less left than the job's
	// worst case; nothing was written, no provider called.
	CodeBudgetExceeded Code = "budget-exceeded"
	// CodeProviderEventRefused: an inbound provider webhook was signed
	// but is no event of its provider's (malformed); nothing changed.
	CodeProviderEventRefused Code = "provider-event-refused"
	// CodeProviderEventUnverified: an inbound provider webhook carries no
	// valid signature of its provider (headers missing, no signature
	// matching its body, or a timestamp out of tolerance: a replay), the
	// route's authentication; nothing changed.
	CodeProviderEventUnverified Code = "provider-event-unverified"
	// CodeStreamCursorInvalid: a stream's Last-Event-ID (or after) is no
	// event id onejob ever sent.
	CodeStreamCursorInvalid Code = "stream-cursor-invalid"
)

// Codes lists every problem code, for documentation and tests.
func Codes() []Code {
	return []Code{
		CodeIdempotencyKeyMissing, CodeIdempotencyKeyInvalid, CodeIdempotencyKeyReused, CodeMalformedJSON,
		CodeUnsupportedMediaType, CodePayloadTooLarge, CodeValidationFailed, CodeUnknownJobType,
		CodeInvalidCursor, CodeInvalidQuery, CodeNotFound, CodeForbidden, CodeUnauthenticated, CodeConflict,
		CodeMethodNotAllowed, CodeUnavailable, CodeInternal, CodeResolutionConflict, CodeResultViolatesContract,
		CodeQuotaExceeded, CodeBudgetExceeded, CodeProviderEventRefused, CodeProviderEventUnverified, CodeStreamCursorInvalid,
	}
}

// Type is the code's problem type URI.
func (c Code) Type() string { return ProblemBase + string(c) }

// describe is the one table of problem kinds: each code's status and title.
func (c Code) describe() (int, string) {
	switch c {
	case CodeIdempotencyKeyMissing:
		return http.StatusBadRequest, "Idempotency-Key header missing"
	case CodeIdempotencyKeyInvalid:
		return http.StatusBadRequest, "Idempotency-Key header invalid"
	case CodeIdempotencyKeyReused:
		return http.StatusConflict, "Idempotency key reused with a different request"
	case CodeMalformedJSON:
		return http.StatusBadRequest, "Malformed JSON"
	case CodeUnsupportedMediaType:
		return http.StatusUnsupportedMediaType, "Unsupported media type"
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge, "Payload too large"
	case CodeValidationFailed:
		return http.StatusUnprocessableEntity, "Validation failed"
	case CodeUnknownJobType:
		return http.StatusUnprocessableEntity, "Unknown job type"
	case CodeInvalidCursor:
		return http.StatusBadRequest, "Invalid cursor"
	case CodeInvalidQuery:
		return http.StatusBadRequest, "Invalid query string"
	case CodeNotFound:
		return http.StatusNotFound, "Not found"
	case CodeForbidden:
		return http.StatusForbidden, "Forbidden"
	case CodeUnauthenticated:
		return http.StatusUnauthorized, "Unauthenticated"
	case CodeConflict:
		return http.StatusConflict, "Conflict"
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed, "Method not allowed"
	case CodeUnavailable:
		return http.StatusServiceUnavailable, "Service unavailable"
	case CodeResolutionConflict:
		return http.StatusConflict, "Resolution conflict"
	case CodeResultViolatesContract:
		return http.StatusUnprocessableEntity, "Result violates the job type's contract"
	case CodeQuotaExceeded:
		return http.StatusTooManyRequests, "Quota exceeded"
	case CodeBudgetExceeded:
		return http.StatusTooManyRequests, "Budget exceeded"
	case CodeProviderEventRefused:
		return http.StatusBadRequest, "Provider event refused"
	case CodeProviderEventUnverified:
		return http.StatusUnauthorized, "Provider event not verified"
	case CodeStreamCursorInvalid:
		return http.StatusBadRequest, "Invalid stream cursor"
	default:
		return http.StatusInternalServerError, "Internal error"
	}
}

// Status is the HTTP status the code answers with.
func (c Code) Status() int {
	status, _ := c.describe()
	return status
}

// Error is a problem found at the edge. Its Detail is written for the
// client; it never wraps internal error text.
type Error struct {
	Code   Code
	Detail string
	Errors []FieldError
	// Allow lists the methods of a path, for method-not-allowed.
	Allow string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Detail) }

func fail(c Code, detail string) *Error { return &Error{Code: c, Detail: detail} }

func invalid(errs ...FieldError) *Error {
	return &Error{Code: CodeValidationFailed, Detail: "the request is not valid; see errors", Errors: errs}
}

// problem is an RFC 9457 problem document plus onejob's extension members.
type problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail"`
	Instance  string       `json:"instance,omitempty"`
	RequestID string       `json:"request_id"`
	JobID     string       `json:"job_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
	// AttemptState is the attempt's state, for a resolution conflict.
	AttemptState string `json:"attempt_state,omitempty"`
	// Limit and Quota name the quota reached, for quota-exceeded.
	Limit string `json:"limit,omitempty"`
	Quota int    `json:"quota,omitempty"`
	// ViolatedPolicies names the spent RateLimit-Policy policies
	// (draft-ietf-httpapi-ratelimit-headers §5.1), for quota-exceeded.
	ViolatedPolicies []string `json:"violated_policies,omitempty"`
	// For budget-exceeded: the owner's amount, what is left of it, what
	// the job would set aside, and when the window starts again.
	BudgetUSD    string     `json:"budget_usd,omitempty"`
	RemainingUSD string     `json:"remaining_usd,omitempty"`
	NeededUSD    string     `json:"needed_usd,omitempty"`
	ResetsAt     *time.Time `json:"resets_at,omitempty"`
	// remaining is the RateLimit field's r for budget-exceeded.
	remaining int64

	allow string
	// retryAfter is the Retry-After of a quota-exceeded answer, seconds.
	retryAfter int
}

// problemOf is the one table from errors to problems: the edge's own
// *Error, then the domain's and the store's typed errors. Anything else is
// an internal fault whose text stays in the log.
func problemOf(err error) problem {
	var (
		edge     *Error
		reused   *job.KeyReusedError
		finished *job.FinishedError
		trans    *job.TransitionError
		resolved *job.ResolutionConflictError
		invalidJ *job.InvalidError
		authErr  *AuthError
		quota    *job.QuotaError
		budget   *job.BudgetError
	)
	p := problem{}
	code := CodeInternal
	switch {
	case errors.As(err, &edge):
		code, p.Detail, p.Errors, p.allow = edge.Code, edge.Detail, edge.Errors, edge.Allow
	case errors.As(err, &authErr):
		code, p.Detail = CodeUnauthenticated, authErr.Reason
	case errors.Is(err, ErrUnauthenticated):
		code, p.Detail = CodeUnauthenticated, "a valid bearer token is required"
	case errors.As(err, &quota):
		code, p.Limit, p.Quota = CodeQuotaExceeded, quota.Limit, quota.Quota
		p.ViolatedPolicies = []string{quota.Limit}
		p.retryAfter = max(1, int((quota.RetryAfter+time.Second-1)/time.Second))
		p.Detail = fmt.Sprintf("this owner is at its quota of %s (%d); retry after %d s", quota.Limit, quota.Quota, p.retryAfter)
		if quota.Limit == job.LimitCreateRate {
			p.Detail = fmt.Sprintf("this owner created jobs faster than its create rate allows (a burst of %d); retry after %d s", quota.Quota, p.retryAfter)
		}
	case errors.As(err, &budget):
		code, p.Limit, p.ViolatedPolicies = CodeBudgetExceeded, job.LimitBudget, []string{job.LimitBudget}
		p.BudgetUSD, p.RemainingUSD, p.NeededUSD = budget.Amount.USD(), budget.Remaining.USD(), budget.Needed.USD()
		resets := budget.Resets.UTC()
		p.ResetsAt, p.remaining = &resets, int64(budget.Remaining/1000)
		p.retryAfter = max(1, int((budget.RetryAfter+time.Second-1)/time.Second))
		p.Detail = fmt.Sprintf("this owner's budget has %s USD left of %s; this job may cost up to %s USD. Retry after %d s (when running jobs settle) or once the budget starts again",
			p.RemainingUSD, p.BudgetUSD, p.NeededUSD, p.retryAfter)
	case errors.As(err, &reused):
		code, p.JobID = CodeIdempotencyKeyReused, reused.JobID
		p.Detail = "this Idempotency-Key already names a job created from a different request"
	case errors.Is(err, job.ErrTooManySecrets):
		code, p.Detail = CodeConflict, fmt.Sprintf("%d rotated secrets of this endpoint still sign; rotate with expire_previous=now, or once the oldest expires", job.MaxPreviousSecrets)
	case errors.Is(err, job.ErrNoLease):
		code, p.Detail = CodeConflict, "this endpoint was created without lease_seconds: it never expires, so there is nothing to renew"
	case tooManyEndpoints(err):
		code, p.Detail = CodeConflict, "this owner has as many webhook endpoints as it may; delete one first"
	case errors.Is(err, job.ErrNotFound), errors.Is(err, job.ErrAttemptNotFound):
		// One body for "absent" and "someone else's": no existence leak.
		code, p.Detail = CodeNotFound, "no such job or attempt"
	case errors.As(err, &resolved):
		// Its text names states and whether a result exists, never the result.
		code, p.Detail, p.AttemptState = CodeResolutionConflict, resolved.Error(), string(resolved.State)
	case errors.As(err, &finished):
		code, p.Detail = CodeConflict, fmt.Sprintf("the job already %s", finished.Status)
	case errors.As(err, &trans):
		code, p.Detail = CodeConflict, fmt.Sprintf("attempt %d is %s: only an unknown attempt can be resolved",
			trans.Attempt, trans.From)
	case errors.Is(err, job.ErrAttemptBlocked):
		code, p.Detail = CodeConflict, "an attempt of this job is starting or unknown"
	case errors.Is(err, job.ErrJobFinished):
		code, p.Detail = CodeConflict, "the job already finished"
	case errors.Is(err, job.ErrInvalidTransition):
		code, p.Detail = CodeConflict, "the attempt is not in a state that allows this"
	case errors.Is(err, job.ErrDuplicateKey):
		code, p.Detail = CodeMalformedJSON, "a JSON object names the same key twice"
	case errors.As(err, &invalidJ):
		code, p.Detail = CodeValidationFailed, "the request is not valid; see errors"
		p.Errors = []FieldError{{Pointer: "/" + invalidJ.Field, Detail: invalidJ.Reason}}
	case errors.Is(err, lifecycle.ErrEventUnverified):
		code, p.Detail = CodeProviderEventUnverified, "the delivery carries no valid signature of its provider (missing, not matching its body, or more than 5 minutes from now); nothing changed"
	case errors.Is(err, lifecycle.ErrEventRefused):
		code, p.Detail = CodeProviderEventRefused, "the delivery is signed but is no event of its provider's; nothing changed"
	case errors.Is(err, lifecycle.ErrNoSuchAsyncProvider):
		code, p.Detail = CodeNotFound, "no asynchronous provider of that name takes events here"
	case errors.Is(err, job.ErrInvalidCursor):
		code, p.Detail = CodeStreamCursorInvalid, "Last-Event-ID (or after) is not the id of an event of this stream"
	case errors.Is(err, lifecycle.ErrInvalidCursor):
		code, p.Detail = CodeInvalidCursor, "the cursor was not issued by this API for this listing"
	case errors.Is(err, lifecycle.ErrTooLarge):
		code, p.Detail = CodePayloadTooLarge, "the job would exceed what the store holds in one item"
	case errors.Is(err, lifecycle.ErrUnavailable), errors.Is(err, lifecycle.ErrContention),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code, p.Detail = CodeUnavailable, "the service is temporarily unavailable; retry with the same Idempotency-Key"
	default:
		p.Detail = "an internal error occurred; quote the request_id when reporting it"
	}
	p.Status, p.Title = code.describe()
	p.Type = code.Type()
	return p
}
