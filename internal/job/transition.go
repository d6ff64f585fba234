package job

import "time"

// Kind names what a transition changes.
type Kind string

// Transition kinds. Bookkeeping kinds compare on the job's revision; outcome
// kinds compare on its version and the absence of completed_by.
const (
	KindStartAttempt Kind = "start_attempt" // bookkeeping
	KindAttempt      Kind = "attempt"       // bookkeeping: one attempt's state
	KindWait         Kind = "wait"          // bookkeeping: why and until when a job waits for providers
	KindComplete     Kind = "complete"      // outcome: an attempt's result wins
	KindFail         Kind = "fail"          // outcome: the job fails
	KindCancel       Kind = "cancel"        // outcome: the job is cancelled
	// KindDispatched is bookkeeping: the notifier fanned the outbox's
	// notices out into deliveries (Job.Dispatched).
	KindDispatched Kind = "dispatched"
)

// Outcome reports whether the kind writes the job's outcome.
func (k Kind) Outcome() bool { return k == KindComplete || k == KindFail || k == KindCancel }

// Transition is a decided change of one job item. Only the Decide functions
// build one; the store executes it as a single conditional write.
type Transition struct {
	decided bool
	kind    Kind
	noop    bool
	before  Job
	after   Job
	attempt int
	// allowed lists the attempt states a completion may replace.
	allowed  []AttemptState
	lostRace *LostRace
}

// Decided reports whether the transition came from a decision.
func (t Transition) Decided() bool { return t.decided }

// Kind says what the transition changes.
func (t Transition) Kind() Kind { return t.kind }

// Noop reports a transition already applied (an at-least-once redelivery):
// nothing is written.
func (t Transition) Noop() bool { return t.noop }

// Before is the job the decision was made on. A write applies only while the
// stored job still has Before's revision (bookkeeping) or version (outcomes).
func (t Transition) Before() Job { return t.before }

// After is the job once the transition is applied.
func (t Transition) After() Job { return t.after }

// AttemptNumber is the attempt the transition concerns, 0 for none.
func (t Transition) AttemptNumber() int { return t.attempt }

// RecordsAttempt reports whether the store copies the concerned attempt to
// the attempt ledger: when it starts and when it ends, the moments its
// readers need. In between (claimed, unknown) the job item alone carries
// it, and readers merge the two with the job item as the authority.
func (t Transition) RecordsAttempt() bool {
	if t.attempt == 0 || t.noop {
		return false
	}
	if t.kind == KindStartAttempt {
		return true
	}
	a, ok := t.after.Attempt(t.attempt)
	return ok && a.State.Terminal()
}

// AllowedAttemptStates are the states the concerned attempt must still be in
// for a completion to apply.
func (t Transition) AllowedAttemptStates() []AttemptState { return t.allowed }

// LostRace is set when the decision is that an attempt's result lost.
func (t Transition) LostRace() (LostRace, bool) {
	if t.lostRace == nil {
		return LostRace{}, false
	}
	return *t.lostRace, true
}

// LostRace describes a finished attempt whose result was discarded.
type LostRace struct {
	JobID  string
	Loser  int
	Winner int // 0 when the job ended without a winning attempt
	Status Status
}

func noop(j Job, kind Kind, n int) Transition {
	return Transition{decided: true, kind: kind, noop: true, before: j, after: j, attempt: n}
}

func bookkeeping(before, after Job, kind Kind, n int, now time.Time) Transition {
	after.Status = after.derivedStatus()
	after.UpdatedAt = now
	after.Revision = before.Revision + 1
	after = recordNotices(before, after)
	return Transition{decided: true, kind: kind, before: before, after: after, attempt: n}
}

func outcome(before, after Job, kind Kind, n int, now time.Time) Transition {
	after = notice(after, outcomeEvent(kind), 0, now)
	after.Version = before.Version + 1
	after.Revision = before.Revision + 1
	after.UpdatedAt = now
	// The outcome starts the job's retention, in whole seconds (as the
	// store's TTL reads it), rounded up so nothing goes early.
	after.ExpiresAt = now.Add(before.retention()).Truncate(time.Second)
	if after.ExpiresAt.Before(now.Add(before.retention())) {
		after.ExpiresAt = after.ExpiresAt.Add(time.Second)
	}
	after = recordNotices(before, after)
	return Transition{decided: true, kind: kind, before: before, after: after, attempt: n}
}
