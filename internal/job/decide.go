package job

import (
	"bytes"
	"encoding/json"
	"time"
)

// DecideStart starts attempt AttemptCount+1 on provider. It is refused while
// an attempt is starting or unknown, or once the job has an outcome.
func DecideStart(j Job, provider string, now time.Time) (Transition, error) {
	return decideStart(j, provider, false, now)
}

// DecideHedge starts one more attempt beside a running one, under the same
// guard as DecideStart.
func DecideHedge(j Job, provider string, now time.Time) (Transition, error) {
	return decideStart(j, provider, true, now)
}

// DecideLaunch starts attempt AttemptCount+1 on provider and claims it for
// the caller in the same write: DecideStart then DecideRunning, for a
// runner that starts the attempt it is about to run. A redelivered runner
// finds the attempt running and never calls its provider again.
func DecideLaunch(j Job, provider string, now time.Time) (Transition, error) {
	return launch(j, provider, false, now)
}

// DecideLaunchHedge is DecideLaunch for a hedge beside a running attempt.
func DecideLaunchHedge(j Job, provider string, now time.Time) (Transition, error) {
	return launch(j, provider, true, now)
}

func launch(j Job, provider string, hedge bool, now time.Time) (Transition, error) {
	started, err := decideStart(j, provider, hedge, now)
	if err != nil {
		return Transition{}, err
	}
	claimed, err := DecideRunning(started.after, started.attempt, now)
	if err != nil {
		return Transition{}, err
	}
	// One write from j to the claimed job: one revision, one attempt.
	return bookkeeping(j, claimed.after, KindStartAttempt, started.attempt, now.UTC()), nil
}

func decideStart(j Job, provider string, hedge bool, now time.Time) (Transition, error) {
	if j.Status.Terminal() {
		return Transition{}, &FinishedError{Status: j.Status}
	}
	if b, ok := j.Blocker(); ok {
		return Transition{}, &BlockedError{Attempt: b.Number, State: b.State}
	}
	if provider == "" {
		return Transition{}, ErrNoProviderLeft
	}
	now = now.UTC()
	a := Attempt{
		JobID:       j.ID,
		Number:      j.AttemptCount + 1,
		Provider:    provider,
		State:       AttemptStarting,
		Hedge:       hedge,
		ReadVersion: j.Version,
		StartedAt:   now,
		UpdatedAt:   now,
	}
	after := j.withAttempt(a)
	after.AttemptCount = a.Number
	after.Waiting = nil // a provider took it
	return bookkeeping(j, after, KindStartAttempt, a.Number, now), nil
}

// DecideRunning claims a starting attempt for one runner: only the runner
// whose claim is written calls the provider. If the job finished before the
// claim (cancelled, or won by another attempt), the attempt is discarded
// instead and its provider is never called. Redelivery, or a later state,
// is a no-op.
func DecideRunning(j Job, n int, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.State != AttemptStarting {
		return noop(j, KindAttempt, n), nil
	}
	if j.Status.Terminal() {
		t, err := attemptTo(j, a, AttemptDiscarded, change{note: "lost_race"}, now)
		t.lostRace = &LostRace{JobID: j.ID, Loser: n, Winner: j.CompletedBy, Status: j.Status}
		return t, err
	}
	return attemptTo(j, a, AttemptRunning, change{}, now)
}

// DecideUnknown records that an attempt outlived its timeout: its outcome is
// unknown, never failed. An attempt that already finished stays as it is; one
// that was never claimed (still starting) provably never called its provider
// and fails as retryable instead.
func DecideUnknown(j Job, n int, reason string, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	switch a.State {
	case AttemptStarting:
		// Never claimed by a runner, so the provider was never called — and
		// never will be: a claim needs the attempt to be starting. Nothing is
		// ambiguous, so the job may fall back at once.
		return attemptTo(j, a, AttemptFailed, change{failure: &Failure{Class: ClassRetryable,
			Message: "not claimed by a runner within its timeout (" + reason + "); the provider was not called"}}, now)
	case AttemptRunning:
		return attemptTo(j, a, AttemptUnknown, change{failure: &Failure{Class: ClassAmbiguous, Message: reason}}, now)
	}
	return noop(j, KindAttempt, n), nil
}

