package lifecycle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// TestHold: after a run that ended without a signal of its own, the
// attempts it was running are unknown — never failed — unless never
// claimed; the wait before the next run follows the schedule while an
// attempt is open.
func TestHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	running := func(t *testing.T, r *rig, id string) { r.claim(t, id, r.start(t, id, primary).Number) }
	tests := []struct {
		name    string
		jobType string
		setup   func(t *testing.T, r *rig, id string)
		error   string // the error the state machine caught from the run
		states  []job.AttemptState
		reason  string // in attempt 1's error, when it was decided here
		wait    int
		written bool
		events  []string
	}{
		{name: "AfterTheRunsTimeout", setup: running, error: "States.Timeout", states: []job.AttemptState{job.AttemptUnknown},
			reason: "no answer within the run's timeout", wait: 60, written: true,
			events: []string{"started 1 sim-primary", "unknown 1"}},
		{name: "AfterACrash", setup: running, error: "Lambda.Unknown", states: []job.AttemptState{job.AttemptUnknown},
			reason: "its run ended without a report (Lambda.Unknown)", wait: 60, written: true,
			events: []string{"started 1 sim-primary", "unknown 1"}},
		{name: "NeverClaimed", setup: func(t *testing.T, r *rig, id string) { r.start(t, id, primary) }, error: "States.Timeout",
			states: []job.AttemptState{job.AttemptFailed}, reason: "the provider was not called", wait: 0, written: true,
			events: []string{"started 1 sim-primary"}},
		{name: "BothHedgedAttempts", jobType: "demo-hedge", setup: func(t *testing.T, r *rig, id string) {
			running(t, r, id)
			if _, _, err := r.eng.StartHedge(ctx, id, fallback); err != nil {
				t.Fatal(err)
			}
			r.claim(t, id, 2)
		}, error: "States.Timeout", states: []job.AttemptState{job.AttemptUnknown, job.AttemptUnknown},
			reason: "no answer within the run's timeout", wait: 60, written: true,
			events: []string{"started 1 sim-primary", "started 2 sim-fallback", "unknown 1", "unknown 2"}},
		{name: "WaitOpenLeavesARunningAttempt", setup: running, error: string(job.SignalWaitOpen),
			states: []job.AttemptState{job.AttemptRunning}, wait: 60, events: []string{"started 1 sim-primary"}},
		{name: "WaitOpenOnAnUnknownAttempt", setup: func(t *testing.T, r *rig, id string) {
			running(t, r, id)
			if _, err := r.eng.MarkUnknown(ctx, id, 1, "timeout"); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(2 * time.Minute) // past the schedule's first step
		}, error: string(job.SignalWaitOpen), states: []job.AttemptState{job.AttemptUnknown}, wait: 15 * 60,
			events: []string{"started 1 sim-primary", "unknown 1"}},
		{name: "Done", setup: func(t *testing.T, r *rig, id string) {
			running(t, r, id)
			if _, err := r.eng.Complete(ctx, id, 1, good(primary), ""); err != nil {
				t.Fatal(err)
			}
		}, error: "States.Timeout", states: []job.AttemptState{job.AttemptSucceeded}, wait: 0,
			events: []string{"started 1 sim-primary"}},
		{name: "Pending", setup: func(*testing.T, *rig, string) {}, error: "States.Timeout", wait: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			jobType := "demo"
			if tc.jobType != "" {
				jobType = tc.jobType
			}
			j := r.create(t, jobType, `{"prompt":"hello"}`)
			tc.setup(t, r, j.ID)
			before := r.get(t, j.ID)
			res := r.hold(t, j.ID, tc.error)
			sameJSON(t, "hold", res, lifecycle.HoldResult{JobID: j.ID, WaitSeconds: tc.wait})
			after := r.get(t, j.ID)
			if written := after.Revision != before.Revision; written != tc.written {
				t.Fatalf("written = %v, want %v", written, tc.written)
			}
			if len(after.Attempts) != len(tc.states) {
				t.Fatalf("%d attempts, want %d", len(after.Attempts), len(tc.states))
			}
			for i, want := range tc.states {
				if a := attemptOf(t, after, i+1); a.State != want {
					t.Fatalf("attempt %d is %s, want %s", i+1, a.State, want)
				}
			}
			if tc.reason != "" {
				if a := attemptOf(t, after, 1); a.Error == nil || !strings.Contains(a.Error.Message, tc.reason) {
					t.Fatalf("attempt 1's error %+v lacks %q", a.Error, tc.reason)
				}
			}
			sameEvents(t, r.events, tc.events...)
			// A redelivered hold finds its work done.
			sameJSON(t, "redelivered hold", r.hold(t, j.ID, tc.error), res)
			if again := r.get(t, j.ID); again.Revision != after.Revision {
				t.Fatalf("a redelivered hold wrote: revision %d→%d", after.Revision, again.Revision)
			}
		})
	}

	// The rule: unknown until it ends. An answer arriving after the hold
	// still completes the job.
	t.Run("ALateAnswerStillWins", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		running(t, r, j.ID)
		r.hold(t, j.ID, "States.Timeout")
		c, err := r.eng.Complete(ctx, j.ID, 1, good(primary), "req-late")
		if err != nil || !c.Won || c.Job.Status != job.StatusSucceeded {
			t.Fatalf("late answer: %+v / %v", c, err)
		}
		if res := r.hold(t, j.ID, string(job.SignalWaitOpen)); res.WaitSeconds != 0 {
			t.Fatalf("a done job waits %d s", res.WaitSeconds)
		}
	})
}
