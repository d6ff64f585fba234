package provider

import (
	"context"
	"time"
)

// Settling an attempt whose outcome is unknown (its call timed out after it
// was sent) means asking the provider about the same attempt again, with
// the strongest evidence its API offers, and never starting a new attempt
// meanwhile. An adapter whose API offers some way implements Settler; one
// whose API offers none (Anthropic Messages, Bedrock Converse) does not, and
// its unknown attempts wait for the job type's deadline rule or an operator.
// What the evidence means for the job (complete, fail, keep waiting) is
// decided in package job (job.DecideSettle); adapters only report it.

// Evidence is what a provider said when asked again about an attempt.
type Evidence string

// Kinds of evidence.
const (
	// EvidenceAnswered: the provider gave the attempt's own answer again: a
	// webhook answering a repeat of the attempt's Idempotency-Key with its
	// first answer, or a stored completion found by the attempt's metadata.
	// Settlement.Response carries it.
	EvidenceAnswered Evidence = "answered"
	// EvidenceInProgress: the provider is still working on the attempt (a
	// webhook's 409 for a key whose first request is in flight).
	EvidenceInProgress Evidence = "in_progress"
	// EvidenceAbsent: the provider's lookup has no trace of the attempt.
	// Whether that proves nothing happened depends on how long ago it was
	// sent (the provider's max processing time): package job decides.
	EvidenceAbsent Evidence = "absent"
	// EvidenceRefused: the provider's answer to the attempt, given again or
	// found, is a failure: a refusal of the request (a webhook answering
	// the repeat with its first 4xx: the request was not acted on), or an
	// answer Call could not have used (malformed, no structured output, a
	// model's refusal or a content filter). Either way the request is over
	// at the provider and nothing is in flight. Settlement.Err is the
	// *CallError Call would have returned, with its class.
	EvidenceRefused Evidence = "refused"
	// EvidenceExecuted: an executing re-send was answered 2xx without
	// Idempotent-Replayed: true — the receiver executed the request now (it
	// did not remember the key, or never had it). Settlement.Response carries
	// that answer. Package job accepts it only inside the key retention
	// window (job.ReadEvidence), and records it as executed now.
	EvidenceExecuted Evidence = "executed"
)

// KeyMemory is implemented by a Settler whose Settle may execute: a webhook
// without the contract's lookup re-sends the request, which a receiver runs
// unless it still remembers the key. The reconciler re-sends only while
// the first send is certainly within KeyRetention (job.MayResend).
type KeyMemory interface {
	// SettleExecutes reports whether Settle re-sends (false: it asks a
	// lookup that never executes).
	SettleExecutes() bool
	// KeyRetention is how long the provider remembers a key after its
	// first answer (the contract's minimum when undeclared).
	KeyRetention() time.Duration
}

// Settlement is a provider's answer about an earlier attempt.
type Settlement struct {
	Evidence Evidence
	// Response is the attempt's answer, for EvidenceAnswered.
	Response Response
	// Err is the failure Call would have returned, for EvidenceRefused (a
	// *CallError).
	Err error
	// Detail is what onejob records as the evidence, for people: "re-sent
	// with Idempotency-Key job_x/1: 200, its first answer", "completion
	// chatcmpl-123 found by metadata onejob_attempt=job_x/1", "no stored
	// completion has metadata onejob_attempt=job_x/1". Bounded (Excerpt),
	// never a credential.
	Detail string
	// WorkID and WorkStatus, for EvidenceInProgress from an asynchronous
	// provider: the work found under the attempt's key. onejob records it
	// on the attempt (found) and asks about it by id from then on, as
	// about work whose submit was answered.
	WorkID, WorkStatus string
}

// Settler is implemented by adapters whose provider can be asked about an
// earlier attempt. req is the attempt's request as Call received it (same
// IdempotencyKey, same body). An error means the question got no answer this
// time (a transport failure, a 5xx, a 429): the caller asks again later, on
// its back-off. Settle never starts work the provider has not seen under
// the attempt's key, except where re-sending under that key is the
// provider's documented way to ask (webhooks: the receiver answers a repeat
// with its first answer).
type Settler interface {
	Settle(ctx context.Context, req Request) (Settlement, error)
}
