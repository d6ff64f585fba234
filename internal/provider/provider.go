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
	// SentAt is when the attempt was first sent (zero: unknown): a lookup
	// accepts only what was created after it.
	SentAt time.Time
	// Tier is the tier the attempt runs at on its provider (RunTier):
	// empty for now. A flex kind sends a window at its flex service tier.
	Tier string `json:",omitempty"`
}

// Response is a provider's answer. Output is not validated here: contract
// checking belongs to the job type.
type Response struct {
	Output            json.RawMessage
	ProviderRequestID string
	// Model is the model that answered, as the provider names it (a dated
	// snapshot, say), or the configured one when the answer does not say.
	Model string
	// Usage is what the provider says it charged for the call; nil when it
	// reports nothing (a webhook that sends no usage).
	Usage *Usage
}

// Usage is the token count a provider reports for one call, from its
// documented usage fields.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Prepared is the exact request an adapter would send for a Request, built
// by the code path Call uses, without sending it: what a certification
// counts tokens of and checks against the model's request rules.
type Prepared struct {
	// Model is the model the request is for.
	Model string
	// Body is the wire request: *openai.ChatRequest, *anthropic.MessagesRequest,
	// *bedrockruntime.ConverseInput or *webhook.Request.
	Body any
	// Notes say what the adapter changed to fit the model's rules (a
	// temperature the model does not accept, left out).
	Notes []string
}

// Preparer is implemented by every adapter. Prepare fails (non-retryable,
// wrapping ErrModelRule or ErrInvalidRequest) when the request cannot be
// sent, or when the configured model would refuse it: Call refuses the
// same request the same way before sending it.
type Preparer interface {
	Prepare(req Request) (Prepared, error)
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
//   - ClassExhausted: the provider did not act on the request, and it will
//     refuse every request until someone acts on the account (billing, a
//     spent quota): another provider may serve it, this one will not, so
//     there is no back-off to wait for. job.Next reads it as retryable: it
//     falls back, and it never sends a job to a provider it already tried.
//   - ClassNonRetryable: the request itself was refused (bad request, auth,
//     validation); sending the same request again fails the same way.
//   - ClassAmbiguous: the request may have been processed and we do not know
//     the outcome (timeout or connection cut after sending). A resend is only
//     safe under the same idempotency key or for side-effect-free work.
type Class string

const (
	ClassRetryable    Class = "retryable"
	ClassExhausted    Class = "exhausted"
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
	// ErrModelRule: the configured model would refuse the request (a
	// parameter it does not accept); the adapter did not send it.
	ErrModelRule = errors.New("request breaks the model's rules")
	// ErrAccountExhausted: the provider refuses work for the account
	// (billing, quota) until someone acts on it.
	ErrAccountExhausted = errors.New("provider account exhausted")
	// ErrContentFiltered: the provider's content filter stopped the answer.
	ErrContentFiltered = errors.New("provider content filter")
)

// CallError is the only error type adapters return from Call.
type CallError struct {
	Provider string
	Class    Class
	// Status is the HTTP status, 0 when no response was received. A 2xx
	// is an answer onejob cannot use: the model ran, and the attempt is
	// billed for it (job.SpendOf); ended asynchronous work is answered
	// 200 too.
	Status int
	// RetryAfter is the provider's requested back-off (0 if none). Adapters
	// never sleep; job.Next decides.
	RetryAfter time.Duration
	// ProviderRequestID is recorded whenever the provider returned one, also
	// on failures, so support tickets can reference it.
	ProviderRequestID string
	// Detail is the provider's error body, parsed (type, code, param); its
	// text is also in Msg.
	Detail APIError
	// Replayed: the provider marked the answer as its first answer to the
	// request's Idempotency-Key, replayed (HeaderIdempotentReplayed).
	Replayed bool
	// LookupUnknown: a webhook receiver's lookup answer "no trace of this
	// key" (Idempotency-Lookup: unknown, docs/webhook-provider-contract.md).
	LookupUnknown bool
	// Usage is what the provider reported it charged for an answer it
	// gave but onejob cannot use (truncated, refused, filtered, without
	// the requested structure): the model ran, and the call is billed
	// however its answer fares. Nil when the answer reported none, or
	// there was no answer.
	Usage *Usage
	Msg   string
	Err   error
}

// Billed records the usage an unusable answer reported (nil: none).
func (e *CallError) Billed(u *Usage) *CallError {
	e.Usage = u
	return e
}

// HeaderIdempotentReplayed marks an answer replayed from an earlier request
// with the same Idempotency-Key: Stripe's header, and onejob's own API's.
const HeaderIdempotentReplayed = "Idempotent-Replayed"

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
	if errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrModelRule) {
		return ClassNonRetryable
	}
	if errors.Is(err, ErrAccountExhausted) {
		return ClassExhausted
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
// the outcome is unknown: ambiguous. 402 Payment Required is the account's
// state, not the request's: exhausted.
func ClassifyStatus(status int) Class {
	switch {
	case status >= 200 && status < 300:
		return ""
	case status == 402:
		return ClassExhausted
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
