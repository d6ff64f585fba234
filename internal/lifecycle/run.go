package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// maxRounds bounds Run's decide-and-act loop; each round means another
// writer made progress or an attempt ended.
const maxRounds = 16

// run is Run (trace.go: with the run's span).
func (w *Tasks) run(ctx context.Context, in RunInput) (RunResult, error) {
	var deadline time.Time
	if in.TimeoutSeconds > 0 {
		deadline = w.now().Add(time.Duration(in.TimeoutSeconds) * time.Second)
	}
	j, jt, err := w.load(ctx, in.JobID)
	if err != nil {
		return RunResult{}, err
	}
	ran := false // an attempt ran in this run: the next one gets a run of its own
	avail := &availability{ctx: ctx, owner: j.Owner, breakers: w.cfg.Breakers, refused: map[string]job.Admission{}, tokens: maxTokens(j, jt),
		now: w.now}
	for range maxRounds {
		if j, err = w.markOverdue(ctx, j, jt); err != nil {
			return RunResult{}, err
		}
		pol, certs := w.policy(ctx, j, jt)
		pol.AvailableFunc = avail.available
		if ran {
			// After an attempt, this run only settles whether the job ends;
			// which provider runs next is the next run's to decide, with
			// the certifications and the provider health it reads then.
			pol.CertifiedFunc = func(string) bool { return true }
			pol.AvailableFunc = func(string) job.Admission { return job.Admission{Allowed: true} }
		}
		plan := job.Next(j, pol, w.now())
		if certs.err != nil {
			return RunResult{}, certs.err
		}
		switch plan.Action {
		case job.ActionDone:
			return RunResult{JobID: j.ID, Status: j.Status}, nil
		case job.ActionFinalize:
			j, err = w.cfg.Engine.FailOn(ctx, j, *plan.Failure)
			var finished *job.FinishedError
			switch {
			case errors.As(err, &finished):
				return RunResult{JobID: j.ID, Status: finished.Status}, nil
			case errors.Is(err, job.ErrAttemptOpen):
				continue // an attempt started meanwhile: decide again
			case err != nil:
				return RunResult{}, err
			}
			return RunResult{JobID: j.ID, Status: j.Status}, nil
		case job.ActionWait:
			if plan.Waiting != nil {
				// Every provider left is unavailable: the job records why
				// and until when, and the hold step waits that long.
				if j, err = w.cfg.Engine.WaitOn(ctx, j, *plan.Waiting); errors.Is(err, job.ErrAttemptOpen) {
					continue // an attempt started meanwhile
				} else if err != nil {
					return RunResult{}, err
				}
				return RunResult{}, signal(plan, j)
			}
			if job.Parked(j) {
				return w.park(ctx, j), nil
			}
			a, ok := j.Attempt(plan.Blocker)
			if ok && a.State == job.AttemptRunning && a.Remote == nil && !ran {
				// Another runner holds it (a duplicate delivery of this
				// step): wait for its end, then decide again.
				if j, err = w.await(ctx, j, a.Number, deadline); err != nil {
					return RunResult{}, err
				}
				// That attempt ran in this step: answer as its runner
				// does, and start nothing more.
				ran = true
				continue
			}
			if ok && a.State == job.AttemptUnknown && !ran {
				// Ask its provider about it; a settled attempt frees the
				// job to go on at once.
				var settled bool
				if j, settled, err = w.settle(ctx, j, jt, a); err != nil {
					return RunResult{}, err
				}
				if settled {
					continue
				}
				if job.Parked(j) {
					// Its lost submit's work was found still running.
					return w.park(ctx, j), nil
				}
			}
			return RunResult{}, signal(plan, j)
		}
		if ran || past(w.now(), deadline) {
			return RunResult{}, signal(plan, j)
		}
		var a job.Attempt
		var ok bool
		if j, a, ok, err = w.begin(ctx, j, jt, plan, certs, avail); err != nil {
			return RunResult{}, err
		}
		if !ok {
			continue // someone else moved the job: decide again on what is there now
		}
		ran = true
		if j, err = w.runAttempt(ctx, j, jt, a, certs, avail, deadline); err != nil {
			return RunResult{}, err
		}
	}
	return RunResult{}, fmt.Errorf("%w %s", ErrContention, in.JobID)
}

