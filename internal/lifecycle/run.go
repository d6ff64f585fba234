package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// RunAttempt claims attempt n, calls its provider with the attempt's identity
// as the downstream idempotency key, checks the answer against the job
// type's contract and completes the job by compare-and-swap itself — so an
// answer arriving after the state machine stopped waiting still counts (or
// is discarded as a lost race).
func (w *Tasks) RunAttempt(ctx context.Context, in AttemptInput) (AttemptResult, error) {
	j, claimed, err := w.cfg.Engine.MarkRunning(ctx, in.JobID, in.Attempt)
	if err != nil {
		return AttemptResult{}, err
	}
	if !claimed {
		// A redelivery (another invocation owns the provider call), or an
		// attempt discarded because its job finished before the claim.
		return w.await(ctx, j, in.Attempt)
	}
	a, _ := j.Attempt(in.Attempt)
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "unknown job type " + j.Type}, "")
	}
	if job.NeedsCertification(j, a.Provider) {
		// The gate, again at call time: never call an unproven fallback.
		ok, err := w.cfg.Certifications.Certified(ctx, j.Type, jt.ContractVersion(), a.Provider)
		if err != nil {
			return AttemptResult{}, err
		}
		if !ok {
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassUncertified,
				Message: fmt.Sprintf("provider %s holds no certification for contract %s", a.Provider, jt.ContractVersion())}, "")
		}
	}
	p, ok := w.cfg.Providers.Get(a.Provider)
	if !ok {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "provider " + a.Provider + " is not configured"}, "")
	}
	req, err := jt.Request(j.Input)
	if err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "render prompt: " + err.Error()}, "")
	}
	req.JobID, req.Attempt, req.IdempotencyKey, req.JobType = j.ID, a.Number, a.IdempotencyKey(), j.Type
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	start := w.now()
	resp, err := p.Call(callCtx, req)
	w.log.InfoContext(ctx, "provider_called", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider,
		"latency_ms", w.now().Sub(start).Milliseconds(), "ok", err == nil)
	if err != nil {
		var ce *provider.CallError
		reqID := ""
		if errors.As(err, &ce) {
			reqID = ce.ProviderRequestID
		}
		return w.fail(ctx, j, a, job.Failure{Class: failureClass(provider.Classify(err)), Message: err.Error()}, reqID)
	}
	if err := jt.CheckOutput(resp.Output); err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassContractViolation, Message: err.Error()}, resp.ProviderRequestID)
	}
	c, err := w.cfg.Engine.Complete(ctx, j.ID, a.Number, resp.Output, resp.ProviderRequestID)
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		// The answer cannot be kept with its job: it breaks the contract
		// as surely as a wrong shape would (fall back if a provider is left).
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassContractViolation,
			Message: fmt.Sprintf("the result (%d bytes) is too large to store with its job: %v", len(resp.Output), tooLarge)}, resp.ProviderRequestID)
	}
	if err != nil {
		return AttemptResult{}, err
	}
	return w.result(c.Job, a.Number), nil
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

func (w *Tasks) result(j job.Job, n int) AttemptResult {
	a, _ := j.Attempt(n)
	return AttemptResult{JobID: j.ID, Attempt: n, State: a.State, Won: j.CompletedBy == n}
}

// fail records the attempt's failure and returns the signal the state
// machine routes on.
func (w *Tasks) fail(ctx context.Context, j job.Job, a job.Attempt, f job.Failure, reqID string) (AttemptResult, error) {
	if _, err := w.cfg.Engine.FailAttempt(ctx, j.ID, a.Number, f, reqID); err != nil {
		return AttemptResult{}, err
	}
	return AttemptResult{}, &TaskError{Name: string(f.Class.Signal()), Message: f.Message}
}

// await waits for the invocation that claimed the attempt to finish, then
// reports the same outcome it did.
func (w *Tasks) await(ctx context.Context, j job.Job, n int) (AttemptResult, error) {
	for {
		a, ok := j.Attempt(n)
		if !ok {
			return AttemptResult{}, job.ErrAttemptNotFound
		}
		if signal, ended := job.EndSignal(a); ended {
			if signal == "" {
				return w.result(j, n), nil
			}
			msg := ""
			if a.Error != nil {
				msg = a.Error.Message
			}
			return AttemptResult{}, &TaskError{Name: string(signal), Message: msg}
		}
		select {
		case <-ctx.Done():
			return AttemptResult{}, ctx.Err()
		case <-time.After(w.cfg.PollInterval):
		}
		var err error
		if j, err = w.cfg.Engine.Get(ctx, j.ID); err != nil {
			return AttemptResult{}, err
		}
	}
}
