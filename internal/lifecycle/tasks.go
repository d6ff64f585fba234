package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/provider"
)

// JobType is what the tasks need of a job type's contract.
type JobType interface {
	Timeout() time.Duration
	HedgeAfter() (time.Duration, bool)
	MaxAttempts() int
	ContractVersion() string
	// Request renders the provider request for an input; the caller adds
	// the attempt's identity.
	Request(input json.RawMessage) (provider.Request, error)
	// CheckOutput validates an answer against the output schema (unknown
	// top-level keys rejected) and the semantic checks.
	CheckOutput(output json.RawMessage) error
}

// Catalog finds job types by name.
type Catalog interface {
	Lookup(name string) (JobType, bool)
}

// Providers finds provider adapters by name.
type Providers interface {
	Get(name string) (provider.Provider, bool)
}

// TasksConfig wires Tasks.
type TasksConfig struct {
	Engine         *Engine
	Catalog        Catalog
	Providers      Providers
	Certifications Certifications
	// Wait spaces the checks of a blocked job.
	Wait job.WaitSchedule
	// CallTimeout caps one provider call, well beyond the job type's
	// timeout: a late answer must still reach the database after the state
	// machine gave up on it. Keep it below the run function's own timeout.
	CallTimeout time.Duration
	// PollInterval is how often a redelivered run waits on the runner that
	// claimed the attempt.
	PollInterval time.Duration
	// OverdueGrace is how long past its job type's timeout an attempt may
	// stay running before StartAttempt declares it unknown (its runner or
	// execution was lost, so no timeout fired).
	OverdueGrace time.Duration
	// NowFunc is the clock; time.Now when nil.
	NowFunc func() time.Time
	Logger  *slog.Logger
}

// Tasks are the logic of the state machine's task functions: start an
// attempt, run it, mark it unknown, hedge it, finalize the job. Each is
// idempotent under duplicate invocation: it re-reads the job and lets the
// domain decide, so a redelivery finds the work done and says so.
type Tasks struct {
	cfg TasksConfig
	log *slog.Logger
	now func() time.Time
}