// maxTokens is the most an attempt of j can use: its rendered request's
// input bound and every output token its type allows (0 when it does not
// render: its attempt fails before any call).
func maxTokens(j job.Job, jt JobType) int {
	req, err := jt.Request(j.Input)
	if err != nil {
		return 0
	}
	b := CostBasisOf(req)
	return job.InputBound(b.RequestBytes) + b.MaxOutputTokens
}

// past reports whether the run's deadline has gone by: the state machine
// has given up on this run, so it must start nothing more.
func past(now, deadline time.Time) bool { return !deadline.IsZero() && !now.Before(deadline) }

// signal is the error a run ends with when the job is not done.
func signal(plan job.Plan, j job.Job) error {
	s, _ := plan.Signal()
	msg := fmt.Sprintf("job %s: next step %s", j.ID, plan.Action)
	if plan.Action == job.ActionWait {
		msg = fmt.Sprintf("job %s: attempt %d is open", j.ID, plan.Blocker)
	}
	return &TaskError{Name: string(s), Message: msg}
}

// markOverdue declares unknown the attempts still running past their
// deadline with nothing watching them (their runner or execution was lost,
// so no timeout fired).
func (w *Tasks) markOverdue(ctx context.Context, j job.Job, jt JobType) (job.Job, error) {
	for _, n := range job.Overdue(j, RunTimeout(jt)+w.cfg.OverdueGrace, w.now()) {
		w.log.WarnContext(ctx, "attempt_overdue", "job_id", j.ID, "attempt", n)
		var err error
		if j, err = w.cfg.Engine.MarkUnknownOn(ctx, j, n, "still running past its timeout with no runner watching"); err != nil {
			return j, err
		}
	}
	return j, nil
}

// begin starts and claims the attempt the plan names — a new one, or one
// that started but was never claimed (its provider was not called yet). ok
// is false when another writer moved the job first; j is then the job as
// it is now. Whether the provider is certified is read before the claim,
// so a store fault leaves nothing claimed that no one will call.
func (w *Tasks) begin(ctx context.Context, j job.Job, jt JobType, plan job.Plan, certs *certified, avail *availability) (job.Job, job.Attempt, bool, error) {
	if a, ok := j.Attempt(plan.Attempt); ok {
		return w.claim(ctx, j, a, certs)
	}
	// The provider's breaker admits the attempt first: refused, the
	// provider is unavailable to this run and the job decides again.
	n := j.AttemptCount + 1
	key := job.AttemptKey(j.ID, n)
	if !avail.admit(plan.Provider, key) {
		return j, job.Attempt{}, false, nil
	}
	spend, err := w.reserve(ctx, j, jt, n, plan.Provider, avail)
	if spend == nil && err != nil {
		w.releaseAdmission(ctx, j.Owner, plan.Provider, key)
		return j, job.Attempt{}, false, ignoreRefusal(err)
	}
	after, a, ok, err := refusedIsMoved(w.cfg.Engine.LaunchSentOn(ctx, j, plan.Provider, w.sending(j, jt), spend))
	if !ok || err != nil {
		w.releaseAdmission(ctx, j.Owner, plan.Provider, key)
		w.cfg.Engine.ReleaseUnlaunched(ctx, j.Owner, spend, n)
	}
	return after, a, ok, err
}

// reserve sets aside what attempt n of a budgeted job may cost on
// provider, before it is launched. A refusal (the owner's budget spent,
// or a provider without a price) is remembered as the provider's for the
// rest of the run, so the job tries another or waits (job.WaitBudget).
// It returns nil and no error for a job that is not budgeted.
func (w *Tasks) reserve(ctx context.Context, j job.Job, jt JobType, n int, prov string, avail *availability) (*job.Spend, error) {
	if j.Reservation == nil {
		return nil, nil
	}
	req, err := jt.Request(j.Input)
	if err != nil {
		return nil, refusal{err}
	}
	spend, err := w.cfg.Engine.ReserveAttempt(ctx, j, n, prov, CostBasisOf(req))
	var over *job.BudgetError
	switch {
	case errors.As(err, &over):
		avail.refused[prov] = job.Admission{Reason: over.Error(), Owner: true, Budget: true, RetryAt: w.now().Add(over.RetryAfter)}
		return nil, refusal{err}
	case errors.Is(err, ErrUnpriced):
		avail.refused[prov] = job.Admission{Reason: err.Error(), Owner: true, Budget: true}
		return nil, refusal{err}
	}
	return spend, err
}

// refusal marks an attempt its owner's budget refused: the run decides
// again, it is no error of the run's.
type refusal struct{ error }

