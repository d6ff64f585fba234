package lifecycle

import (
	"context"
	"encoding/json"

	"github.com/onejob/onejob/internal/job"
)

// The writes that end a job or an attempt: completion by compare-and-swap,
// failure, cancellation and the settlements of unknown attempts.

// Completion is what a finished attempt's result did.
type Completion struct {
	Won bool
	// Lost is set when the result was discarded.
	Lost *job.LostRace
	Job  job.Job
}

// Complete offers attempt n's result. It wins by compare-and-swap on the job
// version the attempt read; otherwise it is discarded and logged as a lost
// race. A redelivered winning result is reported as won again.
func (e *Engine) Complete(ctx context.Context, id string, n int, result json.RawMessage, providerRequestID string) (Completion, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return Completion{}, err
	}
	return e.CompleteOn(ctx, j, n, result, job.Call{ProviderRequestID: providerRequestID})
}

// CompleteOn is Complete deciding on j, with what the call reported.
func (e *Engine) CompleteOn(ctx context.Context, j job.Job, n int, result json.RawMessage, c job.Call) (Completion, error) {
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) {
		return job.DecideCallCompleted(j, n, result, c, e.now())
	})
	if err != nil {
		return Completion{Job: j}, err
	}
	return e.completion(ctx, t, j, n), nil
}

func (e *Engine) completion(ctx context.Context, t job.Transition, j job.Job, n int) Completion {
	lost, isLost := t.LostRace()
	if !isLost {
		a, _ := j.Attempt(n)
		switch {
		case !t.Noop():
			e.log.InfoContext(ctx, "attempt_won", "job_id", j.ID, "attempt", n, "provider", a.Provider, "version", j.Version)
		case a.Resolution != nil:
			// The attempt's result is the job's already, settled out of
			// band (the reconciler found it first): this copy is dropped.
			e.log.InfoContext(ctx, "late_result_discarded", "job_id", j.ID, "attempt", n, "provider", a.Provider,
				"attempt_state", string(a.State), "settled_by", a.Resolution.By)
		}
		return Completion{Won: j.CompletedBy == n, Job: j}
	}
	a, _ := j.Attempt(n)
	if t.Noop() {
		e.log.InfoContext(ctx, "late_result_discarded", "job_id", j.ID, "attempt", n, "provider", a.Provider,
			"attempt_state", string(a.State))
		return Completion{Lost: &lost, Job: j}
	}
	e.log.WarnContext(ctx, "race_lost", "job_id", j.ID, "attempt", n, "losing_attempt", n,
		"winning_attempt", lost.Winner, "job_status", string(lost.Status), "provider", a.Provider)
	e.events.RaceLost(ctx, lost)
	e.events.AttemptDiscarded(ctx, j, a)
	return Completion{Lost: &lost, Job: j}
}

// Fail writes the job's final failure.
func (e *Engine) Fail(ctx context.Context, id string, f job.Failure) (job.Job, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return j, err
	}
	return e.FailOn(ctx, j, f)
}

// FailOn is Fail deciding on j.
func (e *Engine) FailOn(ctx context.Context, j job.Job, f job.Failure) (job.Job, error) {
	id := j.ID
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideFail(j, f, e.now()) })
	if err == nil && !t.Noop() {
		e.log.InfoContext(ctx, "job_failed", "job_id", id, "class", f.Class, "error", f.Message)
	}
	return j, err
}

// Cancel cancels a job without an outcome; cancelling twice is a no-op.
func (e *Engine) Cancel(ctx context.Context, id string) (job.Job, error) {
	return e.CancelBy(ctx, id, job.Cancellation{})
}

// CancelBy is Cancel recording who cancelled and why.
func (e *Engine) CancelBy(ctx context.Context, id string, c job.Cancellation) (job.Job, error) {
	t, j, err := e.run(ctx, id, func(j job.Job) (job.Transition, error) { return job.DecideCancelBy(j, c, e.now()) })
	if err == nil && !t.Noop() {
		e.log.InfoContext(ctx, "job_cancelled", "job_id", id, "by", c.By, "reason", c.Reason)
	}
	return j, err
}

// Resolve settles an unknown attempt out of band (job.DecideResolve).
func (e *Engine) Resolve(ctx context.Context, id string, n int, r job.Resolution) (job.Job, error) {
	j, err := e.store.Get(ctx, id)
	if err != nil {
		return j, err
	}
	return e.ResolveOn(ctx, j, n, r)
}

// ResolveOn is Resolve deciding on j. A resolution that lost to a
// concurrent one is decided again on the job that won, and refused there.
func (e *Engine) ResolveOn(ctx context.Context, j job.Job, n int, r job.Resolution) (job.Job, error) {
	id := j.ID
	before, _ := j.Attempt(n)
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideResolve(j, n, r, e.now()) })
	if err == nil && !t.Noop() {
		e.log.InfoContext(ctx, "attempt_resolved", "job_id", id, "attempt", n, "outcome", string(r.Outcome),
			"reason", r.Reason, "by", r.By)
		a, _ := j.Attempt(n)
		e.events.AttemptSettled(ctx, j, a, e.now().Sub(before.UnknownSince))
	}
	return j, err
}

// SettleOn writes the reconciler's verdict on unknown attempt n, deciding
// on j (job.DecideSettle). A verdict that finds the attempt no longer
// unknown — it answered live, or an operator resolved it — is discarded
// and logged; one whose result loses to another attempt's is discarded as
// a lost race, like a late answer.
func (e *Engine) SettleOn(ctx context.Context, j job.Job, n int, v job.Verdict, result json.RawMessage, c job.Call) (job.Job, error) {
	before, _ := j.Attempt(n)
	t, j, err := e.runOn(ctx, j, func(j job.Job) (job.Transition, error) { return job.DecideSettle(j, n, v, result, c, e.now()) })
	if err != nil {
		return j, err
	}
	a, _ := j.Attempt(n)
	if t.Noop() {
		e.log.InfoContext(ctx, "settlement_discarded", "job_id", j.ID, "attempt", n, "provider", a.Provider,
			"attempt_state", string(a.State), "evidence", v.Evidence)
		return j, nil
	}
	if _, lost := t.LostRace(); lost {
		e.completion(ctx, t, j, n)
		return j, nil
	}
	e.log.InfoContext(ctx, "attempt_settled", "job_id", j.ID, "attempt", n, "provider", a.Provider, "outcome", string(a.State),
		"by", job.Reconciler, "evidence", v.Evidence, "unknown_for_ms", e.now().Sub(before.UnknownSince).Milliseconds())
	e.events.AttemptSettled(ctx, j, a, e.now().Sub(before.UnknownSince))
	if t.Kind() == job.KindComplete {
		e.completion(ctx, t, j, n)
	}
	return j, nil
}
