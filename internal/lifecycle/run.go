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
		// A redelivery: another invocation owns the provider call.
		return w.await(ctx, j, in.Attempt)
	}
	a, _ := j.Attempt(in.Attempt)
	log := w.log.With("job_id", j.ID, "attempt", a.Number, "provider", a.Provider)
	if j.Status.Terminal() {
		// Cancelled (or won by a hedge) before this attempt ran: don't call.
		c, err := w.cfg.Engine.Complete(ctx, j.ID, a.Number, nil, "")
		if err != nil {
			return AttemptResult{}, err
		}
		return w.result(c.Job, a.Number), nil
	}
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "unknown job type " + j.Type}, "", ErrNameUnknownJobType)
	}
	if a.Provider != j.Providers[0] {
		// The gate, again at call time: never call an unproven fallback.
		ok, err := w.cfg.Certifications.Certified(ctx, j.Type, jt.ContractVersion(), a.Provider)
		if err != nil {
			return AttemptResult{}, err
		}
		if !ok {
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassUncertified,
				Message: fmt.Sprintf("provider %s holds no certification for contract %s", a.Provider, jt.ContractVersion())}, "", ErrNameProviderUncertified)
		}
	}
	p, ok := w.cfg.Providers.Get(a.Provider)
	if !ok {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "provider " + a.Provider + " is not configured"}, "", ErrNameProviderRejected)
	}
	req, err := jt.Request(j.Input)
	if err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "render prompt: " + err.Error()}, "", ErrNameProviderRejected)
	}
	req.JobID, req.Attempt, req.IdempotencyKey, req.JobType = j.ID, a.Number, a.IdempotencyKey(), j.Type
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	start := w.now()
	resp, err := p.Call(callCtx, req)
	log.InfoContext(ctx, "provider_called", "latency_ms", w.now().Sub(start).Milliseconds(), "ok", err == nil)
	if err != nil {
		var ce *provider.CallError
		reqID := ""
		if errors.As(err, &ce) {
			reqID = ce.ProviderRequestID
		}
		switch provider.Classify(err) {
		case provider.ClassAmbiguous:
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassAmbiguous, Message: err.Error()}, reqID, ErrNameProviderAmbiguous)
		case provider.ClassNonRetryable:
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: err.Error()}, reqID, ErrNameProviderRejected)
		default:
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassRetryable, Message: err.Error()}, reqID, ErrNameProviderRetryable)
		}
	}
	if err := jt.CheckOutput(resp.Output); err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassContractViolation, Message: err.Error()}, resp.ProviderRequestID, ErrNameContractViolation)
	}
	c, err := w.cfg.Engine.Complete(ctx, j.ID, a.Number, resp.Output, resp.ProviderRequestID)
	if err != nil {
		return AttemptResult{}, err
	}
	return w.result(c.Job, a.Number), nil
}

func (w *Tasks) result(j job.Job, n int) AttemptResult {
	a, _ := j.Attempt(n)
	return AttemptResult{JobID: j.ID, Attempt: n, State: a.State, Won: j.CompletedBy == n}
}

// fail records the attempt's failure and returns the named error the state
// machine routes on.
func (w *Tasks) fail(ctx context.Context, j job.Job, a job.Attempt, f job.Failure, reqID, name string) (AttemptResult, error) {
	if _, err := w.cfg.Engine.FailAttempt(ctx, j.ID, a.Number, f, reqID); err != nil {
		return AttemptResult{}, err
	}
	return AttemptResult{}, &TaskError{Name: name, Message: f.Message}
}

// await waits for the invocation that claimed the attempt to finish, then
// reports the same outcome it did.
func (w *Tasks) await(ctx context.Context, j job.Job, n int) (AttemptResult, error) {
	for {
		a, ok := j.Attempt(n)
		if !ok {
			return AttemptResult{}, job.ErrAttemptNotFound
		}
		if a.State != job.AttemptRunning && a.State != job.AttemptStarting {
			return w.outcomeOf(j, a)
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

func (w *Tasks) outcomeOf(j job.Job, a job.Attempt) (AttemptResult, error) {
	msg := ""
	if a.Error != nil {
		msg = a.Error.Message
	}
	switch a.State {
	case job.AttemptUnknown:
		return AttemptResult{}, &TaskError{Name: ErrNameProviderAmbiguous, Message: msg}
	case job.AttemptFailed:
		name := ErrNameProviderRetryable
		if a.Error != nil {
			switch a.Error.Class {
			case job.ClassNonRetryable:
				name = ErrNameProviderRejected
			case job.ClassContractViolation:
				name = ErrNameContractViolation
			case job.ClassUncertified:
				name = ErrNameProviderUncertified
			}
		}
		return AttemptResult{}, &TaskError{Name: name, Message: msg}
	}
	return w.result(j, a.Number), nil
}