func ignoreRefusal(err error) error {
	if _, ok := err.(refusal); ok {
		return nil
	}
	return err
}

// releaseAdmission gives back what admitting an attempt that was never
// launched took of its provider: a bulkhead slot counted from admission,
// a probe slot of a half-open breaker (review L3). It writes only when
// the admission took something.
func (w *Tasks) releaseAdmission(ctx context.Context, owner, provider, key string) {
	if w.cfg.Breakers != nil {
		w.cfg.Breakers.Observe(ctx, provider, job.HealthEvent{Kind: job.HealthReleased, Attempt: key, Owner: owner})
	}
}

// refusedIsMoved reads a launch the domain refused (an attempt became
// blocking, the job finished) as the job having moved: decide again.
func refusedIsMoved(j job.Job, a job.Attempt, launched bool, err error) (job.Job, job.Attempt, bool, error) {
	var blocked *job.BlockedError
	var finished *job.FinishedError
	if errors.As(err, &blocked) || errors.As(err, &finished) {
		return j, job.Attempt{}, false, nil
	}
	return j, a, launched, err
}

// await waits until attempt n leaves running (its runner recorded an end,
// or a hold declared it unknown), the run's deadline passes, or ctx ends,
// and returns the job as it is then.
func (w *Tasks) await(ctx context.Context, j job.Job, n int, deadline time.Time) (job.Job, error) {
	for !past(w.now(), deadline) {
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-w.cfg.AfterFunc(w.cfg.PollInterval):
		}
		var err error
		if j, err = w.cfg.Engine.Get(ctx, j.ID); err != nil {
			return j, err
		}
		if a, ok := j.Attempt(n); !ok || a.State != job.AttemptRunning {
			return j, nil
		}
	}
	return j, nil
}

// runAttempt runs attempt a and, if the job type hedges and a stays silent
// for its hedge delay, one more attempt on the next certified provider
// beside it. Both may answer; the job's compare-and-swap lets exactly one
// win, and the run waits for both so the loser is recorded as discarded.
// It returns the newest job it saw; only store errors are errors: a
// provider's failure is recorded on its attempt.
func (w *Tasks) runAttempt(ctx context.Context, j job.Job, jt JobType, a job.Attempt, certs *certified, avail *availability, deadline time.Time) (job.Job, error) {
	type ended struct {
		j   job.Job
		err error
	}
	done := make(chan ended, 2)
	sendBy := avail.sendBy(a.Provider, a.IdempotencyKey())
	go func() { j, err := w.call(ctx, j, jt, a, certs, sendBy); done <- ended{j, err} }()
	running := 1
	var hedge <-chan time.Time
	if d, ok := jt.HedgeAfter(); ok {
		hedge = w.cfg.AfterFunc(d)
	}
	newest := j
	var first error
	for running > 0 {
		select {
		case e := <-done:
			running--
			hedge = nil // an answer came: no hedge
			if e.err != nil && first == nil {
				first = e.err
			}
			if e.j.Revision > newest.Revision {
				newest = e.j
			}
		case <-hedge:
			hedge = nil
			hj, h, hc, ok, err := w.startHedge(ctx, j.ID, jt, a.Number, avail, deadline)
			if err != nil {
				// A hedge only speeds a job up: without one, the attempt
				// it would have raced still runs.
				w.log.WarnContext(ctx, "hedge_skipped", "job_id", j.ID, "attempt", a.Number, "error", err.Error())
			}
			if ok {
				running++
				hSendBy := avail.sendBy(h.Provider, h.IdempotencyKey())
				go func() { j, err := w.call(ctx, hj, jt, h, hc, hSendBy); done <- ended{j, err} }()
			}
		}
	}
	return newest, first
}

// claim claims attempt a, which started but was never claimed, once its
// provider's certification is known.
func (w *Tasks) claim(ctx context.Context, j job.Job, a job.Attempt, certs *certified) (job.Job, job.Attempt, bool, error) {
	if job.NeedsCertification(j, a.Provider) {
		if certs.ask(a.Provider); certs.err != nil {
			return j, job.Attempt{}, false, certs.err
		}
	}
	j, claimed, err := w.cfg.Engine.MarkRunningOn(ctx, j, a.Number)
	a, _ = j.Attempt(a.Number)
	return j, a, claimed, err
}

