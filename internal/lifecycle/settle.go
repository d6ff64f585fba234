package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// The reconciler: a run that finds its job blocked on an unknown attempt
// asks the attempt's provider about that same attempt, with the strongest
// evidence its API offers (provider.Settler: a webhook answers a repeat of
// the attempt's Idempotency-Key with its first answer or 409; OpenAI finds a
// stored completion by the attempt's metadata). Package job decides what
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
func (w *Tasks) settle(ctx context.Context, j job.Job, jt JobType, a job.Attempt) (_ job.Job, settled bool, _ error) {
	pol := w.healthPolicy(a.Provider)
	sp := job.SettlePolicy{MaxProcessingTime: pol.MaxProcessingTime, AtDeadline: jt.SettleAtDeadline(), DeadlineGrace: job.DefaultDeadlineGrace}
	ev, detail, refusal := job.EvidenceNone, "its API offers no way to ask about an earlier request", job.Class("")
	var answer provider.Response
	p, configured := w.cfg.Providers.Get(a.Provider)
	if settler, ok := p.(provider.Settler); configured && ok {
		req, err := attemptRequest(j, jt, a)
		if err != nil {
			return j, false, nil // its prompt no longer renders: an operator's
		}
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
			refusal = failureClass(provider.Classify(s.Err))
		}
	}
	v := job.ReadEvidence(a, ev, detail, refusal, sp, w.now())
	if v.Outcome == "" {
		w.log.InfoContext(ctx, "settle_pending", "job_id", j.ID, "attempt", a.Number, "provider", a.Provider, "evidence", v.Evidence)
		return j, false, nil
	}
	var result json.RawMessage
	var call job.Call
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
	w.observe(ctx, a, job.HealthReleased)
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
	}
	return job.EvidenceNone
}
