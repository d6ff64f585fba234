package job

import (
	"encoding/json"
	"fmt"
	"time"
)

// An unknown attempt is settled automatically by asking its provider about
// the same attempt again — never by starting another while it is unknown.
// What the provider can say depends on its API (the adapters report it);
// what that evidence proves is decided here (ReadEvidence), and the verdict
// is written like any answer (DecideSettle): a result only by
// compare-and-swap, so a live answer and the reconciler may race and
// exactly one applies.

// Evidence is what a provider said when asked again about an attempt.
type Evidence string

// Kinds of evidence.
const (
	// EvidenceAnswered: the provider gave the attempt's own answer again.
	EvidenceAnswered Evidence = "answered"
	// EvidenceInProgress: it is still working on the attempt.
	EvidenceInProgress Evidence = "in_progress"
	// EvidenceAbsent: its lookup has no trace of the attempt.
	EvidenceAbsent Evidence = "absent"
	// EvidenceRefused: its answer to the attempt was a refusal.
	EvidenceRefused Evidence = "refused"
	// EvidenceNone: its API offers no way to ask (or asking failed this
	// time): only the clock speaks.
	EvidenceNone Evidence = "none"
	// EvidenceExecuted: an executing re-send was answered without the
	// replay mark: the receiver executed the request now.
	EvidenceExecuted Evidence = "executed"
)

// ResendMargin is taken off a provider's key retention before an
// executing re-send: clocks disagree and requests sit in queues, so the
// first send must be certainly within the receiver's memory. A retention
// shorter than five margins loses a fifth of itself instead
// (ResendMarginOf).
const ResendMargin = 2 * time.Minute

// ResendMarginOf is the margin taken off key retention r.
func ResendMarginOf(r time.Duration) time.Duration { return min(ResendMargin, r/5) }

// SentRequestVersion is the version of the webhook provider contract an
// attempt's request digest was made under (Attempt.RequestDigest).
const SentRequestVersion = "2"

// WithSent records on the attempt a launch transition starts the key its
// provider calls carry and the digest of what it is about to send
// (Attempt.ProviderKey, Attempt.RequestDigest), in the launch's own write.
func (t Transition) WithSent(key, digest string) Transition {
	if a, ok := t.after.Attempt(t.attempt); ok && t.kind == KindStartAttempt {
		a.ProviderKey, a.RequestDigest = key, digest
		t.after = t.after.withAttempt(a)
	}
	return t
}

// WithSpend records on the attempt a launch transition starts what it set
// aside from its owner's budget (nil: not budgeted), in the launch's write.
func (t Transition) WithSpend(s *Spend) Transition {
	if a, ok := t.after.Attempt(t.attempt); ok && t.kind == KindStartAttempt && s != nil {
		a.Spend = s
		t.after = t.after.withAttempt(a)
	}
	return t
}

// Sent is the attempt a launch transition starts, as it will be written.
func (t Transition) Sent() (Attempt, bool) { return t.after.Attempt(t.attempt) }

// SameSentRequest reports whether a request rendered now (its digest) is the
// one attempt a sent: only then may it be re-sent.
func SameSentRequest(a Attempt, digest string) bool {
	return a.RequestDigest != "" && a.RequestDigest == digest
}

// MayResend reports whether an executing re-send of attempt a (a webhook
// without the lookup) may happen at now: only while the first send is
// certainly within the receiver's key retention. A receiver remembers a
// key at least KeyRetention after its first answer, which comes after the
// attempt was sent, so StartedAt + KeyRetention - ResendMargin is the last
// moment a re-send is certain to be answered from memory. Past it, no
// executing re-send ever: the attempt waits for an operator, or for the
// deadline rule of a type that opted in.
func MayResend(a Attempt, keyRetention time.Duration, now time.Time) bool {
	return now.Before(resendUntil(a, keyRetention))
}

func resendUntil(a Attempt, keyRetention time.Duration) time.Time {
	return a.StartedAt.Add(keyRetention - ResendMarginOf(keyRetention))
}

// SettlePolicy is what settling an attempt needs beyond the evidence.
type SettlePolicy struct {
	// MaxProcessingTime is the longest the provider may work on a request
	// (HealthPolicy.MaxProcessingTime).
	MaxProcessingTime time.Duration
	// AtDeadline: the job type accepts settling an attempt its provider
	// cannot be asked about as failed once MaxProcessingTime plus
	// DeadlineGrace have passed since it was sent, knowing a second charge
	// is possible. A type that declares side effects cannot.
	AtDeadline    bool
	DeadlineGrace time.Duration
	// KeyRetention is how long the provider remembers an idempotency key
	// after its first answer (webhooks; zero for others).
	KeyRetention time.Duration
}

// DefaultDeadlineGrace is added to a provider's max processing time before
// an attempt it cannot be asked about is settled at the deadline.
const DefaultDeadlineGrace = 5 * time.Minute

// Verdict is what the evidence proves about an unknown attempt.
type Verdict struct {
	// Outcome is succeeded or failed; empty means nothing is proven yet:
	// keep waiting (and ask again later).
	Outcome AttemptState
	// Failure is why it failed, for failed.
	Failure *Failure
	// Evidence is the record of what proved it (or why nothing did).
	Evidence string
}