// startHedge decides whether attempt n is hedged now (job.NextHedge) and
// starts and claims the hedge, returning the certifications it read for
// the hedge's call.
func (w *Tasks) startHedge(ctx context.Context, id string, jt JobType, n int, avail *availability, deadline time.Time) (job.Job, job.Attempt, *certified, bool, error) {
	if past(w.now(), deadline) {
		return job.Job{}, job.Attempt{}, nil, false, nil
	}
	j, err := w.cfg.Engine.Get(ctx, id)
	if err != nil {
		return j, job.Attempt{}, nil, false, err
	}
	pol, certs := w.policy(ctx, j, jt)
	pol.AvailableFunc = avail.available
	plan, ok := job.NextHedge(j, n, pol)
	if certs.err != nil || !ok {
		return j, job.Attempt{}, nil, false, certs.err
	}
	var a job.Attempt
	if b, ok := j.Attempt(plan.Attempt); ok {
		j, a, ok, err = w.claim(ctx, j, b, certs)
		return j, a, certs, ok, err
	}
	next := j.AttemptCount + 1
	key := job.AttemptKey(j.ID, next)
	if !avail.admit(plan.Provider, key) {
		return j, job.Attempt{}, nil, false, nil // no hedge today: the attempt it would race runs on
	}
	owner := j.Owner
	spend, err := w.reserve(ctx, j, jt, next, plan.Provider, avail)
	if spend == nil && err != nil {
		w.releaseAdmission(ctx, owner, plan.Provider, key)
		return j, job.Attempt{}, nil, false, ignoreRefusal(err) // the budget takes no hedge
	}
	j, a, ok, err = refusedIsMoved(w.cfg.Engine.LaunchHedgeSentOn(ctx, j, plan.Provider, w.sending(j, jt), spend))
	if !ok || err != nil {
		w.releaseAdmission(ctx, owner, plan.Provider, key)
		w.cfg.Engine.ReleaseUnlaunched(ctx, owner, spend, next)
	}
	return j, a, certs, ok, err
}

// callAttempt is call (trace.go: the attempt's span) without its span.
func (w *Tasks) callAttempt(ctx context.Context, j job.Job, jt JobType, a job.Attempt, certs *certified, sendBy time.Time) (job.Job, error) {
	if job.NeedsCertification(j, a.Provider) {
		// The gate, again at call time: never call an unproven fallback.
		ok := certs.ask(a.Provider)
		if certs.err != nil {
			return j, certs.err
		}
		if !ok {
			return w.fail(ctx, j, a, job.Failure{Class: job.ClassUncertified,
				Message: fmt.Sprintf("provider %s holds no certification for contract %s", a.Provider, jt.ContractVersion())}, job.Call{})
		}
	}
	p, ok := w.cfg.Providers.Get(a.Provider)
	if !ok {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "provider " + a.Provider + " is not configured"}, job.Call{})
	}
	req, err := attemptRequest(j, jt, a)
	if err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassNonRetryable, Message: "render prompt: " + err.Error()}, job.Call{})
	}
	run, mode := provider.ModeFor(p, j.Tier)
	if ap, ok := p.(provider.Async); ok {
		return w.submit(ctx, j, jt, a, ap, req, run)
	}
	if b, ok := p.(provider.Batcher); ok && mode == provider.ModeBatch {
		// A line of the provider's next batch: nothing is sent now.
		return w.queue(ctx, j, a, b, run)
	}
	if run != job.TierNow {
		req.Tier = string(run)
	}
	pol := w.healthPolicy(a.Provider)
	if !sendBy.IsZero() && w.now().After(sendBy) {
		// Sent now, it could reach the provider after its admission left
		// the rate's window: given back unsent, asked again (forgiven as
		// any rate-limited attempt).
		w.log.WarnContext(ctx, "rate_send_late", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider,
			"late_ms", w.now().Sub(sendBy).Milliseconds())
		w.releaseAdmission(ctx, j.Owner, a.Provider, a.IdempotencyKey())
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassRateLimited,
			Message: fmt.Sprintf("not sent: admitted under %s's declared rate, but not ready to send within %s of its admission", a.Provider, job.RateMargin)}, job.Call{})
	}
	callCtx, cancel := context.WithTimeout(ctx, w.callTimeout(p, jt, pol, mode))
	defer cancel()
	// A call still running past its provider's own slow bound counts
	// against the provider at once, not when it ends.
	ended := make(chan struct{})
	slow := w.cfg.SlowAfterFunc(pol.SlowCallAfter)
	go func() {
		select {
		case <-slow:
			w.log.WarnContext(ctx, "provider_slow", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider,
				"slow_call_after_ms", pol.SlowCallAfter.Milliseconds())
			w.observe(ctx, j.Owner, a, job.HealthSlow)
		case <-ended:
		}
	}()
	start := w.now()
	var resp provider.Response
	var end streamEnd
	sp, streamed := w.streamer(j, p)
	callCtx, callSpan := startCall(callCtx, w.cfg.Engine.Tracer(), j, a, req)
	if streamed {
		resp, end, err = w.stream(callCtx, j, jt, a, sp, req)
	} else {
		resp, err = p.Call(callCtx, req)
	}
	callSpan.End(resp, err)
	close(ended)
	latency := w.now().Sub(start)
	attrs := []any{"job_id", j.ID, "attempt", a.Number, "provider", a.Provider, "latency_ms", latency.Milliseconds(), "ok", err == nil}
	if streamed {
		attrs = append(attrs, "streamed", true, "pieces", end.pieces)
	}
	w.log.InfoContext(ctx, "provider_called", attrs...)
	if end.cancelled {
		return w.cancelledCall(ctx, j, a, req, resp, err, end, latency)
	}
	w.observeCall(ctx, j.Owner, a, err)
	if err != nil {
		return w.callFailed(ctx, j, a, err, job.Call{Usage: &job.Usage{Latency: latency}})
	}
	// The call is paid for however its answer fares.
	return w.answered(ctx, j, jt, a, resp, job.Call{ProviderRequestID: resp.ProviderRequestID, Usage: usageOf(resp, latency)})
}

