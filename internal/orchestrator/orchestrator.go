// Package orchestrator starts a job's Step Functions execution — named by
// the job ID, so the state machine carries the same identity as the API and
// the database — and sweeps up jobs whose execution never started.
package orchestrator

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
	"github.com/onejob/onejob/internal/store"
)

// Starter starts executions.
type Starter struct {
	client *sfn.Client
	arn    string
	log    *slog.Logger
}

// NewStarter validates its arguments.
func NewStarter(client *sfn.Client, stateMachineARN string, log *slog.Logger) (*Starter, error) {
	if client == nil || stateMachineARN == "" {
		return nil, errors.New("orchestrator: client and state machine ARN are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Starter{client: client, arn: stateMachineARN, log: log}, nil
}

// ExecutionInput is the input of every execution: the job ID, nothing else,
// so a repeated start has the same input and is idempotent.
func ExecutionInput(jobID string) string {
	b, _ := json.Marshal(map[string]string{"job_id": jobID})
	return string(b)
}

// Start starts the job's execution. Repeating it is harmless: Step Functions
// returns the running execution for the same name and input, and
// ExecutionAlreadyExists for a closed one, which means it already ran.
func (s *Starter) Start(ctx context.Context, j job.Job) error {
	_, err := s.start(ctx, j.ID)
	return err
}

func (s *Starter) start(ctx context.Context, id string) (bool, error) {
	begun := time.Now()
	out, err := s.client.StartExecution(ctx, &sfn.StartExecutionInput{
		StateMachineArn: aws.String(s.arn),
		Name:            aws.String(id),
		Input:           aws.String(ExecutionInput(id)),
	})
	var exists *types.ExecutionAlreadyExists
	if errors.As(err, &exists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("start execution %s: %w", id, err)
	}
	// For a running execution of the same name and input, Step Functions
	// answers with the original start: that is not a new execution.
	if out.StartDate != nil && out.StartDate.Before(begun.Add(-5*time.Second)) {
		return false, nil
	}
	s.log.InfoContext(ctx, "execution_started", "job_id", id)
	return true, nil
}

// Sweeper restarts executions for open jobs that have none running — left
// pending by an API crash between the create and the start, or orphaned by
// a lost local stack.
type Sweeper struct {
	Store   *store.Store
	Starter *Starter
	// Grace leaves young jobs to the API's own start.
	Grace time.Duration
	// Limit bounds one sweep.
	Limit  int
	Clock  func() time.Time
	Logger *slog.Logger
	// Gauge receives the age of the oldest unknown attempt (0 if none).
	Gauge func(ctx context.Context, name string, value float64)
}

// SweepReport says what a sweep did.
type SweepReport struct {
	Open                 int     `json:"open"`
	Pending              int     `json:"pending"`
	Started              int     `json:"started"`
	OldestUnknownSeconds float64 `json:"oldest_unknown_seconds"`
}

// Sweep runs once.
func (w *Sweeper) Sweep(ctx context.Context) (SweepReport, error) {
	now := time.Now
	if w.Clock != nil {
		now = w.Clock
	}
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := w.Limit
	if limit <= 0 {
		limit = 1000
	}
	jobs, err := w.Store.ListOpen(ctx, now().Add(-w.Grace), limit)
	if err != nil {
		return SweepReport{}, err
	}
	var rep SweepReport
	var errs []error
	for _, j := range jobs {
		rep.Open++
		if j.Status == job.StatusPending {
			rep.Pending++
		}
		for _, a := range j.Attempts {
			if a.State == job.AttemptUnknown && !a.UnknownSince.IsZero() {
				rep.OldestUnknownSeconds = max(rep.OldestUnknownSeconds, now().Sub(a.UnknownSince).Seconds())
			}
		}
		started, err := w.Starter.start(ctx, j.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if started {
			rep.Started++
			log.WarnContext(ctx, "execution_restarted", "job_id", j.ID, "job_status", string(j.Status))
		}
	}
	if w.Gauge != nil {
		w.Gauge(ctx, "AttemptsUnknownOldestSeconds", rep.OldestUnknownSeconds)
	}
	log.InfoContext(ctx, "sweep_done", "open", rep.Open, "pending", rep.Pending, "started", rep.Started,
		"oldest_unknown_seconds", rep.OldestUnknownSeconds)
	return rep, errors.Join(errs...)
}
