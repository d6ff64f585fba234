package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/tracing/semconv"
)

// A job whose open attempts are all work at providers is parked (issue
// 40): its run ends the execution (park), and whoever later applies the
// end of that work, the webhook or the scheduled pass (Poller), starts the
// run the job then needs (wake).

// park ends the run of a parked job (job.Parked): only work at providers
// is open, so the execution ends here, and the webhook or the scheduled
// pass wakes the job when the work ends; no state transition is spent
// while it waits.
func (w *Tasks) park(ctx context.Context, j job.Job) RunResult {
	var on job.Attempt
	for _, a := range j.Open() {
		if on.Remote == nil || a.Remote.NextPollAt.Before(on.Remote.NextPollAt) {
			on = a
		}
	}
	w.log.InfoContext(ctx, "job_parked", "job_id", j.ID, "attempt", on.Number, "provider", on.Provider,
		"provider_work_id", on.Remote.ID, "next_poll_at", on.Remote.NextPollAt, "deadline", on.Remote.Deadline)
	return RunResult{JobID: j.ID, Status: j.Status, Parked: parkedOn(on)}
}

// parkedOn says what a parked job waits on.
func parkedOn(a job.Attempt) string {
	if r := a.Remote; r.IsLine() {
		return fmt.Sprintf("attempt %d's batch line %s at %s (sent by %s, deadline %s)", a.Number, r.Line, a.Provider,
			r.NextPollAt.UTC().Format(time.RFC3339), r.Deadline.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("attempt %d's work %s at %s (next poll %s, deadline %s)", a.Number, a.Remote.ID, a.Provider,
		a.Remote.NextPollAt.UTC().Format(time.RFC3339), a.Remote.Deadline.UTC().Format(time.RFC3339))
}

// wake starts the execution a job needs once the work it was parked on
// ended (job.NeedsRun: a fallback, its failure, a wait for providers are
// that run's to decide), named from the job alone (job.ExecutionName), so
// every applier of the same end (a webhook, its redelivery, the pass)
// starts the same one. Without a starter (the run function: its own
// execution goes on) it starts nothing. A start that failed is an error:
// the webhook's provider redelivers, and the sweeper starts a job left
// stranded (job.Stranded).
func (w *Tasks) wake(ctx context.Context, j job.Job) (err error) {
	if w.cfg.Starter == nil || !job.NeedsRun(j) {
		return nil
	}
	ctx, span := startSpan(ctx, w.cfg.Engine.Tracer(), semconv.SpanWake, j)
	defer func() { span.End(err) }()
	started, err := w.cfg.Starter.Start(ctx, j)
	if err != nil {
		return fmt.Errorf("%w: start the run of job %s: %w", ErrUnavailable, j.ID, err)
	}
	w.log.InfoContext(ctx, "job_woken", "job_id", j.ID, "execution", job.ExecutionName(j), "started", started)
	return nil
}
