package job

import (
	"errors"
	"fmt"
)

// Sentinel errors of the job domain. Callers match them with errors.Is; the
// HTTP edge maps them to statuses in one table.
var (
	ErrNotFound             = errors.New("job not found")
	ErrAttemptNotFound      = errors.New("attempt not found")
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	ErrAttemptBlocked       = errors.New("an earlier attempt is starting or unknown")
	ErrAttemptOpen          = errors.New("an attempt may still succeed")
	ErrJobFinished          = errors.New("job already finished")
	ErrInvalidTransition    = errors.New("transition not allowed")
	ErrNoProviderLeft       = errors.New("no provider left to try")
	ErrInvalid              = errors.New("invalid job")
	ErrUndecided            = errors.New("transition was not built by a decision")
)

// KeyReusedError reports an idempotency key already bound to another request.
type KeyReusedError struct {
	JobID string
}

func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("idempotency key already used for job %s with a different request", e.JobID)
}

// Unwrap makes errors.Is(err, ErrIdempotencyKeyReused) hold.
func (e *KeyReusedError) Unwrap() error { return ErrIdempotencyKeyReused }

// BlockedError names the attempt that blocks a new one.
type BlockedError struct {
	Attempt int
	State   AttemptState
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("attempt %d is %s: new attempts are blocked", e.Attempt, e.State)
}

// Unwrap makes errors.Is(err, ErrAttemptBlocked) hold.
func (e *BlockedError) Unwrap() error { return ErrAttemptBlocked }

// OpenAttemptError names the attempt that keeps a job from failing: it may
// still succeed.
type OpenAttemptError struct {
	Attempt int
	State   AttemptState
}

func (e *OpenAttemptError) Error() string {
	return fmt.Sprintf("attempt %d is %s: the job cannot fail while it may still succeed", e.Attempt, e.State)
}

// Unwrap makes errors.Is(err, ErrAttemptOpen) hold.
func (e *OpenAttemptError) Unwrap() error { return ErrAttemptOpen }

// FinishedError reports an operation refused because the job has an outcome.
type FinishedError struct {
	Status Status
}

func (e *FinishedError) Error() string { return fmt.Sprintf("job already %s", e.Status) }

// Unwrap makes errors.Is(err, ErrJobFinished) hold.
func (e *FinishedError) Unwrap() error { return ErrJobFinished }

// TransitionError reports an attempt transition outside the table.
type TransitionError struct {
	Attempt  int
	From, To AttemptState
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("attempt %d: %s → %s is not allowed", e.Attempt, e.From, e.To)
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) hold.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// InvalidError reports a job that cannot be built from its request.
type InvalidError struct {
	Field, Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// ResolutionConflictError refuses a resolution that cannot apply: the
// attempt is not unknown (it ended, or another resolution applied), or a
// succeeded resolution comes after the job has an outcome. It names what is
// there — never the stored result itself.
type ResolutionConflictError struct {
	Attempt   int
	State     AttemptState
	JobStatus Status
	// Resolved: an operator resolved the attempt; HasResult: its result is
	// the job's.
	Resolved, HasResult bool
}

func (e *ResolutionConflictError) Error() string {
	switch {
	case e.State == AttemptUnknown:
		return fmt.Sprintf("attempt %d is unknown but the job already %s: a result can no longer be stored", e.Attempt, e.JobStatus)
	case e.Resolved && e.HasResult:
		return fmt.Sprintf("attempt %d was already resolved %s, with another result, which the job kept", e.Attempt, e.State)
	case e.Resolved:
		return fmt.Sprintf("attempt %d was already resolved %s", e.Attempt, e.State)
	case e.HasResult:
		return fmt.Sprintf("attempt %d already %s on its own, and its result is the job's", e.Attempt, e.State)
	}
	return fmt.Sprintf("attempt %d is %s, not unknown: only an unknown attempt can be resolved", e.Attempt, e.State)
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) hold: a conflicting
// resolution is a transition the attempt cannot take.
func (e *ResolutionConflictError) Unwrap() error { return ErrInvalidTransition }
