package apigw

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// TestAStreamReadsAtTheRunningPaceWhileAnAttemptIsDue: a job with an
// attempt starting or running, or one just created or between attempts
// (not waiting for a provider), is read at the running pace; a job idle
// for freshJob, waiting, or over at the idle pace.
func TestAStreamReadsAtTheRunningPaceWhileAnAttemptIsDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &StreamHandler{pollRunning: time.Millisecond, pollIdle: time.Second, now: func() time.Time { return now }}
	attempt := func(s job.AttemptState) []job.Attempt { return []job.Attempt{{Number: 1, State: s}} }
	tests := []struct {
		name string
		j    job.Job
		want time.Duration
	}{
		{"JustCreated", job.Job{Status: job.StatusPending, UpdatedAt: now.Add(-50 * time.Millisecond)}, time.Millisecond},
		{"Starting", job.Job{Status: job.StatusRunning, Attempts: attempt(job.AttemptStarting), UpdatedAt: now.Add(-time.Hour)}, time.Millisecond},
		{"Running", job.Job{Status: job.StatusRunning, Attempts: attempt(job.AttemptRunning), UpdatedAt: now.Add(-time.Hour)}, time.Millisecond},
		{"BetweenAttempts", job.Job{Status: job.StatusRunning, Attempts: attempt(job.AttemptFailed), UpdatedAt: now.Add(-time.Second)}, time.Millisecond},
		{"PendingLong", job.Job{Status: job.StatusPending, UpdatedAt: now.Add(-freshJob)}, time.Second},
		{"Unknown", job.Job{Status: job.StatusUnknown, Attempts: attempt(job.AttemptUnknown), UpdatedAt: now.Add(-time.Minute)}, time.Second},
		{"Waiting", job.Job{Status: job.StatusPending, Waiting: &job.Waiting{}, UpdatedAt: now}, time.Second},
		{"Over", job.Job{Status: job.StatusSucceeded, Attempts: attempt(job.AttemptSucceeded), UpdatedAt: now}, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := h.pollEvery(tc.j); got != tc.want {
				t.Errorf("pollEvery = %v, want %v", got, tc.want)
			}
		})
	}
}
