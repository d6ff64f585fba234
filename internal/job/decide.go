package job

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind names what a transition changes.
type Kind string

// Transition kinds. Bookkeeping kinds compare on the job's revision; outcome
// kinds compare on its version and the absence of completed_by.
const (
	KindStartAttempt Kind = "start_attempt" // bookkeeping
	KindAttempt      Kind = "attempt"       // bookkeeping: one attempt's state
	KindComplete     Kind = "complete"      // outcome: an attempt's result wins
	KindFail         Kind = "fail"          // outcome: the job fails
	KindCancel       Kind = "cancel"        // outcome: the job is cancelled
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

// Before is the job the decision was made on.
func (t Transition) Before() Job { return t.before }

// After is the job once the transition is applied.
func (t Transition) After() Job { return t.after }

// AttemptNumber is the attempt the transition concerns, 0 for none.
func (t Transition) AttemptNumber() int { return t.attempt }

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
	return Transition{decided: true, kind: kind, before: before, after: after, attempt: n}
}

func outcome(before, after Job, kind Kind, n int, now time.Time) Transition {
	after.Version = before.Version + 1
	after.Revision = before.Revision + 1
	after.UpdatedAt = now
	return Transition{decided: true, kind: kind, before: before, after: after, attempt: n}
}

// Request is what a client asks for.
type Request struct {
	Owner          string
	IdempotencyKey string
	Type           string
	Input          json.RawMessage
	Providers      []string
}

// Limits on a request, checked before anything is written.
const (
	MaxKeyLength  = 255
	MaxProviders  = 8
	MaxInputBytes = 256 << 10
)

// ValidKey reports whether an idempotency key is 1–255 visible ASCII characters.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// New builds a pending job from a request.
func New(r Request, now time.Time) (Job, error) {
	switch {
	case r.Owner == "" || !utf8.ValidString(r.Owner):
		return Job{}, &InvalidError{Field: "owner", Reason: "missing"}
	case !ValidKey(r.IdempotencyKey):
		return Job{}, &InvalidError{Field: "idempotency_key", Reason: "must be 1–255 visible ASCII characters"}
	case strings.TrimSpace(r.Type) == "":
		return Job{}, &InvalidError{Field: "type", Reason: "missing"}
	case len(r.Input) > MaxInputBytes:
		return Job{}, &InvalidError{Field: "input", Reason: "too large"}
	case len(r.Providers) == 0 || len(r.Providers) > MaxProviders:
		return Job{}, &InvalidError{Field: "providers", Reason: "between 1 and 8 providers"}
	}
	seen := map[string]bool{}
	for _, p := range r.Providers {
		if p == "" || seen[p] {
			return Job{}, &InvalidError{Field: "providers", Reason: "empty or repeated provider"}
		}
		seen[p] = true
	}
	fp, err := Fingerprint(r.Type, r.Input, r.Providers)
	if err != nil {
		return Job{}, &InvalidError{Field: "input", Reason: err.Error()}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, r.Input); err != nil {
		return Job{}, &InvalidError{Field: "input", Reason: err.Error()}
	}
	now = now.UTC()
	return Job{
		ID:             NewID(r.Owner, r.IdempotencyKey),
		Owner:          r.Owner,
		IdempotencyKey: r.IdempotencyKey,
		Type:           r.Type,
		Input:          compact.Bytes(), // as the client wrote it, minus whitespace
		Providers:      append([]string(nil), r.Providers...),
		Fingerprint:    fp,
		Status:         StatusPending,
		CreatedAt:      now,
		UpdatedAt:      now,
	}, nil
}

// SameRequest decides whether a create that collided with existing is a
// replay (same fingerprint) or a conflicting reuse of the key.
func SameRequest(existing, incoming Job) error {
	if existing.Fingerprint == incoming.Fingerprint {
		return nil
	}
	return &KeyReusedError{JobID: existing.ID}
}