// DecideAttemptFailed records a provider failure for an attempt. A failure
// arriving for an unknown attempt resolves it; one arriving after the attempt
// closed is a no-op. An ambiguous failure is no failure: the attempt becomes
// unknown.
func DecideAttemptFailed(j Job, n int, f Failure, providerRequestID string, now time.Time) (Transition, error) {
	return DecideCallFailed(j, n, f, Call{ProviderRequestID: providerRequestID}, now)
}

// DecideCallFailed is DecideAttemptFailed with what the call reported: its
// request ID and the usage it was billed, recorded however it ended.
func DecideCallFailed(j Job, n int, f Failure, c Call, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if !a.State.Open() {
		return noop(j, KindAttempt, n), nil
	}
	if f.Class == ClassAmbiguous {
		// The provider may still act.
		if a.State != AttemptRunning {
			return DecideUnknown(j, n, f.Message, now)
		}
		return attemptTo(j, a, AttemptUnknown, change{failure: &f, call: c}, now)
	}
	return attemptTo(j, a, AttemptFailed, change{failure: &f, call: c}, now)
}

// DecideCallCancelled ends attempt n as cancelled, with what its call
// cost up to then: its job was cancelled while the call streamed, and the
// run closed the provider's stream (a streamed call checks its job about
// once a second while it runs), so the provider stopped working on it.
// Only a cancelled job's attempt still in flight is ended this way (one
// that ended meanwhile stays as it is); the budget settles it at c's
// usage (SpendOf).
func DecideCallCancelled(j Job, n int, c Call, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if !a.State.InFlight() {
		return noop(j, KindAttempt, n), nil
	}
	if j.Status != StatusCancelled {
		return Transition{}, &TransitionError{Attempt: n, From: a.State, To: AttemptCancelled}
	}
	return attemptTo(j, a, AttemptCancelled, change{call: c, note: "cancelled: its stream was closed when its job was cancelled"}, now)
}

// Resolution is an operator's verdict on an unknown attempt: what the
// provider did, as they found out.
type Resolution struct {
	Outcome AttemptState // succeeded, failed or cancelled
	Result  json.RawMessage
	Reason  string
	// By is who resolved (the operator's subject).
	By string
}

// DecideResolve settles an unknown attempt out of band. Exactly one
// resolution of an attempt applies:
//   - succeeded completes the job with the result, by compare-and-swap like
//     any answer, while the job is open;
//   - failed and cancelled both end the attempt (cancelled: the call was
//     cancelled at the provider); the job then goes on as after any failed
//     attempt — the next provider, or its failure. Cancelling the job is its
//     own request (DecideCancel).
//
// Repeating the applied resolution (same outcome, and for succeeded the same
// result) is a no-op. Any other resolution — of an attempt resolved
// otherwise, of one that ended on its own, or succeeded on a job that
// already has an outcome (its result could not be kept) — is a
// *ResolutionConflictError. An unknown attempt of a finished job may still
// be resolved failed or cancelled, for the record; the job is unchanged.
func DecideResolve(j Job, n int, r Resolution, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if resolvedAs(j, a, r) {
		return noop(j, KindAttempt, n), nil
	}
	conflict := &ResolutionConflictError{Attempt: n, State: a.State, JobStatus: j.Status,
		Resolved: a.Resolution != nil, HasResult: j.CompletedBy == n}
	if a.State != AttemptUnknown || (r.Outcome == AttemptSucceeded && j.Status.Terminal()) {
		return Transition{}, conflict
	}
	c := change{note: "resolved: " + r.Reason, by: &Resolved{Outcome: r.Outcome, By: r.By, Reason: r.Reason, At: now.UTC()}}
	switch r.Outcome {
	case AttemptSucceeded:
		t, err := complete(j, a, r.Result, c, now)
		if _, lost := t.LostRace(); lost {
			return Transition{}, conflict
		}
		return t, err
	case AttemptFailed, AttemptCancelled:
		c.failure = &Failure{Class: ClassResolved, Message: r.Reason}
		return attemptTo(j, a, r.Outcome, c, now)
	}
	return Transition{}, &TransitionError{Attempt: n, From: a.State, To: r.Outcome}
}

