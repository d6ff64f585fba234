package stepfn

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// The Lambda entry points: the task logic with its error turned into the
// declared ASL error name. Each main hands one to lambda.Start.

// Run is the run function.
func Run(t *lifecycle.Tasks) func(context.Context, lifecycle.RunInput) (lifecycle.RunResult, error) {
	return func(ctx context.Context, in lifecycle.RunInput) (lifecycle.RunResult, error) {
		out, err := t.Run(ctx, in)
		return out, LambdaError(err)
	}
}

// Hold is the hold function.
func Hold(t *lifecycle.Tasks) func(context.Context, lifecycle.HoldInput) (lifecycle.HoldResult, error) {
	return func(ctx context.Context, in lifecycle.HoldInput) (lifecycle.HoldResult, error) {
		out, err := t.Hold(ctx, in)
		return out, LambdaError(err)
	}
}

// LambdaError converts a task's error into what aws-lambda-go reports with
// an explicit errorType (an InvokeResponse_Error value passes through as is),
// so the ASL sees the declared name instead of a Go type name. Store faults
// become StoreUnavailable, which the state machine retries.
func LambdaError(err error) error {
	if err == nil {
		return nil
	}
	var te *lifecycle.TaskError
	switch {
	case errors.As(err, &te):
	case errors.Is(err, lifecycle.ErrUnavailable):
		te = &lifecycle.TaskError{Name: lifecycle.ErrNameStoreUnavailable, Message: "store unavailable"}
	case errors.Is(err, lifecycle.ErrRefused), errors.Is(err, lifecycle.ErrTooLarge):
		te = &lifecycle.TaskError{Name: lifecycle.ErrNameStoreRefused, Message: "store refused the request: " + err.Error()}
	case errors.Is(err, job.ErrNotFound):
		te = &lifecycle.TaskError{Name: lifecycle.ErrNameJobNotFound, Message: "job not found"}
	default:
		return err
	}
	return messages.InvokeResponse_Error{Type: te.Name, Message: te.Message}
}
