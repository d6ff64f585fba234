package apigw

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// Catalog finds job types by name. The API needs only this much of the
// job-type catalog; an adapter over package jobtype provides it.
type Catalog interface {
	Lookup(jobType string) (JobType, bool)
	// ProviderNames lists every provider a job type names, sorted.
	ProviderNames() []string
}

// JobType is one job type's contract as far as creating and reading a job
// are concerned.
type JobType interface {
	// ValidateInput checks an input object against the type's input schema.
	// Pointers are JSON Pointers relative to the input (the API prefixes
	// them with "/input"); nil means valid.
	ValidateInput(input json.RawMessage) []FieldError
	// CheckOutput checks a result against the type's output schema and
	// semantic checks; pointers are relative to the result.
	CheckOutput(output json.RawMessage) []FieldError
	// Providers are the type's own, in the order they are tried when a
	// request names none (job.ChooseProviders).
	Providers() []string
	// Timeout bounds one attempt; HedgeAfter is when a second provider is
	// raced, if ever. They pace pollers (Retry-After).
	Timeout() time.Duration
	HedgeAfter() (time.Duration, bool)
	// Retention is how long a finished job of the type (and its key) is
	// kept.
	Retention() time.Duration
	// CostBasis prices a job of the input (its rendered request's size,
	// the type's output limit) for a budgeted owner.
	CostBasis(input json.RawMessage) (job.CostBasis, error)
	// Tier is how long the type's jobs wait when a create names no tier;
	// MaxTier the longest a create may ask (job.ChooseTier).
	Tier() job.Tier
	MaxTier() job.Tier
}

// Starter starts a job's execution. It must be idempotent (Step Functions
// StartExecution named by the job ID is): it is called after every
// successful create and every replay. A failed start leaves a pending job
// that the sweeper starts later.
type Starter interface {
	Start(ctx context.Context, j job.Job) (started bool, err error)
}

// Jobs is what the routes do: one call each.
type Jobs interface {
	Create(ctx context.Context, r job.Request) (j job.Job, replayed bool, err error)
	Get(ctx context.Context, id string) (job.Job, error)
	Attempts(ctx context.Context, j job.Job) ([]job.Attempt, error)
	List(ctx context.Context, q lifecycle.ListQuery) (lifecycle.Page, error)
	CancelBy(ctx context.Context, id string, c job.Cancellation) (job.Job, error)
	ResolveOn(ctx context.Context, j job.Job, n int, r job.Resolution) (job.Job, error)
	ListOpen(ctx context.Context, q lifecycle.OpenQuery) (lifecycle.Page, error)
	// AcquireHold counts a held request of owner against its quota (a
	// *job.QuotaError past it); ReleaseHold gives it back.
	AcquireHold(ctx context.Context, owner string) (counted time.Time, err error)
	ReleaseHold(ctx context.Context, owner string, counted time.Time)
	// Quotas are the per-owner bounds (the RateLimit-Policy field).
	Quotas() job.Quotas
}

// FieldError is one entry of a validation-failed problem: what is wrong,
// and where — a JSON Pointer into the body, or a query parameter's name.
type FieldError struct {
	Pointer   string
	Parameter string
	Detail    string
}

// MarshalJSON writes "parameter" for a query parameter and "pointer"
// otherwise — also when it is "", which points at the whole body.
func (e FieldError) MarshalJSON() ([]byte, error) {
	if e.Parameter != "" {
		return json.Marshal(struct {
			Parameter string `json:"parameter"`
			Detail    string `json:"detail"`
		}{e.Parameter, e.Detail})
	}
	return json.Marshal(struct {
		Pointer string `json:"pointer"`
		Detail  string `json:"detail"`
	}{e.Pointer, e.Detail})
}

// ProviderEvents takes asynchronous providers' webhook deliveries
// (a *lifecycle.Tasks): verified by the provider's signature, applied
// through the job's compare-and-swap.
type ProviderEvents interface {
	ProviderEvent(ctx context.Context, provider string, header http.Header, body []byte) (lifecycle.EventOutcome, error)
}
