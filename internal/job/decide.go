package job

import (
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
		t, err := attemptTo(j, a, AttemptDiscarded, nil, "", "lost_race", now)
		t.lostRace = &LostRace{JobID: j.ID, Loser: n, Winner: j.CompletedBy, Status: j.Status}
		return t, err
	}
	return attemptTo(j, a, AttemptRunning, nil, "", "", now)
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
		return attemptTo(j, a, AttemptFailed, &Failure{Class: ClassRetryable,
			Message: "not claimed by a runner within its timeout (" + reason + "); the provider was not called"}, "", "", now)
	case AttemptRunning:
		return attemptTo(j, a, AttemptUnknown, &Failure{Class: ClassAmbiguous, Message: reason}, "", "", now)
	}
	return noop(j, KindAttempt, n), nil
}

// DecideAttemptFailed records a provider failure for an attempt. A failure
// arriving for an unknown attempt resolves it; one arriving after the attempt
// closed is a no-op. An ambiguous failure is no failure: the attempt becomes
// unknown.
func DecideAttemptFailed(j Job, n int, f Failure, providerRequestID string, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if !a.State.Open() {
		return noop(j, KindAttempt, n), nil
	}
	if f.Class == ClassAmbiguous {
		// The provider may still act.
		return DecideUnknown(j, n, f.Message, now)
	}
	return attemptTo(j, a, AttemptFailed, &f, providerRequestID, "", now)
}

// Resolution is an out-of-band verdict on an unknown attempt.
type Resolution struct {
	Outcome AttemptState // succeeded, failed or cancelled
	Result  json.RawMessage
	Reason  string
}

// DecideResolve settles an unknown attempt out of band. Repeating the same
// resolution is a no-op; resolving an attempt that is not unknown is refused.
func DecideResolve(j Job, n int, r Resolution, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.State == r.Outcome && a.State != AttemptUnknown {
		return noop(j, KindAttempt, n), nil
	}
	if a.State != AttemptUnknown {
		return Transition{}, &TransitionError{Attempt: n, From: a.State, To: r.Outcome}
	}
	note := "resolved: " + r.Reason
	switch r.Outcome {
	case AttemptSucceeded:
		return complete(j, a, r.Result, "", note, now)
	case AttemptFailed, AttemptCancelled:
		return attemptTo(j, a, r.Outcome, &Failure{Class: ClassResolved, Message: r.Reason}, "", note, now)
	}
	return Transition{}, &TransitionError{Attempt: n, From: a.State, To: r.Outcome}
}

// DecideComplete decides what a finished attempt's result does. If the job is
// still open on the version the attempt read, the result wins by
// compare-and-swap. Otherwise the result lost the race: it is discarded —
// never merged, never appended — and the attempt becomes discarded.
func DecideComplete(j Job, n int, result json.RawMessage, providerRequestID string, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	return complete(j, a, result, providerRequestID, "won", now)
}

// complete is DecideComplete for attempt a; note is the winner's outcome.
func complete(j Job, a Attempt, result json.RawMessage, providerRequestID, note string, now time.Time) (Transition, error) {
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
		t, err := attemptTo(j, a, AttemptDiscarded, nil, providerRequestID, "lost_race", now)
		t.lostRace = lost
		return t, err
	}
	won, err := moveAttempt(a, AttemptSucceeded, nil, providerRequestID, note, now)
	if err != nil {
		return Transition{}, err
	}
	after := j.withAttempt(won)
	after.Status = StatusSucceeded
	after.CompletedBy = n
	after.Result = append(json.RawMessage(nil), result...)
	after.Error = nil
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
	after.Error = &f
	return outcome(j, after, KindFail, 0, now.UTC()), nil
}

// DecideCancel cancels a job that has no outcome yet. Cancelling twice is a
// no-op; cancelling a finished job is refused. Open attempts stay as they
// are: a starting one is discarded when a runner comes to claim it
// (DecideRunning), a running one loses the race when it answers, and an
// unknown one still needs resolving.
func DecideCancel(j Job, now time.Time) (Transition, error) {
	if j.Status == StatusCancelled {
		return noop(j, KindCancel, 0), nil
	}
	if j.Status.Terminal() {
		return Transition{}, &FinishedError{Status: j.Status}
	}
	after := j
	after.Status = StatusCancelled
	return outcome(j, after, KindCancel, 0, now.UTC()), nil
}

// attemptTo is the bookkeeping transition that moves attempt a to state to.
func attemptTo(j Job, a Attempt, to AttemptState, f *Failure, providerRequestID, note string, now time.Time) (Transition, error) {
	moved, err := moveAttempt(a, to, f, providerRequestID, note, now)
	if err != nil {
		return Transition{}, err
	}
	return bookkeeping(j, j.withAttempt(moved), KindAttempt, a.Number, now.UTC()), nil
}

// moveAttempt moves an attempt to a new state through the transition table:
// no decision changes an attempt's state any other way.
func moveAttempt(a Attempt, to AttemptState, f *Failure, providerRequestID, note string, now time.Time) (Attempt, error) {
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
	if f != nil {
		a.Error = f
	}
	if providerRequestID != "" {
		a.ProviderRequestID = providerRequestID
	}
	if note != "" {
		a.Outcome = note
	}
	return a, nil
}
