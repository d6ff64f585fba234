package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// The reconciler: a run that finds its job blocked on an unknown attempt
// asks the attempt's provider about that same attempt, with the strongest
// evidence its API offers (provider.Settler: a webhook answers its lookup,
// or a re-send of the attempt's Idempotency-Key, with its first answer or
// 409; OpenAI finds a stored completion by the attempt's metadata). An
// executing re-send goes only while the first send is certainly within the
// provider's key retention (job.MayResend) and only when the request
// renders to the digest the attempt recorded (job.SameSentRequest); a
// provider an operator forced open is never asked. Package job decides what
// the evidence proves (job.ReadEvidence) and writes it as the attempt's
// answer would be written (job.DecideSettle). A provider that cannot be
// asked (Anthropic Messages, Bedrock Converse) leaves the attempt to the
// job type's deadline rule, or to an operator. It never starts a new
// attempt while one is unknown: the state machine's waits (Hold, Wait,
// Run: 1 min, 15 min, 2 h, then every 8 h) are its back-off.

// settle asks attempt a's provider about it and writes what that proves.
// settled reports a write that ended the attempt (the job may go on at
// once); nothing proven, or a provider that could not answer this time,
// is not an error: the job waits and a later run asks again.
func (w *Tasks) settle(ctx context.Context, j job.Job, jt JobType, a job.Attempt) (_ job.Job, settled bool, err error) {
	// The reconciler's span, in the job's trace however late it comes.
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanSettle, j)
	span.Attempt(a)
	defer func() {
		if b, ok := j.Attempt(a.Number); ok {
			span.Attempt(b)
		}
		span.End(err)
	}()
	j, settled, err = w.settleOn(ctx, j, jt, a)
	return j, settled, err
}

