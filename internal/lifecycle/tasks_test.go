package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
)

// sameJSON compares task answers through their JSON form, as the state
// machine sees them.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("%s = %s, want %s", what, g, w)
	}
}

func seconds(n int) *int { return &n }

func TestStartAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RunsANewAttempt", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			jobType string
			hedge   *int
		}{
			{"demo", nil},
			{"demo-hedge", seconds(1)}, // 500ms, in whole seconds
		}
		for _, tc := range tests {
			t.Run(tc.jobType, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.create(t, tc.jobType, `{"prompt":"hello"}`)
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionRun, Attempt: 1, Provider: primary, TimeoutSeconds: 2, HedgeAfterSeconds: tc.hedge})
				if a := attemptOf(t, r.get(t, j.ID), 1); a.State != job.AttemptStarting || a.Provider != primary || a.Hedge {
					t.Fatalf("attempt 1 = %+v", a)
				}
				sameEvents(t, r.events, "started 1 sim-primary")
			})
		}
	})

	t.Run("ReissuesAnUnclaimedStart", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		first, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
		if err != nil {
			t.Fatal(err)
		}
		before := r.get(t, j.ID)
		again, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "the redelivered step", again, first)
		if after := r.get(t, j.ID); after.Revision != before.Revision || after.AttemptCount != 1 {
			t.Fatalf("the re-issue wrote: revision %d→%d, attempts %d", before.Revision, after.Revision, after.AttemptCount)
		}
		sameEvents(t, r.events, "started 1 sim-primary")
	})

	t.Run("WaitsOnTheBlocker", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name    string
			setup   func(t *testing.T, r *rig, id string)
			blocker int
			// elapsed moves the clock before a second look (0: none).
			elapsed  time.Duration
			laterSec int
		}{
			{name: "Running", blocker: 1, setup: func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
			}},
			{name: "Unknown", blocker: 1, elapsed: 2 * time.Minute, laterSec: 15 * 60, setup: func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, err := r.eng.MarkUnknown(ctx, id, 1, "timeout"); err != nil {
					t.Fatal(err)
				}
			}},
			{name: "HedgeStartingBesideARunningAttempt", blocker: 2, setup: func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, _, err := r.eng.StartHedge(ctx, id, fallback); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				tc.setup(t, r, j.ID)
				before := r.get(t, j.ID)
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionWait, WaitSeconds: 60, Blocker: tc.blocker})
				if after := r.get(t, j.ID); after.Revision != before.Revision {
					t.Fatalf("waiting wrote: revision %d→%d", before.Revision, after.Revision)
				}
				if logged(r.logs, "attempt_blocked") != 1 {
					t.Fatalf("attempt_blocked not logged once:\n%s", r.logs)
				}
				if tc.elapsed > 0 {
					r.clock.Advance(tc.elapsed)
					step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
					if err != nil {
						t.Fatal(err)
					}
					sameJSON(t, "step later", step, lifecycle.Step{Action: job.ActionWait, WaitSeconds: tc.laterSec, Blocker: tc.blocker})
				}
			})
		}
	})

	t.Run("RunsACertifiedFallback", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.failed(t, j.ID, primary, retryable)
		r.certify(t, "demo", fallback)
		step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionRun, Attempt: 2, Provider: fallback, TimeoutSeconds: 2})
		sameEvents(t, r.events, "started 1 sim-primary", "started 2 sim-fallback", "fallback 2 sim-fallback")
	})

	t.Run("Finalizes", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			setup func(t *testing.T, r *rig, id string)
		}{
			{"AfterANonRetryableFailure", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo", fallback)
				r.failed(t, id, primary, nonRetryable)
			}},
			{"WhenTheFallbackIsUncertified", func(t *testing.T, r *rig, id string) {
				r.failed(t, id, primary, retryable)
			}},
			{"WhenEveryProviderFailed", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo", fallback)
				r.failed(t, id, primary, retryable)
				r.failed(t, id, fallback, retryable)
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				tc.setup(t, r, j.ID)
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionFinalize})
			})
		}
	})

	t.Run("Done", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name   string
			finish func(t *testing.T, r *rig, id string)
		}{
			{"Succeeded", func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, err := r.eng.Complete(ctx, id, 1, good(primary), ""); err != nil {
					t.Fatal(err)
				}
			}},
			{"Cancelled", func(t *testing.T, r *rig, id string) {
				if _, err := r.eng.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				tc.finish(t, r, j.ID)
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionDone})
			})
		}
	})

	t.Run("MarksOverdueAttemptsUnknown", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name        string
			elapsed     time.Duration
			wantUnknown bool
		}{
			{"AtTheDeadline", 2*time.Second + overdue, false},
			{"PastTheDeadline", 2*time.Second + overdue + time.Millisecond, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
				r.clock.Advance(tc.elapsed)
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "step", step, lifecycle.Step{Action: job.ActionWait, WaitSeconds: 60, Blocker: 1})
				got := attemptOf(t, r.get(t, j.ID), 1)
				if unknown := got.State == job.AttemptUnknown; unknown != tc.wantUnknown {
					t.Fatalf("attempt 1 is %s after %s, want unknown=%v", got.State, tc.elapsed, tc.wantUnknown)
				}
				if tc.wantUnknown {
					if !got.UnknownSince.Equal(r.clock.Now()) || logged(r.logs, "attempt_overdue") != 1 {
						t.Fatalf("unknown since %s; logs:\n%s", got.UnknownSince, r.logs)
					}
					sameEvents(t, r.events, "started 1 sim-primary", "unknown 1")
				}
			})
		}
	})

	t.Run("DecidesAgainAfterLosingARace", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			// competitor writes between the task's read and its start.
			competitor func(r *rig, id string) error
			want       lifecycle.Step
		}{
			{"ToAnotherStart", func(r *rig, id string) error {
				_, _, err := r.other.StartAttempt(ctx, id, primary)
				return err
			}, lifecycle.Step{Action: job.ActionRun, Attempt: 1, Provider: primary, TimeoutSeconds: 2}},
			{"ToACancel", func(r *rig, id string) error {
				_, err := r.other.Cancel(ctx, id)
				return err
			}, lifecycle.Step{Action: job.ActionDone}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				var competed error
				r.st.interleave(func() { competed = tc.competitor(r, j.ID) })
				step, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil || competed != nil {
					t.Fatalf("start: %v (competitor: %v)", err, competed)
				}
				sameJSON(t, "step", step, tc.want)
				if got := r.get(t, j.ID); got.AttemptCount > 1 {
					t.Fatalf("the race made %d attempts", got.AttemptCount)
				}
				sameEvents(t, r.events) // the task started nothing itself
			})
		}
	})

	t.Run("JobNotFound", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		if _, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: job.NewID("nobody", "nothing")}); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("err = %v, want job.ErrNotFound", err)
		}
	})
}