// observeCall records what a call's end says of its provider's health.
func (w *Tasks) observeCall(ctx context.Context, owner string, a job.Attempt, err error) {
	if w.cfg.Breakers == nil {
		return
	}
	kind := healthKind(err)
	spanOf(ctx).Event(semconv.EventObserved, semconv.Provider, a.Provider, semconv.Outcome, string(kind))
	e := job.HealthEvent{Kind: kind, Attempt: a.IdempotencyKey(), Owner: owner}
	var ce *provider.CallError
	if kind == job.HealthRateLimited && errors.As(err, &ce) {
		e.RetryAfter = ce.RetryAfter
	}
	w.cfg.Breakers.Observe(ctx, a.Provider, e)
}

// callFailed records a provider's failure of attempt a, classed as the
// provider's error says (an ambiguous one makes it unknown), with what its
// answer reported it was billed: an answer onejob cannot use is paid for
// (job.SpendOf), and its status says it was an answer.
func (w *Tasks) callFailed(ctx context.Context, j job.Job, a job.Attempt, err error, c job.Call) (job.Job, error) {
	f := job.Failure{Class: failureClass(provider.Classify(err)), Message: err.Error()}
	if healthKind(err) == job.HealthRateLimited {
		// Not acted on: the job waits for the provider's pause and asks
		// it again (job.ClassRateLimited).
		f.Class = job.ClassRateLimited
	}
	var ce *provider.CallError
	if errors.As(err, &ce) {
		c.ProviderRequestID, f.ProviderStatus = ce.ProviderRequestID, ce.Status
		if u := ce.Usage; u != nil {
			billed := job.Usage{}
			if c.Usage != nil {
				billed = *c.Usage
			}
			billed.InputTokens, billed.OutputTokens = u.InputTokens, u.OutputTokens
			c.Usage = &billed
		}
	}
	return w.fail(ctx, j, a, f, c)
}

// answered checks a provider's answer for attempt a against the job type's
// contract and completes the job with it by compare-and-swap.
func (w *Tasks) answered(ctx context.Context, j job.Job, jt JobType, a job.Attempt, resp provider.Response, c job.Call) (job.Job, error) {
	if err := jt.CheckOutput(resp.Output); err != nil {
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassContractViolation, Message: err.Error()}, c)
	}
	done, err := w.cfg.Engine.CompleteOn(ctx, j, a.Number, resp.Output, c)
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		// The answer cannot be kept with its job: it breaks the contract
		// as surely as a wrong shape would (fall back if a provider is left).
		return w.fail(ctx, j, a, job.Failure{Class: job.ClassContractViolation,
			Message: fmt.Sprintf("the result (%d bytes) is too large to store with its job: %v", len(resp.Output), tooLarge)}, c)
	}
	return done.Job, err
}