func (w *Tasks) settleOn(ctx context.Context, j job.Job, jt JobType, a job.Attempt) (_ job.Job, settled bool, _ error) {
	pol := w.healthPolicy(a.Provider)
	sp := job.SettlePolicy{MaxProcessingTime: pol.MaxProcessingTime, AtDeadline: jt.SettleAtDeadline(), DeadlineGrace: job.DefaultDeadlineGrace}
	ev, detail, refusal := job.EvidenceNone, "its API offers no way to ask about an earlier request", job.Class("")
	var answer provider.Response
	p, configured := w.cfg.Providers.Get(a.Provider)
	if settler, ok := p.(provider.Settler); configured && ok {
		if w.cfg.Breakers.ForcedOpen(ctx, a.Provider) {
			// An operator stopped all traffic to it: no question, no re-send
			// (ask again on a later run).
			w.log.InfoContext(ctx, "settle_skipped_forced_open", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider)
			return j, false, nil
		}
		req, err := attemptRequest(j, jt, a)
		if err != nil {
			return j, false, nil // its prompt no longer renders: an operator's
		}
		ask := true
		if km, ok := p.(provider.KeyMemory); ok && km.SettleExecutes() {
			sp.KeyRetention = km.KeyRetention()
			switch {
			case !job.SameSentRequest(a, requestDigest(j, jt, a)):
				ask, detail = false, "no re-send: the request rendered now is not the one the attempt sent (its job type changed, or the attempt recorded no digest)"
			case !job.MayResend(a, sp.KeyRetention, w.now()):
				ask, detail = false, fmt.Sprintf("no re-send: the first send is no longer certainly within the provider's key retention (%s less %s)", sp.KeyRetention, job.ResendMarginOf(sp.KeyRetention))
			}
		} else if ok {
			sp.KeyRetention = km.KeyRetention()
		}
		if ask {
			sctx, cancel := context.WithTimeout(ctx, w.cfg.SettleTimeout)
			s, err := settler.Settle(sctx, req)
			cancel()
			if err != nil {
				// No answer this time: never settle on the clock a provider
				// that can be asked.
				w.log.InfoContext(ctx, "settle_unanswered", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider, "error", err.Error())
				return j, false, nil
			}
			ev, detail, answer = evidenceOf(s.Evidence), s.Detail, s.Response
			if s.Err != nil {
				refusal = settledRefusal(provider.Classify(s.Err))
			}
			if s.WorkID != "" && a.Remote == nil {
				// A lost submit's work, found still running: recorded as
				// the submit's answer would have been, so that it is asked
				// about by id (polls) and its end applied as any work's.
				if j, err = w.cfg.Engine.SubmittedOn(ctx, j, a.Number,
					job.Remote{ID: s.WorkID, Status: s.WorkStatus, Tier: j.Tier.OrNow(), Found: true}, w.remotePolicy(a.Provider)); err != nil {
					return j, false, err
				}
			}
		}
	}
	v := job.ReadEvidence(a, ev, detail, refusal, sp, w.now())
	if v.Outcome == "" {
		w.log.InfoContext(ctx, "settle_pending", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider, "evidence", v.Evidence)
		return j, false, nil
	}
	var result json.RawMessage
	var call job.Call
	if v.Outcome == job.AttemptSucceeded && ev == job.EvidenceExecuted {
		call.ProviderRequestID = answer.ProviderRequestID
	}
	if v.Outcome == job.AttemptSucceeded {
		call = job.Call{ProviderRequestID: answer.ProviderRequestID, Usage: usageOf(answer, 0)}
		if err := jt.CheckOutput(answer.Output); err != nil {
			// The answer found breaks the contract, as a live one would.
			v = job.Verdict{Outcome: job.AttemptFailed, Evidence: v.Evidence,
				Failure: &job.Failure{Class: job.ClassContractViolation, Message: err.Error()}}
		} else {
			result = answer.Output
		}
	}
	after, err := w.cfg.Engine.SettleOn(ctx, j, a.Number, v, result, call)
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		v = job.Verdict{Outcome: job.AttemptFailed, Evidence: v.Evidence, Failure: &job.Failure{Class: job.ClassContractViolation,
			Message: fmt.Sprintf("the result found (%d bytes) is too large to store with its job: %v", len(result), tooLarge)}}
		after, err = w.cfg.Engine.SettleOn(ctx, j, a.Number, v, nil, call)
	}
	if err != nil {
		return j, false, err
	}
	w.observe(ctx, j.Owner, a, job.HealthReleased)
	s, _ := after.Attempt(a.Number)
	return after, s.State != job.AttemptUnknown, nil
}

// evidenceOf is the domain's name for a provider's evidence.
func evidenceOf(e provider.Evidence) job.Evidence {
	switch e {
	case provider.EvidenceAnswered:
		return job.EvidenceAnswered
	case provider.EvidenceInProgress:
		return job.EvidenceInProgress
	case provider.EvidenceAbsent:
		return job.EvidenceAbsent
	case provider.EvidenceRefused:
		return job.EvidenceRefused
	case provider.EvidenceExecuted:
		return job.EvidenceExecuted
	}
	return job.EvidenceNone
}

// settledRefusal is the failure class of a refusal found by settling. A
// 402 (billing, spent quota) never moves the job to another provider by
// itself: it is the account's state, and the job fails as non-retryable
// (an operator may retry it), never falling back on its own.
func settledRefusal(c provider.Class) job.Class {
	if c == provider.ClassExhausted {
		return job.ClassNonRetryable
	}
	return failureClass(c)
}

// ForcedOpen reports whether an operator forced the provider open: from
// its health, or, when the health cannot be read, from the last copy this
// process saw, whatever its age (an unreadable table never lifts an
// override).
func (b *Breakers) ForcedOpen(ctx context.Context, provider string) bool {
	if b == nil {
		return false
	}
	h, err := b.read(ctx, provider, false)
	if err != nil {
		b.mu.Lock()
		c, ok := b.cache[provider]
		b.mu.Unlock()
		if !ok {
			return false
		}
		h = c.h
	}
	return h.Forced != nil && h.Forced.State == job.ProviderOpen
}