// resolvedAs reports whether attempt a already carries resolution r: the same
// outcome and, for succeeded, the same result (compared canonically, so key
// order and number spelling do not matter).
func resolvedAs(j Job, a Attempt, r Resolution) bool {
	if a.Resolution == nil || a.Resolution.Outcome != r.Outcome || a.State != r.Outcome {
		return false
	}
	if r.Outcome != AttemptSucceeded {
		return true
	}
	if j.CompletedBy != a.Number {
		return false
	}
	stored, err1 := Canonical(j.Result)
	given, err2 := Canonical(r.Result)
	return err1 == nil && err2 == nil && bytes.Equal(stored, given)
}

// DecideComplete decides what a finished attempt's result does. If the job is
// still open on the version the attempt read, the result wins by
// compare-and-swap. Otherwise the result lost the race: it is discarded —
// never merged, never appended — and the attempt becomes discarded.
func DecideComplete(j Job, n int, result json.RawMessage, providerRequestID string, now time.Time) (Transition, error) {
	return DecideCallCompleted(j, n, result, Call{ProviderRequestID: providerRequestID}, now)
}

// DecideCallCompleted is DecideComplete with what the call reported: its
// request ID and the usage it was billed — recorded on the attempt whether
// it wins or is discarded, since either way it was paid for.
func DecideCallCompleted(j Job, n int, result json.RawMessage, c Call, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	c2 := change{call: c, note: "won"}
	return complete(j, a, result, c2, now)
}

// complete is DecideComplete for attempt a; c.note is the winner's outcome.
func complete(j Job, a Attempt, result json.RawMessage, c change, now time.Time) (Transition, error) {
	n := a.Number
	if j.CompletedBy == n {
		return noop(j, KindComplete, n), nil // this attempt already won: redelivery
	}
	if j.Status.Terminal() || j.CompletedBy != 0 || j.Version != a.ReadVersion || !a.State.Open() {
		lost := &LostRace{JobID: j.ID, Loser: n, Winner: j.CompletedBy, Status: j.Status}
		if !a.State.Open() {
			// Already closed (discarded before, or resolved out of band).
			t := noop(j, KindAttempt, n)
			t.lostRace = lost
			return t, nil
		}
		t, err := attemptTo(j, a, AttemptDiscarded, change{call: c.call, note: "lost_race"}, now)
		t.lostRace = lost
		return t, err
	}
	won, err := moveAttempt(a, AttemptSucceeded, c, now)
	if err != nil {
		return Transition{}, err
	}
	after := j.withAttempt(won)
	after.Status = StatusSucceeded
	after.CompletedBy = n
	after.Result = append(json.RawMessage(nil), result...)
	after.Error = nil
	after.Waiting = nil
	// The write compares on j.Version, which is the version the attempt read,
	// and on the attempt still being in a state a result may end.
	t := outcome(j, after, KindComplete, n, now.UTC())
	for _, e := range attemptEdges {
		if e.To == AttemptSucceeded {
			t.allowed = append(t.allowed, e.From)
		}
	}
	return t, nil
}