// TestUnknownJobType: every task that needs the job type names the error
// the state machine catches.
func TestUnknownJobType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tasks := map[string]func(r *rig, id string) error{
		"StartAttempt": func(r *rig, id string) error {
			_, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: id})
			return err
		},
		"Hedge": func(r *rig, id string) error {
			_, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: id, Attempt: 1})
			return err
		},
		"Finalize": func(r *rig, id string) error {
			_, err := r.tasks.Finalize(ctx, lifecycle.JobInput{JobID: id})
			return err
		},
	}
	for name, task := range tasks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.create(t, "no-such-type", `{"prompt":"x"}`)
			te := taskError(t, task(r, j.ID), lifecycle.ErrNameUnknownJobType)
			if !strings.Contains(te.Message, "no-such-type") {
				t.Fatalf("message %q does not name the type", te.Message)
			}
			if got := r.get(t, j.ID); got.Revision != 0 {
				t.Fatalf("an unknown type's job was written: revision %d", got.Revision)
			}
		})
	}
}

func TestMarkUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		setup   func(t *testing.T, r *rig, id string)
		want    job.AttemptState
		won     bool
		written bool
	}{
		{"Running", func(t *testing.T, r *rig, id string) {
			r.claim(t, id, r.start(t, id, primary).Number)
		}, job.AttemptUnknown, false, true},
		{"NeverClaimed", func(t *testing.T, r *rig, id string) {
			r.start(t, id, primary)
		}, job.AttemptFailed, false, true},
		{"AlreadyWon", func(t *testing.T, r *rig, id string) {
			r.claim(t, id, r.start(t, id, primary).Number)
			if _, err := r.eng.Complete(ctx, id, 1, good(primary), ""); err != nil {
				t.Fatal(err)
			}
		}, job.AttemptSucceeded, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.demo(t)
			tc.setup(t, r, j.ID)
			before := r.get(t, j.ID)
			res, err := r.tasks.MarkUnknown(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
			if err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "result", res, lifecycle.AttemptResult{JobID: j.ID, Attempt: 1, State: tc.want, Won: tc.won})
			after := r.get(t, j.ID)
			if written := after.Revision != before.Revision; written != tc.written {
				t.Fatalf("written = %v, want %v", written, tc.written)
			}
			switch tc.want {
			case job.AttemptUnknown:
				if after.Status != job.StatusUnknown || logged(r.logs, "attempt_unknown") != 1 {
					t.Fatalf("status %s; logs:\n%s", after.Status, r.logs)
				}
			case job.AttemptFailed:
				if a := attemptOf(t, after, 1); a.Error == nil || a.Error.Class != job.ClassRetryable ||
					!strings.Contains(a.Error.Message, "the provider was not called") {
					t.Fatalf("a never-claimed attempt failed with %+v", a.Error)
				}
			}
		})
	}
	t.Run("NoSuchAttempt", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		if _, err := r.tasks.MarkUnknown(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1}); !errors.Is(err, job.ErrAttemptNotFound) {
			t.Fatalf("err = %v, want job.ErrAttemptNotFound", err)
		}
	})
}