// NewTasks checks the required dependencies and defaults the rest.
func NewTasks(c TasksConfig) (*Tasks, error) {
	switch {
	case c.Engine == nil, c.Catalog == nil, c.Providers == nil, c.Certifications == nil:
		return nil, errors.New("lifecycle: tasks need an engine, a catalog, providers and certifications")
	case c.CallTimeout <= 0:
		return nil, errors.New("lifecycle: CallTimeout must be positive")
	}
	if len(c.Wait.Steps) == 0 {
		c.Wait = job.DefaultWait()
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.OverdueGrace <= 0 {
		c.OverdueGrace = job.DefaultOverdueGrace(c.CallTimeout)
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Tasks{cfg: c, log: c.Logger, now: c.NowFunc}, nil
}

// JobInput is the execution input and the input of job-level tasks.
type JobInput struct {
	JobID string `json:"job_id"`
}

// AttemptInput names one attempt.
type AttemptInput struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
}

// Step is StartAttempt's decision, routed by the state machine's Choice.
type Step struct {
	Action            job.Action `json:"action"`
	Attempt           int        `json:"attempt,omitempty"`
	Provider          string     `json:"provider,omitempty"`
	TimeoutSeconds    int        `json:"timeout_seconds,omitempty"`
	HedgeAfterSeconds *int       `json:"hedge_after_seconds,omitempty"`
	WaitSeconds       int        `json:"wait_seconds,omitempty"`
	Blocker           int        `json:"blocked_by,omitempty"`
}

// HedgeStep is the hedge task's decision.
type HedgeStep struct {
	Action         job.Action `json:"action"` // run or none
	Attempt        int        `json:"attempt,omitempty"`
	Provider       string     `json:"provider,omitempty"`
	TimeoutSeconds int        `json:"timeout_seconds,omitempty"`
}

// AttemptResult reports how an attempt ended.
type AttemptResult struct {
	JobID   string           `json:"job_id"`
	Attempt int              `json:"attempt"`
	State   job.AttemptState `json:"state"`
	Won     bool             `json:"won"`
}

// JobResult reports a job's status.
type JobResult struct {
	JobID  string     `json:"job_id"`
	Status job.Status `json:"status"`
}

// ceilSeconds rounds up: Step Functions waits and timeouts are whole seconds.
func ceilSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

func (w *Tasks) load(ctx context.Context, id string) (job.Job, JobType, error) {
	j, err := w.cfg.Engine.Get(ctx, id)
	if err != nil {
		return job.Job{}, nil, err
	}
	jt, ok := w.cfg.Catalog.Lookup(j.Type)
	if !ok {
		return j, nil, &TaskError{Name: ErrNameUnknownJobType, Message: fmt.Sprintf("job type %q is not known to this build", j.Type)}
	}
	return j, jt, nil
}

// policy reads the certifications of the job's fallback providers.
func (w *Tasks) policy(ctx context.Context, j job.Job, jt JobType) (job.Policy, error) {
	certified := map[string]bool{}
	for _, p := range job.CertificationsNeeded(j) {
		ok, err := w.cfg.Certifications.Certified(ctx, j.Type, jt.ContractVersion(), p)
		if err != nil {
			return job.Policy{}, err
		}
		certified[p] = ok
	}
	return job.Policy{MaxAttempts: jt.MaxAttempts(), CertifiedFunc: func(p string) bool { return certified[p] }, Wait: w.cfg.Wait}, nil
}

// StartAttempt decides the job's next step and, when it is to run a new
// attempt, starts it (refused while an attempt is starting or unknown).
func (w *Tasks) StartAttempt(ctx context.Context, in JobInput) (Step, error) {
	j, jt, err := w.load(ctx, in.JobID)
	if err != nil {
		return Step{}, err
	}
	for _, n := range job.Overdue(j, jt.Timeout()+w.cfg.OverdueGrace, w.now()) {
		w.log.WarnContext(ctx, "attempt_overdue", "job_id", j.ID, "attempt", n)
		if j, err = w.cfg.Engine.MarkUnknown(ctx, j.ID, n, "still running past its timeout with no runner watching"); err != nil {
			return Step{}, err
		}
	}
	for range 8 {
		pol, err := w.policy(ctx, j, jt)
		if err != nil {
			return Step{}, err
		}
		plan := job.Next(j, pol, w.now())
		switch plan.Action {
		case job.ActionDone, job.ActionFinalize:
			return Step{Action: plan.Action}, nil
		case job.ActionWait:
			w.log.InfoContext(ctx, "attempt_blocked", "job_id", j.ID, "attempt", plan.Blocker, "wait_seconds", ceilSeconds(plan.Wait))
			return Step{Action: job.ActionWait, WaitSeconds: ceilSeconds(plan.Wait), Blocker: plan.Blocker}, nil
		}
		a, ok := j.Attempt(plan.Attempt)
		if !ok {
			var err error
			j, a, err = w.cfg.Engine.StartAttempt(ctx, j.ID, plan.Provider)
			var blocked *job.BlockedError
			var finished *job.FinishedError
			if errors.As(err, &blocked) || errors.As(err, &finished) {
				continue // someone else moved the job: decide again on what is there now
			}
			if err != nil {
				return Step{}, err
			}
		}
		step := Step{Action: job.ActionRun, Attempt: a.Number, Provider: a.Provider, TimeoutSeconds: ceilSeconds(jt.Timeout())}
		if d, ok := jt.HedgeAfter(); ok {
			s := ceilSeconds(d)
			step.HedgeAfterSeconds = &s
		}
		return step, nil
	}
	return Step{}, fmt.Errorf("%w %s", ErrContention, in.JobID)
}

// Hedge starts one more attempt on the next certified provider if attempt n
// is still running silently and the job has no outcome.
func (w *Tasks) Hedge(ctx context.Context, in AttemptInput) (HedgeStep, error) {
	j, jt, err := w.load(ctx, in.JobID)
	if err != nil {
		return HedgeStep{}, err
	}
	run := func(a job.Attempt) HedgeStep {
		return HedgeStep{Action: job.ActionRun, Attempt: a.Number, Provider: a.Provider, TimeoutSeconds: ceilSeconds(jt.Timeout())}
	}
	pol, err := w.policy(ctx, j, jt)
	if err != nil {
		return HedgeStep{}, err
	}
	plan, ok := job.NextHedge(j, in.Attempt, pol)
	if !ok {
		return HedgeStep{Action: job.ActionNone}, nil
	}
	if a, ok := j.Attempt(plan.Attempt); ok {
		return run(a), nil // started before, never claimed: issue it again
	}
	_, a, err := w.cfg.Engine.StartHedge(ctx, j.ID, plan.Provider)
	var blocked *job.BlockedError
	var finished *job.FinishedError
	if errors.As(err, &blocked) || errors.As(err, &finished) {
		return HedgeStep{Action: job.ActionNone}, nil
	}
	if err != nil {
		return HedgeStep{}, err
	}
	return run(a), nil
}

// MarkUnknown records that the attempt outlived its timeout.
func (w *Tasks) MarkUnknown(ctx context.Context, in AttemptInput) (AttemptResult, error) {
	j, err := w.cfg.Engine.MarkUnknown(ctx, in.JobID, in.Attempt, "no answer within the attempt timeout")
	if err != nil {
		return AttemptResult{}, err
	}
	a, _ := j.Attempt(in.Attempt)
	return AttemptResult{JobID: j.ID, Attempt: a.Number, State: a.State, Won: j.CompletedBy == a.Number}, nil
}

// Finalize fails the job with the last attempt's error once no provider is
// left. It is a no-op when the job has an outcome or work remains.
func (w *Tasks) Finalize(ctx context.Context, in JobInput) (JobResult, error) {
	j, jt, err := w.load(ctx, in.JobID)
	if err != nil {
		return JobResult{}, err
	}
	pol, err := w.policy(ctx, j, jt)
	if err != nil {
		return JobResult{}, err
	}
	plan := job.Next(j, pol, w.now())
	if plan.Action != job.ActionFinalize {
		return JobResult{JobID: j.ID, Status: j.Status}, nil
	}
	j, err = w.cfg.Engine.Fail(ctx, j.ID, *plan.Failure)
	var finished *job.FinishedError
	if errors.As(err, &finished) {
		return JobResult{JobID: j.ID, Status: finished.Status}, nil
	}
	if err != nil {
		return JobResult{}, err
	}
	return JobResult{JobID: j.ID, Status: j.Status}, nil
}