// ReadEvidence decides what the provider's evidence about attempt a
// proves at now. detail is the provider's own account (the adapter's
// Settlement.Detail, or a refusal's message).
func ReadEvidence(a Attempt, e Evidence, detail string, refusal Class, p SettlePolicy, now time.Time) Verdict {
	processed := a.StartedAt.Add(p.MaxProcessingTime)
	switch e {
	case EvidenceAnswered:
		return Verdict{Outcome: AttemptSucceeded, Evidence: detail}
	case EvidenceExecuted:
		// The receiver executed the re-send now: the attempt's answer only
		// if it certainly still remembered the key (it would have replayed
		// an earlier execution), so the first send never ran. Outside the
		// window it may be a second execution: nothing is settled, an
		// operator looks.
		if p.KeyRetention <= 0 || !MayResend(a, p.KeyRetention, now) {
			return Verdict{Evidence: detail + fmt.Sprintf(" — outside the key retention window (%s after it was sent, retention %s less %s): "+
				"it may be a second execution, settles nothing; an operator resolves it", now.Sub(a.StartedAt).Round(time.Second), p.KeyRetention, ResendMarginOf(p.KeyRetention))}
		}
		return Verdict{Outcome: AttemptSucceeded, Evidence: detail + " inside the key retention window: the first send never executed, this is its only execution"}
	case EvidenceRefused:
		if refusal == "" || refusal == ClassAmbiguous {
			refusal = ClassNonRetryable
		}
		return Verdict{Outcome: AttemptFailed, Failure: &Failure{Class: refusal, Message: "asked again, the provider refused it: " + detail},
			Evidence: detail}
	case EvidenceAbsent:
		if now.Before(processed) {
			return Verdict{Evidence: detail + fmt.Sprintf(" (before its max processing time, %s, has passed: proves nothing yet)", p.MaxProcessingTime)}
		}
		if p.KeyRetention > 0 && !MayResend(a, p.KeyRetention, now) {
			// A receiver may have forgotten a key it executed: past its
			// retention, "no trace" proves nothing.
			return Verdict{Evidence: detail + fmt.Sprintf(" (past its key retention, %s less %s: the receiver may have forgotten it; proves nothing)", p.KeyRetention, ResendMarginOf(p.KeyRetention))}
		}
		msg := fmt.Sprintf("the provider has no trace of it %s after it was sent, past its max processing time (%s): it produced nothing; %s",
			now.Sub(a.StartedAt).Round(time.Second), p.MaxProcessingTime, detail)
		return Verdict{Outcome: AttemptFailed, Failure: &Failure{Class: ClassSettled, Message: msg}, Evidence: msg}
	case EvidenceNone:
		deadline := processed.Add(p.DeadlineGrace)
		if !p.AtDeadline || now.Before(deadline) {
			return Verdict{Evidence: detail}
		}
		msg := fmt.Sprintf("settled at the deadline: %s (the provider's max processing time plus %s) passed with no answer and no way to ask it; "+
			"the job type accepts that a second charge is possible", now.Sub(a.StartedAt).Round(time.Second), p.DeadlineGrace)
		return Verdict{Outcome: AttemptFailed, Failure: &Failure{Class: ClassSettled, Message: msg}, Evidence: msg}
	}
	return Verdict{Evidence: detail} // in progress
}

// DecideSettle writes the reconciler's verdict on unknown attempt n, as
// the attempt's own answer would be: a result completes the job by
// compare-and-swap on the version the attempt read (and loses the race,
// discarded, if another attempt or a resolution got there first); a
// failure ends the attempt. The attempt records who settled it
// (Reconciler), the evidence and when. An attempt no longer unknown — it
// answered live, or an operator resolved it meanwhile — is left as it is:
// the reconciler's verdict is discarded (a no-op the caller logs).
func DecideSettle(j Job, n int, v Verdict, result json.RawMessage, c Call, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.State != AttemptUnknown || v.Outcome == "" {
		return noop(j, KindAttempt, n), nil
	}
	by := &Resolved{Outcome: v.Outcome, By: Reconciler, Reason: v.Evidence, At: now.UTC()}
	switch v.Outcome {
	case AttemptSucceeded:
		return complete(j, a, result, change{call: c, note: "settled", by: by}, now)
	case AttemptFailed:
		if v.Failure == nil {
			return Transition{}, fmt.Errorf("%w: a failed verdict needs its failure", ErrInvalidTransition)
		}
		return attemptTo(j, a, AttemptFailed, change{failure: v.Failure, call: c, note: "settled", by: by}, now)
	}
	return Transition{}, &TransitionError{Attempt: n, From: a.State, To: v.Outcome}
}

// DecideWait records that the job waits for providers (plan.Waiting of
// Next): why, since when and until when. Recording the same wait again is a
// no-op, so a run that finds nothing changed writes nothing.
func DecideWait(j Job, w Waiting, now time.Time) (Transition, error) {
	if j.Status.Terminal() {
		return Transition{}, &FinishedError{Status: j.Status}
	}
	if open := j.Open(); len(open) > 0 {
		return Transition{}, &OpenAttemptError{Attempt: open[0].Number, State: open[0].State}
	}
	if cur := j.Waiting; cur != nil && cur.Reason == w.Reason && cur.Since.Equal(w.Since) && cur.Until.Equal(w.Until) && cur.Detail == w.Detail {
		return noop(j, KindWait, 0), nil
	}
	after := j
	w.Since, w.Until = w.Since.UTC(), w.Until.UTC()
	after.Waiting = &w
	return bookkeeping(j, after, KindWait, 0, now.UTC()), nil
}