func TestHedge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// hedgeable is a demo-hedge job whose attempt 1 runs and whose
	// fallback is certified.
	hedgeable := func(t *testing.T) (*rig, job.Job) {
		t.Helper()
		r := newRig(t)
		j := r.create(t, "demo-hedge", `{"prompt":"hello"}`)
		r.certify(t, "demo-hedge", fallback)
		r.claim(t, j.ID, r.start(t, j.ID, primary).Number)
		return r, j
	}
	hedgeStep := lifecycle.HedgeStep{Action: job.ActionRun, Attempt: 2, Provider: fallback, TimeoutSeconds: 2}

	t.Run("StartsAHedge", func(t *testing.T) {
		t.Parallel()
		r, j := hedgeable(t)
		step, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "hedge", step, hedgeStep)
		got := r.get(t, j.ID)
		if a := attemptOf(t, got, 2); !a.Hedge || a.State != job.AttemptStarting || attemptOf(t, got, 1).State != job.AttemptRunning {
			t.Fatalf("attempts = %+v", got.Attempts)
		}
		sameEvents(t, r.events, "started 1 sim-primary", "started 2 sim-fallback") // a hedge is no fallback
	})

	t.Run("ReissuesAnUnclaimedHedge", func(t *testing.T) {
		t.Parallel()
		r, j := hedgeable(t)
		if _, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
		before := r.get(t, j.ID)
		step, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "the redelivered hedge", step, hedgeStep)
		if after := r.get(t, j.ID); after.Revision != before.Revision || after.AttemptCount != 2 {
			t.Fatalf("the re-issue wrote: revision %d→%d, attempts %d", before.Revision, after.Revision, after.AttemptCount)
		}
	})

	t.Run("None", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			setup func(t *testing.T, r *rig, id string)
		}{
			{"FallbackUncertified", func(t *testing.T, r *rig, id string) {
				r.putCert(t, job.Certification{JobType: "demo-hedge", ContractVersion: "an-older-contract", Provider: fallback, Passed: true})
				r.claim(t, id, r.start(t, id, primary).Number)
			}},
			{"AttemptAlreadyEnded", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo-hedge", fallback)
				r.failed(t, id, primary, retryable)
			}},
			{"JobFinished", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo-hedge", fallback)
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, err := r.eng.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}},
			{"AlreadyHedgedAndClaimed", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo-hedge", fallback)
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, _, err := r.eng.StartHedge(ctx, id, fallback); err != nil {
					t.Fatal(err)
				}
				r.claim(t, id, 2)
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.create(t, "demo-hedge", `{"prompt":"hello"}`)
				tc.setup(t, r, j.ID)
				before := r.get(t, j.ID)
				step, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "hedge", step, lifecycle.HedgeStep{Action: job.ActionNone})
				if after := r.get(t, j.ID); after.Revision != before.Revision {
					t.Fatalf("no hedge, yet the job was written: revision %d→%d", before.Revision, after.Revision)
				}
			})
		}
	})

	t.Run("LosesARace", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name       string
			competitor func(r *rig, id string) error
		}{
			{"ToAnotherHedge", func(r *rig, id string) error {
				_, _, err := r.other.StartHedge(ctx, id, fallback)
				return err
			}},
			{"ToACancel", func(r *rig, id string) error {
				_, err := r.other.Cancel(ctx, id)
				return err
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r, j := hedgeable(t)
				var competed error
				r.st.interleave(func() { competed = tc.competitor(r, j.ID) })
				step, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: j.ID, Attempt: 1})
				if err != nil || competed != nil {
					t.Fatalf("hedge: %v (competitor: %v)", err, competed)
				}
				sameJSON(t, "hedge", step, lifecycle.HedgeStep{Action: job.ActionNone})
				if got := r.get(t, j.ID); got.AttemptCount > 2 {
					t.Fatalf("the race made %d attempts", got.AttemptCount)
				}
			})
		}
	})
}

