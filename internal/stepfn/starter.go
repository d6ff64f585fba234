// Package stepfn is onejob's Step Functions edge: it starts a job's
// execution — named by the job ID (job.ExecutionName), so the state
// machine carries the same identity as the API and the database — and
// serves the state machine's
// task functions, turning their errors into the names the ASL matches.
package stepfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// StarterConfig wires a Starter.
type StarterConfig struct {
	Client          *sfn.Client
	StateMachineARN string
	// RunTimeoutFunc is a job type's run timeout (lifecycle.RunTimeout),
	// the state machine's TimeoutSeconds for each run of its jobs; false
	// for a type this build does not know, whose execution starts with
	// DefaultRunTimeout and ends at once (Abandoned).
	RunTimeoutFunc func(jobType string) (time.Duration, bool)
	// Timeout bounds one Start, the client's retries included (the API's
	// is APIStartTimeout); 0 leaves it to ctx.
	Timeout time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	Logger  *slog.Logger
}

// Starter starts executions.
type Starter struct {
	runTimeout   func(jobType string) (time.Duration, bool)
	startTimeout time.Duration
	// startExecution is the one operation called, held as a method value so
	// the SDK client stays out of reflection's reach (see dynamo's client).
	startExecution func(context.Context, *sfn.StartExecutionInput, ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	arn            string
	now            func() time.Time
	log            *slog.Logger
}

// NewStarter checks the client and state machine and defaults the rest.
func NewStarter(c StarterConfig) (*Starter, error) {
	if c.Client == nil || c.StateMachineARN == "" || c.RunTimeoutFunc == nil {
		return nil, errors.New("stepfn: client, state machine ARN and run timeouts are required")
	}
	if c.Timeout < 0 {
		return nil, errors.New("stepfn: a start's timeout must not be negative")
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Starter{startExecution: c.Client.StartExecution, arn: c.StateMachineARN, runTimeout: c.RunTimeoutFunc,
		startTimeout: c.Timeout, now: c.NowFunc, log: c.Logger}, nil
}

// DefaultRunTimeout starts the execution of a job whose type this build
// does not know.
const DefaultRunTimeout = time.Minute

// ExecutionInput is the input of a job's execution: its ID, each run's
// timeout and its trace context (only a traced job's input carries one),
// all fixed for the job, so a repeated start has the same input and is
// idempotent.
func ExecutionInput(j job.Job, runTimeout time.Duration) string {
	b, _ := json.Marshal(lifecycle.NewRunInput(j.ID, runTimeout).WithTrace(j.Trace))
	return string(b)
}

// Start starts the job's execution, named from the job (job.ExecutionName:
// its ID, or, once work it was parked on ended, "<job_id>-<n>"). Repeating
// it is harmless: Step Functions returns the running execution for the
// same name and input, and ExecutionAlreadyExists for a closed one, which
// means it already ran. started reports a new execution.
func (s *Starter) Start(ctx context.Context, j job.Job) (started bool, err error) {
	id, name := j.ID, job.ExecutionName(j)
	timeout, ok := s.runTimeout(j.Type)
	if !ok {
		timeout = DefaultRunTimeout
	}
	if s.startTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.startTimeout)
		defer cancel()
	}
	begun := s.now()
	out, err := s.startExecution(ctx, &sfn.StartExecutionInput{
		StateMachineArn: aws.String(s.arn),
		Name:            aws.String(name),
		Input:           aws.String(ExecutionInput(j, timeout)),
	})
	var exists *types.ExecutionAlreadyExists
	if errors.As(err, &exists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("start execution %s: %w", name, err)
	}
	// For a running execution of the same name and input, Step Functions
	// answers with the original start: that is not a new execution. The
	// 5 s allow for the clocks' skew, so a repeat within 5 s of the first
	// start still reads as new (started only feeds logs and the sweep
	// report; either way there is one execution).
	if out.StartDate != nil && out.StartDate.Before(begun.Add(-5*time.Second)) {
		return false, nil
	}
	s.log.InfoContext(ctx, "execution_started", "job_id", id, "execution", name)
	return true, nil
}
