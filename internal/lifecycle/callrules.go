package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// What an attempt's call sends (its request, key and digest, its timeout)
// and how its end is read (health, usage, failure class).

// attemptRequest is the provider request of attempt a: the type's
// rendering of the job's input, with the attempt's identity. The same for
// its call and for every question about it later (settle).
func attemptRequest(j job.Job, jt JobType, a job.Attempt) (provider.Request, error) {
	req, err := jt.Request(j.Input)
	if err != nil {
		return provider.Request{}, err
	}
	req.JobID, req.Attempt, req.IdempotencyKey, req.JobType = j.ID, a.Number, a.SentKey(), j.Type
	req.SentAt = a.StartedAt
	return req, nil
}

// sending names an attempt of j about to be launched: its provider key in
// this deployment's namespace, and its request's digest.
func (w *Tasks) sending(j job.Job, jt JobType) Sending {
	return func(a job.Attempt) (string, string) {
		a.ProviderKey = job.ProviderKeyIn(w.cfg.Namespace, a.JobID, a.Number)
		return a.ProviderKey, requestDigest(j, jt, a)
	}
}

// requestDigest is the digest of attempt a's request as rendered now
// (job.Attempt.RequestDigest): the webhook contract's version and the
// SHA-256 of the request; empty when it does not render.
func requestDigest(j job.Job, jt JobType, a job.Attempt) string {
	req, err := attemptRequest(j, jt, a)
	if err != nil {
		return ""
	}
	req.SentAt = time.Time{} // what is sent, not when
	b, err := json.Marshal(req)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return job.SentRequestVersion + ":" + hex.EncodeToString(sum[:])
}

func validNamespace(ns string) bool {
	if len(ns) > 64 {
		return false
	}
	for _, r := range ns {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// callTimeout is how long a call may run. A provider that can be asked
// about an attempt later (provider.Settler) is waited on only until the
// state machine has given up on the run and the call has counted as slow:
// its answer is not lost, the reconciler asks for it. Any other provider's
// late answer only arrives live, so its call runs up to CallTimeout.
// A flex call is slower by design: it waits up to CallTimeout (OpenAI
// asks for 15 minutes) whatever the provider.
func (w *Tasks) callTimeout(p provider.Provider, jt JobType, pol job.HealthPolicy, mode provider.Mode) time.Duration {
	if _, ok := p.(provider.Settler); ok && mode != provider.ModeFlex {
		return min(w.cfg.CallTimeout, max(RunTimeout(jt), pol.SlowCallAfter)+settleMargin)
	}
	return w.cfg.CallTimeout
}

// settleMargin keeps a settleable call alive a moment past its slow bound,
// so the slow observation is made before the call is let go.
const settleMargin = time.Second

// healthKind is what a call's end says of its provider's health: an
// answer (a refusal of the request itself included: the provider works),
// or the failure kind that counts against it.
func healthKind(err error) job.HealthEventKind {
	var ce *provider.CallError
	if err == nil || !errors.As(err, &ce) {
		if err != nil && provider.Classify(err) == provider.ClassAmbiguous {
			return job.HealthUnknown
		}
		return job.HealthAnswered
	}
	switch {
	case ce.Class == provider.ClassAmbiguous:
		return job.HealthUnknown
	case ce.Class == provider.ClassExhausted:
		return job.HealthExhausted
	case ce.Status == http.StatusTooManyRequests:
		return job.HealthRateLimited
	case ce.Status >= 500:
		return job.HealthServerError
	case ce.Status == 0 && ce.Class == provider.ClassRetryable && errors.Is(err, provider.ErrTransport):
		return job.HealthTransport
	}
	return job.HealthAnswered
}

// usageOf is what a response says the call cost.
func usageOf(resp provider.Response, latency time.Duration) *job.Usage {
	u := &job.Usage{Model: resp.Model, Latency: latency}
	if resp.Usage != nil {
		u.InputTokens, u.OutputTokens = resp.Usage.InputTokens, resp.Usage.OutputTokens
	}
	return u
}

// failureClass is the job's reading of a provider's failure class. An
// exhausted provider (billing, spent quota) falls back like a retryable one:
// job.Next never sends a job to a provider it already tried.
func failureClass(c provider.Class) job.Class {
	switch c {
	case provider.ClassAmbiguous:
		return job.ClassAmbiguous
	case provider.ClassNonRetryable:
		return job.ClassNonRetryable
	case provider.ClassRetryable, provider.ClassExhausted:
		return job.ClassRetryable
	}
	return job.ClassRetryable
}

// fail records the attempt's failure (an ambiguous one makes it unknown).
func (w *Tasks) fail(ctx context.Context, j job.Job, a job.Attempt, f job.Failure, c job.Call) (job.Job, error) {
	return w.cfg.Engine.FailAttemptOn(ctx, j, a.Number, f, c)
}