func TestFinalize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("FailsTheJob", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			setup func(t *testing.T, r *rig, id string)
			want  job.Failure
		}{
			{"WithTheLastError", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo", fallback)
				r.failed(t, id, primary, nonRetryable)
			}, nonRetryable},
			{"WhenEveryProviderFailed", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo", fallback)
				r.failed(t, id, primary, nonRetryable)
				r.failed(t, id, fallback, retryable)
			}, retryable},
			{"NamingTheUncertifiedProviders", func(t *testing.T, r *rig, id string) {
				r.failed(t, id, primary, retryable)
			}, job.Failure{Class: job.ClassUncertified,
				Message: "no certified provider left; uncertified for this contract: sim-fallback; last error: " + retryable.Message}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				tc.setup(t, r, j.ID)
				res, err := r.tasks.Finalize(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "result", res, lifecycle.JobResult{JobID: j.ID, Status: job.StatusFailed})
				got := r.get(t, j.ID)
				if got.Status != job.StatusFailed || got.Version != 1 || got.Error == nil || *got.Error != tc.want {
					t.Fatalf("job: status %s version %d error %+v, want %+v", got.Status, got.Version, got.Error, tc.want)
				}
				if logged(r.logs, "job_failed") != 1 {
					t.Fatalf("job_failed not logged once:\n%s", r.logs)
				}
			})
		}
	})

	t.Run("NoOp", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			setup func(t *testing.T, r *rig, id string)
			want  job.Status
		}{
			{"WhenSucceeded", func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
				if _, err := r.eng.Complete(ctx, id, 1, good(primary), ""); err != nil {
					t.Fatal(err)
				}
			}, job.StatusSucceeded},
			{"WhenCancelled", func(t *testing.T, r *rig, id string) {
				if _, err := r.eng.Cancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}, job.StatusCancelled},
			{"WhileAnAttemptRuns", func(t *testing.T, r *rig, id string) {
				r.claim(t, id, r.start(t, id, primary).Number)
			}, job.StatusRunning},
			{"WhileAFallbackIsLeft", func(t *testing.T, r *rig, id string) {
				r.certify(t, "demo", fallback)
				r.failed(t, id, primary, retryable)
			}, job.StatusRunning},
			{"BeforeAnyAttempt", func(t *testing.T, r *rig, id string) {}, job.StatusPending},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := newRig(t)
				j := r.demo(t)
				tc.setup(t, r, j.ID)
				before := r.get(t, j.ID)
				res, err := r.tasks.Finalize(ctx, lifecycle.JobInput{JobID: j.ID})
				if err != nil {
					t.Fatal(err)
				}
				sameJSON(t, "result", res, lifecycle.JobResult{JobID: j.ID, Status: tc.want})
				if after := r.get(t, j.ID); after.Revision != before.Revision {
					t.Fatalf("a no-op wrote: revision %d→%d", before.Revision, after.Revision)
				}
			})
		}
	})

	t.Run("LosesARaceToAnOutcome", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		j := r.demo(t)
		r.failed(t, j.ID, primary, nonRetryable)
		var competed error
		r.st.interleave(func() { _, competed = r.other.Cancel(ctx, j.ID) })
		res, err := r.tasks.Finalize(ctx, lifecycle.JobInput{JobID: j.ID})
		if err != nil || competed != nil {
			t.Fatalf("finalize: %v (competitor: %v)", err, competed)
		}
		sameJSON(t, "result", res, lifecycle.JobResult{JobID: j.ID, Status: job.StatusCancelled})
		if got := r.get(t, j.ID); got.Status != job.StatusCancelled || got.Error != nil {
			t.Fatalf("job = %s / %+v, want cancelled without error", got.Status, got.Error)
		}
	})
}