// DecideFail writes the job's final failure once no attempt is open.
func DecideFail(j Job, f Failure, now time.Time) (Transition, error) {
	if j.Status == StatusFailed {
		return noop(j, KindFail, 0), nil
	}
	if j.Status.Terminal() {
		return Transition{}, &FinishedError{Status: j.Status}
	}
	if open := j.Open(); len(open) > 0 {
		return Transition{}, &OpenAttemptError{Attempt: open[0].Number, State: open[0].State}
	}
	after := j
	after.Status = StatusFailed
	f = f.bounded()
	after.Error = &f
	after.Waiting = nil
	return outcome(j, after, KindFail, 0, now.UTC()), nil
}

// DecideCancel cancels a job that has no outcome yet. Cancelling twice is a
// no-op; cancelling a finished job is refused. Open attempts stay as they
// are: a starting one is discarded when a runner comes to claim it
// (DecideRunning), a running one loses the race when it answers, and an
// unknown one still needs resolving.
func DecideCancel(j Job, now time.Time) (Transition, error) {
	return DecideCancelBy(j, Cancellation{}, now)
}

// DecideCancelBy is DecideCancel recording who cancelled and why (c.At is
// set to now). Cancelling a cancelled job again keeps the first record.
func DecideCancelBy(j Job, c Cancellation, now time.Time) (Transition, error) {
	if j.Status == StatusCancelled {
		return noop(j, KindCancel, 0), nil
	}
	if j.Status.Terminal() {
		return Transition{}, &FinishedError{Status: j.Status}
	}
	after := j
	after.Status = StatusCancelled
	c.At = now.UTC()
	after.Cancellation = &c
	after.Waiting = nil
	return outcome(j, after, KindCancel, 0, now.UTC()), nil
}

// attemptTo is the bookkeeping transition that moves attempt a to state to.
func attemptTo(j Job, a Attempt, to AttemptState, c change, now time.Time) (Transition, error) {
	moved, err := moveAttempt(a, to, c, now)
	if err != nil {
		return Transition{}, err
	}
	after := j.withAttempt(moved)
	if to == AttemptUnknown {
		// The owner learns the job is blocked, and why it waits.
		after = notice(after, EventAttemptUnknown, a.Number, now)
	}
	return bookkeeping(j, after, KindAttempt, a.Number, now.UTC()), nil
}

// change is what a move records on the attempt beside its new state.
type change struct {
	failure *Failure
	call    Call
	note    string // Outcome
	by      *Resolved
}

// moveAttempt moves an attempt to a new state through the transition table:
// no decision changes an attempt's state any other way.
func moveAttempt(a Attempt, to AttemptState, c change, now time.Time) (Attempt, error) {
	if !CanTransition(a.State, to) {
		return Attempt{}, &TransitionError{Attempt: a.Number, From: a.State, To: to}
	}
	now = now.UTC()
	a.State = to
	a.UpdatedAt = now
	if to == AttemptUnknown {
		a.UnknownSince = now
	}
	if to.Terminal() {
		a.FinishedAt = now
	}
	if c.failure != nil {
		f := c.failure.bounded()
		a.Error = &f
	}
	if to == AttemptSucceeded {
		// An unknown attempt that answered late, or was resolved, failed
		// at nothing: the ambiguity it carried is settled.
		a.Error = nil
	}
	call := c.call.bounded()
	if call.ProviderRequestID != "" {
		a.ProviderRequestID = call.ProviderRequestID
	}
	if call.Usage != nil {
		u := *call.Usage
		a.Usage = &u
	}
	if c.note != "" {
		a.Outcome = c.note
	}
	if c.by != nil {
		r := *c.by
		a.Resolution = &r
	}
	if a.Remote != nil && call.WorkStatus != "" {
		r := *a.Remote
		r.Status, r.HeardAt = boundedStatus(call.WorkStatus), now
		if r.ID == "" && visibleASCII(call.WorkID, MaxRemoteIDBytes) {
			r.ID = call.WorkID
		}
		a.Remote = &r
	}
	return a, nil
}
