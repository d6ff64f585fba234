package worker

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

// Function names: one Lambda each, and the ASL substitution that names it.
const (
	FnStartAttempt = "startattempt"
	FnRunAttempt   = "runattempt"
	FnMarkUnknown  = "markunknown"
	FnHedge        = "hedge"
	FnFinalize     = "finalize"
)

// Substitutions maps each task function to its placeholder in the state
// machine definition.
func Substitutions() map[string]string {
	return map[string]string{
		FnStartAttempt: "StartAttemptFunctionArn",
		FnRunAttempt:   "RunAttemptFunctionArn",
		FnMarkUnknown:  "MarkUnknownFunctionArn",
		FnHedge:        "HedgeFunctionArn",
		FnFinalize:     "FinalizeFunctionArn",
	}
}

// The Lambda entry points: the task logic with its error turned into the
// declared ASL error name.

// StartAttemptHandler is the startattempt function.
func (w *Worker) StartAttemptHandler(ctx context.Context, in JobInput) (Step, error) {
	out, err := w.StartAttempt(ctx, in)
	return out, LambdaError(err)
}

// RunAttemptHandler is the runattempt function.
func (w *Worker) RunAttemptHandler(ctx context.Context, in AttemptInput) (AttemptResult, error) {
	out, err := w.RunAttempt(ctx, in)
	return out, LambdaError(err)
}

// MarkUnknownHandler is the markunknown function.
func (w *Worker) MarkUnknownHandler(ctx context.Context, in AttemptInput) (AttemptResult, error) {
	out, err := w.MarkUnknown(ctx, in)
	return out, LambdaError(err)
}

// HedgeHandler is the hedge function.
func (w *Worker) HedgeHandler(ctx context.Context, in AttemptInput) (HedgeStep, error) {
	out, err := w.Hedge(ctx, in)
	return out, LambdaError(err)
}

// FinalizeHandler is the finalize function.
func (w *Worker) FinalizeHandler(ctx context.Context, in JobInput) (JobResult, error) {
	out, err := w.Finalize(ctx, in)
	return out, LambdaError(err)
}

// Factories returns every task function, by name, as a factory of Lambda
// handlers for the local invoke endpoint: one handler per sandbox, as
// aws-lambda-go handlers serve one invocation at a time.
func (w *Worker) Factories() map[string]func() lambda.Handler {
	return map[string]func() lambda.Handler{
		FnStartAttempt: func() lambda.Handler { return lambda.NewHandler(w.StartAttemptHandler) },
		FnRunAttempt:   func() lambda.Handler { return lambda.NewHandler(w.RunAttemptHandler) },
		FnMarkUnknown:  func() lambda.Handler { return lambda.NewHandler(w.MarkUnknownHandler) },
		FnHedge:        func() lambda.Handler { return lambda.NewHandler(w.HedgeHandler) },
		FnFinalize:     func() lambda.Handler { return lambda.NewHandler(w.FinalizeHandler) },
	}
}