// DecideStart starts attempt AttemptCount+1 on provider. It is refused while
// an attempt is starting or unknown, or once the job has an outcome.
func DecideStart(j Job, provider string, hedge bool, now time.Time) (Transition, error) {
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

// DecideRunning marks a starting attempt running. Redelivery, or a later
// state, is a no-op.
func DecideRunning(j Job, n int, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if a.State != AttemptStarting {
		return noop(j, KindAttempt, n), nil
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
// closed is a no-op.
func DecideAttemptFailed(j Job, n int, f Failure, providerRequestID string, now time.Time) (Transition, error) {
	a, ok := j.Attempt(n)
	if !ok {
		return Transition{}, ErrAttemptNotFound
	}
	if !a.State.Open() {
		return noop(j, KindAttempt, n), nil
	}
	if f.Class == ClassAmbiguous {
		// An ambiguous failure is not a failure: the provider may still act.
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
	outcomeNote := "resolved: " + r.Reason
	switch r.Outcome {
	case AttemptSucceeded:
		t := DecideComplete(j, n, r.Result, "", now)
		if !t.noop && t.kind == KindComplete {
			at, _ := t.after.Attempt(n)
			at.Outcome = outcomeNote
			t.after = t.after.withAttempt(at)
		}
		return t, nil
	case AttemptFailed, AttemptCancelled:
		return attemptTo(j, a, r.Outcome, &Failure{Class: ClassResolved, Message: r.Reason}, "", outcomeNote, now)
	}
	return Transition{}, &TransitionError{Attempt: n, From: a.State, To: r.Outcome}
}

func attemptTo(j Job, a Attempt, to AttemptState, f *Failure, providerRequestID, note string, now time.Time) (Transition, error) {
	if !CanTransition(a.State, to) {
		return Transition{}, &TransitionError{Attempt: a.Number, From: a.State, To: to}
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
	return bookkeeping(j, j.withAttempt(a), KindAttempt, a.Number, now), nil
}

// DecideComplete decides what a finished attempt's result does. If the job is
// still open on the version the attempt read, the result wins by
// compare-and-swap. Otherwise the result lost the race: it is discarded —
// never merged, never appended — and the attempt becomes discarded.
func DecideComplete(j Job, n int, result json.RawMessage, providerRequestID string, now time.Time) Transition {
	a, ok := j.Attempt(n)
	if !ok {
		return noop(j, KindAttempt, n)
	}
	if j.CompletedBy == n {
		return noop(j, KindComplete, n) // this attempt already won: redelivery
	}
	now = now.UTC()
	if j.Status.Terminal() || j.CompletedBy != 0 || j.Version != a.ReadVersion || !a.State.Open() {
		lost := &LostRace{JobID: j.ID, Loser: n, Winner: j.CompletedBy, Status: j.Status}
		if !a.State.Open() {
			// Already closed (discarded before, or resolved out of band).
			t := noop(j, KindAttempt, n)
			t.lostRace = lost
			return t
		}
		a.State = AttemptDiscarded
		a.UpdatedAt, a.FinishedAt = now, now
		if providerRequestID != "" {
			a.ProviderRequestID = providerRequestID
		}
		a.Outcome = "lost_race"
		t := bookkeeping(j, j.withAttempt(a), KindAttempt, n, now)
		t.lostRace = lost
		return t
	}
	a.State = AttemptSucceeded
	a.UpdatedAt, a.FinishedAt = now, now
	a.Outcome = "won"
	if providerRequestID != "" {
		a.ProviderRequestID = providerRequestID
	}
	after := j.withAttempt(a)
	after.Status = StatusSucceeded
	after.CompletedBy = n
	after.Result = append(json.RawMessage(nil), result...)
	after.Error = nil
	t := outcome(j, after, KindComplete, n, now)
	t.allowed = []AttemptState{AttemptStarting, AttemptRunning, AttemptUnknown}
	// Compare on the version the attempt read, as the rule states.
	t.before.Version = a.ReadVersion
	return t
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
		return Transition{}, &BlockedError{Attempt: open[0].Number, State: open[0].State}
	}
	after := j
	after.Status = StatusFailed
	after.Error = &f
	return outcome(j, after, KindFail, 0, now.UTC()), nil
}

// DecideCancel cancels a job that has no outcome yet. Cancelling twice is a
// no-op; cancelling a finished job is refused.
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
