package job_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

func TestPollSchedule(t *testing.T) {
	t.Parallel()
	s := job.DefaultPollSchedule()
	tests := []struct {
		age  time.Duration
		tier job.Tier
		want time.Duration
	}{
		{0, job.TierNow, 30 * time.Second},
		{20 * time.Second, job.TierNow, 30 * time.Second},
		{40 * time.Second, job.TierNow, 40 * time.Second},
		{time.Hour, job.TierNow, 30 * time.Minute},
		{time.Hour, job.TierFlex2h, 30 * time.Minute},
		{3 * time.Hour, job.TierFlex8h, 2 * time.Hour},
	}
	for _, tc := range tests {
		if got := s.Next(tc.age, tc.tier); got != tc.want {
			t.Errorf("Next(%s, %s) = %s, want %s", tc.age, tc.tier, got, tc.want)
		}
	}
	// The asks while work runs 10 min, and in its first hour, as
	// docs/long-jobs.md and the bench say.
	asks := func(until time.Duration) int {
		n, age := 0, time.Duration(0)
		for {
			age += s.Next(age, job.TierNow)
			if age > until {
				return n
			}
			n++
		}
	}
	if got := asks(10 * time.Minute); got != 5 {
		t.Errorf("work running 10 min was asked about %d times while it ran, want 5", got)
	}
	if got := asks(time.Hour); got != 7 {
		t.Errorf("work's first hour: %d asks, want 7", got)
	}
}

// submitted is a job whose attempt 1 runs (launched and claimed).
func submitted(t *testing.T) job.Job {
	t.Helper()
	j := newJob(t)
	return after(job.DecideLaunch(j, "p", t0))
}

func TestDecideSubmitted(t *testing.T) {
	t.Parallel()
	s := job.RemotePolicy{Poll: job.DefaultPollSchedule()}
	j := submitted(t)
	at := t0.Add(time.Second)
	done := after(job.DecideSubmitted(j, 1, job.Remote{ID: "resp_1", Status: "queued", Tier: job.TierNow, SubmittedAt: t0}, s, at))
	a, _ := done.Attempt(1)
	if a.State != job.AttemptRunning || a.Remote == nil || a.Remote.ID != "resp_1" || !a.Remote.NextPollAt.Equal(at.Add(30*time.Second)) {
		t.Fatalf("attempt %+v remote %+v", a, a.Remote)
	}
	// Given up after the default processing time and grace.
	if want := t0.Add(job.DefaultRemoteProcessing + job.DefaultRemoteGrace); !a.Remote.Deadline.Equal(want) {
		t.Fatalf("deadline %s, want %s", a.Remote.Deadline, want)
	}
	if done.Revision != j.Revision+1 || done.Version != j.Version {
		t.Fatalf("a bookkeeping write must move the revision only: %d/%d → %d/%d", j.Revision, j.Version, done.Revision, done.Version)
	}
	// The same work again is a no-op; other work, or an ID no one could
	// look up, is refused.
	if tr, err := job.DecideSubmitted(done, 1, job.Remote{ID: "resp_1"}, s, at); err != nil || !tr.Noop() {
		t.Fatalf("same work again: %v, noop %v", err, tr.Noop())
	}
	for name, r := range map[string]job.Remote{"other work": {ID: "resp_2"}} {
		var re *job.RemoteError
		if _, err := job.DecideSubmitted(done, 1, r, s, at); !errors.As(err, &re) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := job.DecideSubmitted(j, 1, job.Remote{ID: "bad id"}, s, at); err == nil {
		t.Error("an id with a space was recorded")
	}
	// Not yet due, then due; a cancelled job owes a cancel at once.
	if due := job.Dues(done, at); len(due) != 0 {
		t.Fatalf("due before its poll: %v", due)
	}
	if due := job.Dues(done, at.Add(30*time.Second)); len(due) != 1 || due[0].Kind != job.DuePoll {
		t.Fatalf("not due at its poll: %v", due)
	}
	cancelled := after(job.DecideCancel(done, at))
	if due := job.Dues(cancelled, at); len(due) != 1 || due[0].Kind != job.DueCancel {
		t.Fatalf("a cancelled job's work owes no cancel: %v", due)
	}
	asked := after(job.DecideCancelRemote(cancelled, 1, s, at))
	if due := job.Dues(asked, at); len(due) != 0 {
		t.Fatalf("a cancel is owed twice: %v", due)
	}
	// A cancel the provider never confirms is given up after its grace.
	if a, _ := asked.Attempt(1); !a.Remote.Deadline.Equal(at.Add(job.DefaultCancelGrace)) {
		t.Fatalf("deadline after the cancel: %s", a.Remote.Deadline)
	}
	ended := after(job.DecideRemoteCancelled(asked, 1, job.Call{}, at))
	if a, _ := ended.Attempt(1); a.State != job.AttemptCancelled || ended.Unsettled() {
		t.Fatalf("after the provider's cancel: %+v, unsettled %v", a, ended.Unsettled())
	}
}

// TestRemoteWorkIsNeverOverdue: a run that ends leaves an asynchronous
// attempt running at its provider; no timeout makes it unknown, and the
// job waits for its next poll.
func TestRemoteWorkIsNeverOverdue(t *testing.T) {
	t.Parallel()
	j := after(job.DecideSubmitted(submitted(t), 1, job.Remote{ID: "resp_1", Tier: job.TierNow, SubmittedAt: t0}, job.RemotePolicy{Poll: job.DefaultPollSchedule()}, t0))
	if got := job.Overdue(j, time.Minute, t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("overdue: %v", got)
	}
	plan := job.Next(j, job.Policy{MaxAttempts: 3}, t0.Add(2*time.Second))
	if plan.Action != job.ActionWait || plan.Blocker != 1 || plan.Wait != 28*time.Second {
		t.Fatalf("plan = %+v, want a wait of 28 s for attempt 1's poll", plan)
	}
}
