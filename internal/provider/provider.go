// Package provider is the port between a job attempt and an external model or
// webhook provider. It owns the request/response shapes, the failure
// classification every adapter must follow, the shared JSON-over-HTTP helper,
// credentials handling and the name → Provider registry. It deliberately
// imports no AWS packages so the core stays cheap to build and test.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Request is one attempt of one job, as handed to a provider.
type Request struct {
	JobID   string
	Attempt int
	// IdempotencyKey identifies the attempt (job.AttemptKey). Adapters pass it
	// downstream wherever the provider accepts one so that a resend of the same
	// attempt is deduplicated by the provider.
	IdempotencyKey string
	JobType        string
	// System and Prompt are rendered from the job type's prompt template.
	System, Prompt string
	// Input is the job's raw input; webhook-style providers receive it as is.
	Input json.RawMessage
	// OutputSchema is the JSON Schema of the expected output object.
	OutputSchema    json.RawMessage
	Temperature     float64
	MaxOutputTokens int
}

// Response is a provider's answer. Output is not validated here: contract
// checking belongs to the job type.
type Response struct {
	Output            json.RawMessage
	ProviderRequestID string
	Model             string
}

// Provider executes one attempt against one external system.
type Provider interface {
	Name() string
	Call(ctx context.Context, req Request) (Response, error)
}

// Class tells the lifecycle what it may safely do after a failed call (job.Next decides).
//
// Classes describe the state of the external system, not a retry policy:
//   - ClassRetryable: the provider did not act on the request (or acted in a
//     side-effect-free way whose result we discarded); sending it again, to
//     the same or another provider, cannot duplicate work.
//   - ClassNonRetryable: the request itself was refused (bad request, auth,
//     validation); sending the same request again fails the same way.
//   - ClassAmbiguous: the request may have been processed and we do not know
//     the outcome (timeout or connection cut after sending). A resend is only
//     safe under the same idempotency key or for side-effect-free work.
type Class string

const (
	ClassRetryable    Class = "retryable"
	ClassNonRetryable Class = "non_retryable"
	ClassAmbiguous    Class = "ambiguous"
)

// Sentinel errors wrapped by CallError.Err so callers can branch with errors.Is.
var (
	// ErrMalformedResponse: a 2xx answer whose body could not be decoded.
	ErrMalformedResponse = errors.New("malformed provider response")
	// ErrNoStructuredOutput: the model answered but ignored the requested
	// structure (prose instead of JSON, no tool call, refusal, truncation).
	ErrNoStructuredOutput = errors.New("provider returned no structured output")
	// ErrHTTPStatus: a non-2xx HTTP status.
	ErrHTTPStatus = errors.New("provider returned an error status")
	// ErrTransport: the request could not be completed at the transport level.
	ErrTransport = errors.New("provider transport failure")
	// ErrInvalidRequest: the adapter refused the request before sending it.
	ErrInvalidRequest = errors.New("invalid provider request")
)

// CallError is the only error type adapters return from Call.
type CallError struct {
	Provider string
	Class    Class
	// Status is the HTTP status, 0 when no response was received.
	Status int
	// RetryAfter is the provider's requested back-off (0 if none). Adapters
	// never sleep; job.Next decides.
	RetryAfter time.Duration
	// ProviderRequestID is recorded whenever the provider returned one, also
	// on failures, so support tickets can reference it.
	ProviderRequestID string
	Msg               string
	Err               error
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("provider %s: %s", e.Provider, e.Class)
	if e.Status != 0 {
		s += fmt.Sprintf(" (status %d)", e.Status)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.ProviderRequestID != "" {
		s += " [request_id " + e.ProviderRequestID + "]"
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Err }

// Classify maps any error from Call to a Class. A *CallError anywhere in the
// chain carries its own class. Bare context errors are ambiguous because the
// request may already have been sent; other unknown errors are ambiguous too,
// since assuming "not sent" could duplicate side effects.
func Classify(err error) Class {
	if err == nil {
		return ""
	}
	var ce *CallError
	if errors.As(err, &ce) && ce.Class != "" {
		return ce.Class
	}
	if errors.Is(err, ErrInvalidRequest) {
		return ClassNonRetryable
	}
	if errors.Is(err, ErrMalformedResponse) || errors.Is(err, ErrNoStructuredOutput) {
		return ClassRetryable
	}
	return ClassifyTransport(err, true)
}

// ClassifyStatus maps an HTTP status to a Class.
//
// 504 is ambiguous in principle (a gateway gave up on an upstream that may
// still finish), but it is treated as retryable: inference is side-effect free
// and webhooks receive the attempt's Idempotency-Key. 409 is what providers
// return while a request with the same Idempotency-Key is still in flight, so
// the outcome is unknown: ambiguous.
func ClassifyStatus(status int) Class {
	switch {
	case status >= 200 && status < 300:
		return ""
	case status == 408, status == 425, status == 429:
		return ClassRetryable
	case status == 409:
		return ClassAmbiguous
	case status == 501, status == 505:
		return ClassNonRetryable
	case status >= 500:
		// 500, 502, 503, 504, 529 (Anthropic overloaded) and CDN 52x.
		return ClassRetryable
	default:
		return ClassNonRetryable
	}
}