// TestCertificationsUnavailable: a store fault while reading certifications
// is the task's error (the state machine retries it), never an attempt's
// failure.
func TestCertificationsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	unavailable := fmt.Errorf("%w: get certification: throttled", lifecycle.ErrUnavailable)
	tasks := []struct {
		name  string
		setup func(t *testing.T, r *rig, id string)
		run   func(r *rig, id string) error
	}{
		{"StartAttempt", func(*testing.T, *rig, string) {}, func(r *rig, id string) error {
			_, err := r.tasks.StartAttempt(ctx, lifecycle.JobInput{JobID: id})
			return err
		}},
		{"Hedge", func(t *testing.T, r *rig, id string) { r.claim(t, id, r.start(t, id, primary).Number) }, func(r *rig, id string) error {
			_, err := r.tasks.Hedge(ctx, lifecycle.AttemptInput{JobID: id, Attempt: 1})
			return err
		}},
		{"Finalize", func(t *testing.T, r *rig, id string) { r.failed(t, id, primary, nonRetryable) }, func(r *rig, id string) error {
			_, err := r.tasks.Finalize(ctx, lifecycle.JobInput{JobID: id})
			return err
		}},
		{"RunAttemptAtTheGate", func(t *testing.T, r *rig, id string) {
			r.failed(t, id, primary, retryable)
			r.start(t, id, fallback)
		}, func(r *rig, id string) error {
			_, err := r.tasks.RunAttempt(ctx, lifecycle.AttemptInput{JobID: id, Attempt: 2})
			return err
		}},
	}
	for _, tc := range tasks {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			j := r.demo(t)
			tc.setup(t, r, j.ID)
			r.st.certErr = unavailable
			if err := tc.run(r, j.ID); !errors.Is(err, lifecycle.ErrUnavailable) {
				t.Fatalf("err = %v, want lifecycle.ErrUnavailable", err)
			}
			got := r.get(t, j.ID)
			if last, _ := got.Last(); got.Status.Terminal() || (last.State == job.AttemptFailed && last.Error.Class == job.ClassUncertified) {
				t.Fatalf("a store fault decided the job: %s, last attempt %+v", got.Status, last)
			}
			if n := r.prov[fallback].calls.Load(); n != 0 {
				t.Fatalf("fallback called %d times", n)
			}
		})
	}
}
