package worker

import (
	"errors"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/store"
)

// Error names returned by the task functions. The state machine's Retry and
// Catch match exactly these strings (statemachine/onejob.asl.json).
const (
	ErrNameProviderRetryable   = "ProviderRetryable"
	ErrNameProviderRejected    = "ProviderRejected"
	ErrNameContractViolation   = "ContractViolation"
	ErrNameProviderAmbiguous   = "ProviderAmbiguous"
	ErrNameProviderUncertified = "ProviderUncertified"
	ErrNameStoreUnavailable    = "StoreUnavailable"
	ErrNameUnknownJobType      = "UnknownJobType"
	ErrNameJobNotFound         = "JobNotFound"
)

// ErrorNames lists every name a task may return.
func ErrorNames() []string {
	return []string{ErrNameProviderRetryable, ErrNameProviderRejected, ErrNameContractViolation,
		ErrNameProviderAmbiguous, ErrNameProviderUncertified, ErrNameStoreUnavailable,
		ErrNameUnknownJobType, ErrNameJobNotFound}
}

// TaskError is a task failure with the name the state machine routes on.
type TaskError struct {
	Name    string
	Message string
}

func (e *TaskError) Error() string { return e.Name + ": " + e.Message }

// ErrorName is the ASL error name.
func (e *TaskError) ErrorName() string { return e.Name }

// LambdaError converts a task's error into what aws-lambda-go reports with
// an explicit errorType (an InvokeResponse_Error value passes through as is),
// so the ASL sees the declared name instead of a Go type name. Store faults
// become StoreUnavailable, which the state machine retries.
func LambdaError(err error) error {
	if err == nil {
		return nil
	}
	var te *TaskError
	switch {
	case errors.As(err, &te):
	case errors.Is(err, store.ErrUnavailable):
		te = &TaskError{Name: ErrNameStoreUnavailable, Message: "store unavailable"}
	case errors.Is(err, job.ErrNotFound):
		te = &TaskError{Name: ErrNameJobNotFound, Message: "job not found"}
	default:
		return err
	}
	return messages.InvokeResponse_Error{Type: te.Name, Message: te.Message}
}
